"""The explanation of a drill and the feedback on an answer, built from the shown evidence only.

Every sentence is made from `Facts` (`twice.drills.facts`): the cells of the tables the drill
displays, so each id, time, gap, key, span attribute, checkpoint row and receive count an
explanation names was on the screen (or one click away, in a source the trainee did not open).
A point about a source is only made when that source was exported and holds the rows; nothing
is told that the evidence does not show (no story of what the lab did, no product names).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from twice.drills.curriculum import SOURCE_WORDS, Drill
from twice.drills.facts import Call, Facts, Request, Span, read_facts
from twice.drills.grading import (
    FIX_CHOICES,
    FIX_TEXT,
    LAYER_CHOICES,
    NEED,
    NONE,
    Grade,
    Key,
    answer_key,
    truth_of,
)
from twice.drills.question import Question, question
from twice.layers import LAYERS, Layer, usual_suspects


@dataclass(frozen=True)
class Point:
    source: str  # a SOURCE, or "clocks" / "sources" (what was exported)
    text: str


@dataclass(frozen=True)
class Explanation:
    true_layer: str
    headline: str
    what_happened: str
    gave_away: tuple[Point, ...]
    misled: tuple[Point, ...]
    fix: str
    path: tuple[str, ...]  # the expert's path through the evidence, one line per source

    def lines(self) -> list[str]:
        """Everything the explanation says, one statement a line (the citation test reads it)."""
        return [self.headline, self.what_happened, *(p.text for p in self.gave_away),
                *(p.text for p in self.misled), self.fix, *self.path]


def _q(s: str) -> str:
    return f"'{s}'"


def _n(count: int) -> str:
    """A count in words (a count is read off the rows, not a value shown in a cell)."""
    return ("no", "one", "two", "three", "four", "five")[count] if count <= 5 else "many"


def _pair(f: Facts) -> tuple[Request, Request] | None:
    return (f.requests[0], f.requests[1]) if len(f.requests) >= 2 else None


def _gap(q: Question, a: Request, b: Request) -> str:
    for g in q.gaps:
        if g.first == a.id and g.second == b.id:
            return g.text
    return ""


def _calls(f: Facts, reqs: list[Request]) -> list[Call]:
    out: dict[str, Call] = {}
    for r in reqs:
        call = f.call_of(r)
        if call is not None:
            out.setdefault(call.id, call)
    return list(out.values())


def _keys(a: Request, b: Request) -> str:
    if a.key == "-" and b.key == "-":
        return "Neither request carries an idempotency key, so the provider could not know the " \
               "second was a repeat."
    if a.key == b.key:
        return f"Both requests carry the same idempotency key, {a.key}."
    if "-" in (a.key, b.key):
        return f"Only one of them carries a key ({a.key if a.key != '-' else b.key})."
    return f"The keys differ ({a.key}, {b.key}): each run of the tool made its own key, so " \
           "the provider saw two new requests."


# --------------------------------------------------------------------------- what gave it away


def _provider_points(q: Question, f: Facts, key: Key) -> list[Point]:
    pair = _pair(f)
    if pair is None:
        one = f.requests[0]
        return [Point("provider", f"{f.customer} has one payment request of {f.amount}: "
                                  f"{one.id} at {one.at} ({one.effect}).")]
    a, b = pair
    text = (f"The provider logged two payment requests of {f.amount} for {f.customer}: {a.id} "
            f"at {a.at} and {b.id} at {b.at}, {_gap(q, a, b)} apart.")
    out = [Point("provider", text)]
    if key.true_layer != NONE:
        out.append(Point("provider", _keys(a, b)))
    if key.protected:
        out.append(Point("provider", f"{b.id} was {b.effect}: only {a.id} made a payment "
                                     f"({a.payment})."))
    return out


def _tool_runs(f: Facts, reqs: list[Request]) -> list[tuple[Call, Span, list[Span]]]:
    """Each tool span of the calls behind `reqs`, with the HTTP client spans it holds."""
    return [(call, tool, f.http_spans(tool.id)) for call in _calls(f, reqs)
            for tool in f.tool_spans(call.id)]


def _sdk_points(f: Facts, a: Request, b: Request) -> list[Point]:
    out = [Point("spans", (
        f"One tool span, {tool.id} (tool call {call.id}), holds {_n(len(http))} HTTP client "
        f"spans ({', '.join(s.id for s in http)}) with resend count "
        f"{' and '.join(s.resend for s in http)}: the HTTP client sent the request again inside "
        "one run of the tool.")) for call, tool, http in _tool_runs(f, [a, b]) if len(http) >= 2]
    return out + _one_call_points(f, a, b)


def _gateway_points(f: Facts, a: Request, b: Request) -> list[Point]:
    out = [Point("spans", (
        f"The tool span {tool.id} (tool call {call.id}) holds one HTTP client span, "
        f"{http[0].id}, resend count {http[0].resend}, yet the provider logged two requests "
        f"({a.id}, {b.id}): something between the client and the provider sent it again."))
        for call, tool, http in _tool_runs(f, [a, b]) if len(http) == 1]
    return out + _one_call_points(f, a, b)


def _one_call_points(f: Facts, a: Request, b: Request) -> list[Point]:
    calls = _calls(f, [a, b])
    if len(calls) != 1:
        return []
    c = calls[0]
    return [Point("checkpoints", (
        f"The checkpoints of thread {c.thread} hold one tool call for it, {c.id} (step "
        f"{c.step}), with one result: the model asked once."))]


def _step_points(f: Facts, a: Request, b: Request) -> list[Point]:
    out = _one_call_points(f, a, b)
    calls = _calls(f, [a, b])
    if len(calls) == 1:
        c = calls[0]
        if f.checkpoints_between(c.thread, a.when, b.when) == 0:
            out.append(Point("checkpoints", (
                f"No checkpoint of thread {c.thread} was written between {a.at} and {b.at}, and "
                f"{c.worker} wrote the ones around them: the step ran again inside one run.")))
        if f.spans is not None:
            tools = f.tool_spans(c.id)
            if len(tools) >= 2:
                runs = ", ".join(f"{s.id} ({s.status}, {s.duration})" for s in tools)
                out.append(Point("spans", (
                    f"Tool call {c.id} has {_n(len(tools))} tool spans, {runs}, in trace "
                    f"{tools[0].trace} on {tools[0].worker}: the tool itself ran again, "
                    "each run with its own HTTP client span.")))
            elif len(tools) == 1:
                out.append(Point("spans", (
                    f"Tool call {c.id} has one tool span ({tools[0].id}) for two requests: the "
                    "failed run left no span.")))
    return out


def _redelivery_points(f: Facts, a: Request, b: Request) -> list[Point]:
    out = []
    calls = _calls(f, [a, b])
    c = calls[0] if len(calls) == 1 else None
    thread = c.thread if c is not None else a.thread
    if f.receives:
        got = f.receives_of(thread)
        if len(got) >= 2:
            first, again = got[0], got[-1]
            out.append(Point("queue", (
                f"The queue handed message {first.message} to {first.worker} at {first.at} "
                f"(receive count {first.count}) and to {again.worker} at {again.at} (receive "
                f"count {again.count}): the run was delivered again.")))
    out += _one_call_points(f, a, b)
    if c is not None:
        workers = sorted({r.worker for r in f.checkpoints.itertuples() if r.thread_id == thread
                          and isinstance(r.worker, str)})
        if len(workers) >= 2 and f.checkpoints_between(thread, a.when, b.when) == 0:
            out.append(Point("checkpoints", (
                f"Tool call {c.id} was made on {c.worker}; thread {thread} wrote no checkpoint "
                f"between {a.at} and {b.at}, then went on on another worker "
                f"({', '.join(w for w in workers if w != c.worker)}): the run stopped and "
                "resumed from its checkpoint.")))
        if f.spans is not None:
            http = [s for s in (f.http_span_of(a), f.http_span_of(b)) if s is not None]
            if len(http) == 2 and http[0].worker != http[1].worker:
                out.append(Point("spans", (
                    f"The requests' HTTP client spans are on two workers: {http[0].id} on "
                    f"{http[0].worker} (trace {http[0].trace}) and {http[1].id} on "
                    f"{http[1].worker} (trace {http[1].trace}): two runs, not one.")))
            tools = f.tool_spans(c.id)
            if tools:
                failed = [s for s in tools if s.status == "error" and s.detail != "-"]
                if failed:
                    out.append(Point("spans", (
                        f"The first run's tool span {failed[0].id} ended in error: "
                        f"{_q(failed[0].detail)}.")))
    return out


def _model_points(f: Facts, a: Request, b: Request) -> list[Point]:
    calls = _calls(f, [a, b])
    if len(calls) < 2:
        return []
    c1, c2 = calls[0], calls[1]
    out = [Point("checkpoints", (
        f"Two tool calls in thread {c1.thread}, {c1.id} and {c2.id}, with the same arguments "
        f"{c1.args}: the model asked twice."))]
    out.append(Point("checkpoints", (
        f"The result of {c1.id} was {_q(c1.result)} ({c1.result_status}), though {a.id} had "
        f"{a.effect} {a.payment}: the model read a failure and asked again.")))
    between = f.input_between(c1.thread, c1.when, c2.when)
    if between is None:
        out.append(Point("checkpoints", (
            f"No new input came into thread {c1.thread} between the two calls: nobody asked "
            "for the second charge.")))
    return out


def _control_points(f: Facts, a: Request | None, b: Request | None) -> list[Point]:
    out = []
    reqs = [r for r in (a, b) if r is not None]
    for r in reqs:
        call = f.call_of(r)
        if call is not None:
            out.append(Point("checkpoints", (
                f"{r.id} came from tool call {call.id} in thread {call.thread}, whose result "
                f"was {_q(call.result)}.")))
    if a is not None and b is not None:
        c1, c2 = f.call_of(a), f.call_of(b)
        if c1 is not None and c2 is not None and c1.id != c2.id:
            came = f.input_between(c2.thread, c1.when, c2.when)
            if came is not None:
                out.append(Point("checkpoints", (
                    f"A new input came into thread {came[0]} at {came[1]} (a checkpoint with "
                    f"source input) before tool call {c2.id}: the second charge was asked "
                    "for.")))
    for n in f.neighbours:
        out.append(Point("provider", f"{n.id} at {n.at}, of the same amount, is {_whose(n)}."))
    return out


def _whose(r: Request) -> str:
    if r.customer == "-":
        return "a guest payment (no customer)"
    return f"for another customer, {r.customer}" + (
        f", from thread {r.thread}" if r.thread != "-" else "")


_LAYER_POINTS = {"sdk_retry": _sdk_points, "gateway_retry": _gateway_points,
                 "step_retry": _step_points, "redelivery": _redelivery_points,
                 "model_reemission": _model_points}


def _gave_away(q: Question, f: Facts, key: Key) -> list[Point]:
    out = _provider_points(q, f, key)
    pair = _pair(f)
    if key.true_layer == NONE:
        out += _control_points(f, *(pair or (f.requests[0] if f.requests else None, None)))
    elif pair is not None:
        out += _LAYER_POINTS[key.true_layer](f, *pair)
        if key.true_layer == "redelivery" and pair[0].key == pair[1].key != "-":
            out.append(Point("provider", (
                f"Both created a payment ({pair[0].payment}, {pair[1].payment}) though the key "
                f"was the same: {_gap(q, *pair)} is longer than the provider keeps keys "
                f"({q.gaps[0].band_text}), so the second request counted as new.")))
    return out


# --------------------------------------------------------------------------- what could mislead


def _misled(q: Question, f: Facts, key: Key) -> list[Point]:
    out = []
    layer = key.true_layer
    for g in q.gaps:
        suspects = [s.value for s in usual_suspects(g.band)]
        where = f"The gap {g.text} between {g.first} and {g.second} falls {g.band_text}"
        if layer == NONE:
            out.append(Point("provider", f"{where}, where {' / '.join(suspects)} usually lands: "
                                         "timing alone would call it a duplicate."))
        elif g.band not in LAYERS[Layer(layer)].bands:
            out.append(Point("provider", (
                f"{where}, where {' / '.join(suspects)} usually lands, not {layer}: the "
                "fingerprints outweigh the timing.")))
        elif [s for s in suspects if s != layer]:
            others = " / ".join(s for s in suspects if s != layer)
            out.append(Point("provider", f"{where}, which {layer} shares with {others}: the "
                                         "band alone cannot tell them apart."))
    if f.requests:
        r = f.requests[0]
        if r.raw != r.at:
            out.append(Point("clocks", (
                f"The provider's clock reads {r.raw} for {r.id}; aligned with the agent's "
                f"clock it is {r.at}. Compare the agent's records with the aligned time.")))
    for o in f.other_requests:
        out.append(Point("provider", (
            f"{o.id} ({o.amount}) is another payment of {f.customer}, from thread {o.thread}: "
            "not part of this.")))
    if layer != NONE:
        for n in f.neighbours:
            out.append(Point("provider", f"{n.id} at {n.at} has the same amount but is "
                                         f"{_whose(n)}."))
    case = q.drill.spec
    if "spans" in case.missing:
        if case.undecidable:
            text = ("No traces were exported: without the HTTP client spans, a resend by the "
                    "HTTP client and one by a proxy look the same here (one tool call, two "
                    "requests). Say you need them rather than guess.")
        else:
            text = ("No traces were exported: the checkpoints' tool call ids and checkpoint "
                    "rows have to carry the verdict, and they do.")
        out.append(Point("sources", text))
    if "queue" in case.missing:
        out.append(Point("sources", (
            "The queue's receive log was not exported: no receive count settles it; the "
            "checkpoints' workers and the silence between them do.")))
    pair = _pair(f)
    if "effects_record" in key.fixes and pair is not None and pair[0].key == pair[1].key:
        out.append(Point("provider", (
            f"Both requests carry the same key, {pair[0].key}: the fix for repeats looks in "
            "place, yet the second request made a payment.")))
    if key.protected and pair is not None:
        out.append(Point("provider", (
            f"Two requests reached the provider, but {pair[1].id} was {pair[1].effect}: one "
            "payment, nothing to give back, nothing to fix.")))
    return out


# --------------------------------------------------------------------------- the fix


# the fixes whose text already says to derive the key from the thread and tool call ids: with
# one of them, the derived-key fix is not said a second time
_SAYS_DERIVED_KEY = frozenset(k for k, text in FIX_TEXT.items()
                              if k != "derived_key" and "derive" in text.lower())


def _fix(f: Facts, key: Key) -> str:
    if key.protected:
        pair = _pair(f)
        replayed = f" ({pair[1].id} was {pair[1].effect})" if pair is not None else ""
        return ("Nothing to change: the idempotency key already made the repeat harmless"
                f"{replayed}. Keep sending it; " + FIX_TEXT["derived_key"][0].lower()
                + FIX_TEXT["derived_key"][1:])
    fixes = set(key.fixes)
    if fixes & _SAYS_DERIVED_KEY:
        fixes.discard("derived_key")
    texts = [FIX_TEXT[k] for k in sorted(fixes)]
    pair = _pair(f)
    if pair is not None and key.true_layer not in (NONE, "model_reemission") \
            and not key.protected and "effects_record" not in key.fixes:
        calls = _calls(f, list(pair))
        if len(calls) == 1:
            texts.append(f"Here thread {calls[0].thread} and tool call {calls[0].id} would have "
                         f"given both requests one key, and {pair[1].id} would have been "
                         "replayed.")
    return " ".join(dict.fromkeys(texts))


def _path(drill: Drill, gave: list[Point]) -> list[str]:
    out = []
    for n, source in enumerate(drill.spec.needs, start=1):
        said = [p.text for p in gave if p.source == source]
        out.append(f"{n}. {SOURCE_WORDS[source]}: " + (" ".join(said) if said else
                                                       "not exported; say so."))
    return out


# what repeated the call, in words that hold for every drill of the layer (the evidence of the
# drill says the rest): no queue for a run that resumed without one, no product names
HEADLINES = {
    "sdk_retry": "the HTTP client sent the same request again",
    "gateway_retry": "something between the HTTP client and the provider sent the request again",
    "step_retry": "the tool ran again inside the same run, for the same tool call",
    "redelivery": "the run stopped, was picked up again from its checkpoint, and the tool ran "
                  "again for the same tool call",
    "model_reemission": "the model read a failure and asked for the same charge again",
}


def _headline(drill: Drill, key: Key) -> str:
    if key.true_layer == NONE:
        return "Not a duplicate: each payment of the customer was asked for."
    head = f"{key.true_layer}: {HEADLINES[key.true_layer]}"
    if key.protected:
        return head + " (protected: one payment)"
    if drill.spec.undecidable:
        missing = ", ".join(SOURCE_WORDS[s] for s in drill.spec.missing)
        return head + f"; but {missing} were not exported, and without them the evidence " \
                      "cannot tell it from the other resend below the agent: the answer is to " \
                      "ask for them."
    return head


def _what_happened(q: Question, f: Facts, key: Key) -> str:
    pair = _pair(f)
    if pair is None:
        r = f.requests[0]
        return f"{f.customer} was charged once for {f.amount} ({r.id}, {r.effect})."
    a, b = pair
    calls = _calls(f, [a, b])
    made = (f"both from tool call {calls[0].id}" if len(calls) == 1 else
            f"from tool calls {' and '.join(c.id for c in calls)}" if calls else
            "no tool call of the checkpoints names them")
    effects = f"{a.id} {a.effect}, {b.id} {b.effect}"
    return f"{f.customer}: {a.id} at {a.at} and {b.id} at {b.at}, {_gap(q, a, b)} apart, " \
           f"{made}; {effects}."


def explain(drill: Drill, folder: Path) -> Explanation:
    q = question(drill, folder)
    f = read_facts(q)
    key = answer_key(drill, truth_of(folder))
    gave = _gave_away(q, f, key)
    return Explanation(key.true_layer, _headline(drill, key), _what_happened(q, f, key),
                       tuple(gave), tuple(_misled(q, f, key)), _fix(f, key),
                       tuple(_path(drill, gave)))


# --------------------------------------------------------------------------- feedback


def _wrong_layer(f: Facts, q: Question, key: Key, chosen: str) -> list[str]:
    """Why `chosen` does not fit this evidence."""
    pair = _pair(f)
    truth = key.true_layer
    if chosen.startswith(NEED):
        source = chosen[len(NEED):]
        if source not in q.drill.spec.missing:
            title = SOURCE_WORDS[source][0].upper() + SOURCE_WORDS[source][1:]
            shown = q.shown[source]
            if shown is not None and shown.empty:
                return [f"{title}: no records for these threads, and the answer does not "
                        "need them."]
            return [f"{title}: exported for this incident, and "
                    f"{'they decide' if source == 'spans' else 'it decides'} it."]
        return [f"Without {SOURCE_WORDS[source]} the other sources still decide it: " +
                " ".join(p.text for p in _gave_away(q, f, key)
                         if p.source not in ("provider", source))]
    case = q.drill.spec
    if case.undecidable and chosen in ("sdk_retry", "gateway_retry"):
        missing = ", ".join(SOURCE_WORDS[s] for s in case.missing)
        return [f"Nothing shown tells an HTTP client's resend from a proxy's: one tool call, two "
                f"requests {q.gaps[0].text if q.gaps else ''} apart. It was {truth}, but "
                f"{missing} were not exported, and only they would have shown it; say you "
                "need them rather than guess."]
    if pair is None:  # one request for the customer: nothing was repeated
        r = f.requests[0]
        return [f"{f.customer} has one payment request of {f.amount}, {r.id}: nothing was "
                "repeated. Read the customer column: the other requests are other customers'."]
    a, b = pair
    calls = _calls(f, [a, b])
    if chosen == NONE:
        if truth == "model_reemission" and len(calls) >= 2:
            return [f"The model asked again after the result of {calls[0].id} said "
                    f"{_q(calls[0].result)}, and no new input came into the thread: nobody "
                    "asked for the second charge."]
        if len(calls) == 1:
            return [f"One tool call, {calls[0].id}, led to both {a.id} and {b.id}: one intended "
                    "call was executed twice."]
        return [f"{a.id} and {b.id} were both {a.effect if a.effect == b.effect else 'sent'} "
                "for one intended call."]
    if truth == NONE:
        out = []
        if len(calls) >= 2:
            out.append(f"Each request has its own tool call ({calls[0].id}, {calls[1].id}), and "
                       f"the result of {calls[0].id} was {_q(calls[0].result)}.")
            came = f.input_between(calls[1].thread, calls[0].when, calls[1].when)
            if came is not None:
                out.append(f"A new input came into the thread at {came[1]} before "
                           f"{calls[1].id}: the second charge was asked for, nothing was "
                           "re-executed.")
        return out or [f"{a.id} and {b.id} were each asked for."]
    if chosen == "model_reemission" and len(calls) == 1:
        return [f"One tool call id ({calls[0].id}) made both requests: the model asked once."]
    if chosen != "model_reemission" and len(calls) >= 2:
        return [f"The requests come from two tool calls, {calls[0].id} and {calls[1].id}: the "
                f"model asked twice; {chosen} re-executes one call with one tool call id."]
    out = []
    http_a, http_b = f.http_span_of(a), f.http_span_of(b)
    runs = _tool_runs(f, [a, b])
    if chosen == "gateway_retry":
        out += [f"A proxy's resend leaves one client span; here tool span {tool.id} holds "
                f"{_n(len(http))}, resend count {' and '.join(s.resend for s in http)}."
                for _, tool, http in runs if len(http) >= 2]
    if chosen in ("sdk_retry", "gateway_retry"):
        if a.key != b.key and "-" not in (a.key, b.key):
            out.append(f"A resend below the agent repeats the request byte for byte, key "
                       f"included; here the keys differ ({a.key}, {b.key}).")
        if http_a is not None and http_b is not None and http_a.parent != http_b.parent:
            out.append(f"Each request has its own HTTP client span ({http_a.id}, {http_b.id}) "
                       f"under its own tool span ({http_a.parent}, {http_b.parent}), both "
                       f"resend count {http_a.resend}: the tool ran twice.")
        if q.gaps and q.gaps[0].band.value != "seconds":
            out.append(f"A resend below the agent comes within seconds; these are "
                       f"{q.gaps[0].text} apart.")
    if chosen == "sdk_retry" and truth == "gateway_retry":
        out += [f"An HTTP client's resend leaves a second client span with resend count 1; "
                f"here tool span {tool.id} holds one, {http[0].id}, resend count "
                f"{http[0].resend}, for two requests." for _, tool, http in runs if len(http) == 1]
    if chosen == "step_retry":
        if truth in ("sdk_retry", "gateway_retry") and q.gaps and \
                q.gaps[0].band.value == "seconds":
            out.append(f"A step retry waits for the tool to fail (often a client timeout) and "
                       f"backs off; these requests are {q.gaps[0].text} apart.")
        if truth in ("sdk_retry", "gateway_retry") and a.key == b.key != "-":
            out.append(f"A step retry runs the tool again and makes a new key; here both "
                       f"requests carry {a.key}: the tool ran once.")
        elif truth in ("sdk_retry", "gateway_retry") and calls and f.spans is not None:
            tools = f.tool_spans(calls[0].id)
            if len(tools) == 1:
                out.append(f"A step retry leaves a new tool span; here one tool span, "
                           f"{tools[0].id}, holds both attempts.")
        if truth == "redelivery":
            out += _handed_over(f, a, b, calls)
    if chosen == "redelivery":
        thread = calls[0].thread if calls else a.thread
        if f.receives is not None and not f.receives_of(thread):
            out.append(f"A redelivery shows in the queue's receive log; it has no receive for "
                       f"thread {thread}.")
        workers = {c.worker for c in calls}
        if calls and len(workers) == 1 and f.checkpoints_between(
                calls[0].thread, a.when, b.when) == 0 and truth != "redelivery":
            out.append(f"Both attempts ran on {calls[0].worker} inside one run of thread "
                       f"{calls[0].thread}; a redelivered run resumes later, often elsewhere.")
    if chosen == "model_reemission" and not out:
        out.append("The model asks again with a new tool call id; here there is no second "
                   "tool call.")
    return out or [f"The evidence fits {truth}, not {chosen}: " +
                   " ".join(p.text for p in _gave_away(q, f, key) if p.source != "provider")]


def _handed_over(f: Facts, a: Request, b: Request, calls: list[Call]) -> list[str]:
    thread = calls[0].thread if calls else a.thread
    got = f.receives_of(thread) if f.receives else []
    if len(got) >= 2:
        return [f"A step retry stays inside one run; here the queue handed the run to "
                f"{got[-1].worker} again (receive count {got[-1].count})."]
    return [f"A step retry stays inside one run; here thread {thread} wrote no checkpoint "
            f"between {a.at} and {b.at} and went on on another worker."]


def _wrong_fix(f: Facts, key: Key, chosen: str) -> list[str]:
    pair = _pair(f)
    truth = key.true_layer
    if chosen == "nothing":
        if pair is not None:
            return [f"Two payments were made ({pair[0].payment}, {pair[1].payment}): something "
                    "has to change."]
        return ["Something has to change."]
    if truth == NONE:
        return ["Every payment was asked for: there is nothing to fix, and a key or a retry "
                "setting would not have changed it."]
    if chosen == "derived_key" and truth == "model_reemission" and pair is not None:
        calls = _calls(f, list(pair))
        ids = " and ".join(c.id for c in calls)
        return [f"A derived key does not stop it: the model made a new tool call ({ids}), and "
                "a new tool call id derives a new key."]
    if chosen == "derived_key" and "effects_record" in key.fixes and pair is not None:
        return [f"The key was already the same on both requests ({pair[0].key}); it had "
                "expired by the second one. Only a record of the agent's own effects stops a "
                "resume that late."]
    if chosen == "client_key" and truth in ("step_retry", "redelivery"):
        return ["The client reuses its key only on its own retries; here the whole tool ran "
                "again and made a new key."]
    if chosen == "proxy_no_retry" and truth != "gateway_retry":
        return ["Nothing in the evidence shows a proxy resending: the repeat happened above "
                "the HTTP client."]
    if chosen == "visibility_timeout" and truth != "redelivery":
        return ["No queue handed the run over again: a visibility timeout does not come into "
                "it."]
    if chosen == "unknown_outcome" and truth != "model_reemission":
        return ["The model asked once: how a timeout is reported to it does not change this "
                "repeat."]
    if chosen == "effects_record":
        return ["A record of effects would stop it, but it is the remedy for resumes longer "
                f"than the provider keeps keys; here: {choices_words(key.fixes)}."]
    return [f"It does not stop this repeat; the fix is: {choices_words(key.fixes)}."]


def choices_words(fixes: frozenset[str]) -> str:
    return " / ".join(FIX_CHOICES[k] for k in sorted(fixes))


def _said(layer: str) -> str:
    if layer == NONE:
        return "it was not a duplicate"
    if layer.startswith(NEED):
        return f"you need {SOURCE_WORDS[layer[len(NEED):]]}"
    return layer


def feedback(drill: Drill, folder: Path, g: Grade) -> list[str]:
    """Why the answer given is wrong where it is (empty when all of it is right)."""
    q = question(drill, folder)
    f = read_facts(q)
    out = []
    if not g.layer_ok:
        out += [f"You said {_said(g.answer.layer)}. " + " ".join(
            _wrong_layer(f, q, g.key, g.answer.layer))]
    if not g.fix_ok:
        out += _wrong_fix(f, g.key, g.answer.fix)
    if g.missed_sources:
        out.append("You answered without " + ", ".join(SOURCE_WORDS[s] for s in
                                                      g.missed_sources) + ".")
    if len(g.extra_sources) > 1:
        out.append("You opened more than the answer needs: "
                   + ", ".join(SOURCE_WORDS[s] for s in g.extra_sources) + ".")
    return out


def every_feedback(drill: Drill, folder: Path) -> dict[str, list[str]]:
    """The feedback on every wrong layer and every wrong fix (the citation test reads them)."""
    q = question(drill, folder)
    f = read_facts(q)
    key = answer_key(drill, truth_of(folder))
    out = {f"layer:{c}": _wrong_layer(f, q, key, c) for c in LAYER_CHOICES if c not in key.layers}
    out |= {f"fix:{c}": _wrong_fix(f, key, c) for c in FIX_CHOICES if c not in key.fixes}
    return out
