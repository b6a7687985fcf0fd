"""Score `twice analyze` on a corpus of incident folders that carry a truth.json in the corpus
format (`../shared/corpus/README.md`): evidence the lab did not make, the second mirror beside
the lab's own seeds (docs/accuracy.md).

    twice lab eval --corpus DIR [--out PATH]

Each folder under DIR holding a `truth.json` is one case: `inputs` gives the `twice analyze`
flag for each file (without it, the folder itself is analysed). The scoring rule is the
corpus's own:

- for every true duplicate (`duplicates[].requests`, a pair of provider request ids), the
  reported duplicate whose two attempts carry exactly those two request ids; strict: its layer
  is the truth's; honest: strict, or it names exactly one alternative and the truth is its
  layer or that alternative; none such: `missed`;
- a crash (an exit other than 0, or an exception) counts every duplicate and control of the
  case as wrong;
- a false duplicate is any reported pair that is not a true duplicate (controls and noise
  included); a control (`not_duplicates`) is clear when no reported pair holds either of its
  requests; noise (`noise[]`, by request or object ids) may appear in no reported pair.

The tier of a case is the folder above it (`ordinary`, `hard`, `field`); results are given per
tier and in all.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twice.formats import visible

LAYERS = ("sdk_retry", "gateway_retry", "step_retry", "redelivery", "model_reemission")
MISSED = "missed"
CRASHED = "crashed"

# `twice analyze ARGS --format json` -> (exit code, report or None, stderr text, seconds)
Run = Callable[[list[str]], tuple[int, dict[str, Any] | None, str, float]]


@dataclass(frozen=True)
class Case:
    folder: Path
    tier: str
    truth: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.truth.get("case") or self.folder.name)

    def args(self) -> list[str]:
        """The `twice analyze` arguments the truth asks for."""
        inputs = self.truth.get("inputs")
        if not inputs:
            return [str(self.folder)]
        out: list[str] = []
        for flag, name in inputs.items():
            out += [str(flag), str(self.folder / str(name))]
        return out


def find_cases(root: Path) -> list[Case]:
    """Every folder under `root` (itself included) with a truth.json, in path order."""
    cases = []
    for truth_path in sorted(root.rglob("truth.json")):
        folder = truth_path.parent
        truth = json.loads(truth_path.read_text())
        if not isinstance(truth, dict) or "duplicates" not in truth:
            continue  # a lab truth.json, not the corpus format
        tier = folder.parent.name if folder != root else "all"
        cases.append(Case(folder, tier, truth))
    return cases


def _request_ids(attempt: dict[str, Any]) -> set[str]:
    ids = {str(attempt["request_id"])} if attempt.get("request_id") else set()
    aid = str(attempt.get("attempt_id") or "")
    ids.add(aid.split("#", 1)[0])
    return ids


def _ids(attempt: dict[str, Any]) -> set[str]:
    """Every id of an attempt a truth may name it by: request, attempt and object ids."""
    out = _request_ids(attempt)
    if attempt.get("object_id"):
        out.add(str(attempt["object_id"]))
    return out


def reported_pairs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each reported duplicate with the two attempts it joins."""
    out = []
    for group in report.get("groups", []):
        attempts = {a["attempt_id"]: a for a in group.get("attempts", [])}
        for d in group.get("duplicates", []):
            first, second = attempts.get(d["first"], {}), attempts.get(d["second"], {})
            out.append({"duplicate": d, "first": first, "second": second})
    return out


def _carries(pair: dict[str, Any], requests: Iterable[str]) -> bool:
    """The pair's two attempts carry exactly these two request ids."""
    a, b = sorted(requests)
    fa, fb = _request_ids(pair["first"]), _request_ids(pair["second"])
    return (a in fa and b in fb) or (b in fa and a in fb)


def _alternatives(duplicate: dict[str, Any]) -> list[str]:
    return [str(x.get("layer")) for x in duplicate.get("alternatives") or []
            if isinstance(x, dict)]


def score_case(case: Case, code: int, report: dict[str, Any] | None) -> dict[str, Any]:
    """One case's result: each true duplicate's reported layer, controls, false duplicates."""
    truth = case.truth
    crashed = code != 0 or report is None
    pairs = [] if crashed else reported_pairs(report or {})
    duplicates = []
    true_pairs = []
    for dup in truth.get("duplicates", []):
        requests = [str(r) for r in dup["requests"]]
        true_pairs.append(requests)
        found = next((p for p in pairs if _carries(p, requests)), None)
        layer = str(dup["layer"])
        alternatives: list[str] = []
        if crashed:
            reported = CRASHED
        elif found is None:
            reported = MISSED
        else:
            reported = str(found["duplicate"]["layer"])
            alternatives = _alternatives(found["duplicate"])
        strict = reported == layer
        honest = strict or (len(alternatives) == 1 and layer in (reported, alternatives[0]))
        findings = sorted({f["code"] for g in (report or {}).get("groups", [])
                           for f in g.get("findings", [])
                           if any(_request_ids(a) & set(requests) for a in g["attempts"])})
        duplicates.append({
            "case": str(dup.get("case") or case.name), "requests": requests, "layer": layer,
            "reported": reported, "alternatives": alternatives,
            "confidence": None if found is None else found["duplicate"].get("confidence"),
            "strict": strict, "honest": honest,
            "findings_expected": list(dup.get("findings") or []),
            "findings_hit": [c for c in dup.get("findings") or [] if c in findings],
        })
    false = []
    for p in pairs:
        if any(_carries(p, r) for r in true_pairs):
            continue
        d = p["duplicate"]
        false.append({"first": d["first"], "second": d["second"], "layer": d["layer"],
                      "protected": bool(d.get("protected")),
                      "customers": [p["first"].get("subject"), p["second"].get("subject")]})
    held = [_ids(p["first"]) | _ids(p["second"]) for p in pairs]
    controls = []
    for control in truth.get("not_duplicates", []):
        pair = {str(r) for r in control["requests"]}
        controls.append({"requests": sorted(pair),
                         "clear": not crashed and not any(h & pair for h in held)})
    noise_hits = []
    for item in truth.get("noise", []):
        ids = {str(x) for x in [*item.get("requests", []), *item.get("objects", [])]}
        if any(h & ids for h in held):
            noise_hits.append(str(item.get("kind")))
    return {"case": case.name, "tier": case.tier, "folder": str(case.folder),
            "crashed": crashed, "exit": code, "duplicates": duplicates, "controls": controls,
            "false_duplicates": false, "noise_hits": noise_hits}


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    def part(rs: list[dict[str, Any]]) -> dict[str, Any]:
        dups = [d for r in rs for d in r["duplicates"]]
        controls = [c for r in rs for c in r["controls"]]
        expected = sum(len(d["findings_expected"]) for d in dups)
        hit = sum(len(d["findings_hit"]) for d in dups)
        return {
            "cases": len(rs), "duplicates": len(dups),
            "strict": _rate(sum(d["strict"] for d in dups), len(dups)),
            "honest": _rate(sum(d["honest"] for d in dups), len(dups)),
            "crashes": sum(r["crashed"] for r in rs),
            "false_duplicates": sum(len(r["false_duplicates"]) for r in rs),
            "noise_hits": sum(len(r["noise_hits"]) for r in rs),
            "controls": len(controls),
            "controls_clear": _rate(sum(c["clear"] for c in controls), len(controls)),
            "findings_recall": _rate(hit, expected),
        }

    tiers = sorted({r["tier"] for r in results}, key=["ordinary", "hard", "field"].index
                   if all(r["tier"] in ("ordinary", "hard", "field") for r in results) else str)
    confusion: dict[str, Counter[str]] = {}
    for r in results:
        for d in r["duplicates"]:
            confusion.setdefault(d["layer"], Counter())[d["reported"]] += 1
    return {"all": part(results),
            "tiers": {t: part([r for r in results if r["tier"] == t]) for t in tiers},
            "confusion": {t: dict(c) for t, c in sorted(confusion.items())}}


def run_corpus(root: Path, analyze: Run,
               progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    results = []
    for case in find_cases(root):
        code, report, err, seconds = analyze(case.args())
        result = score_case(case, code, report)
        result["seconds"] = round(seconds, 3)
        if result["crashed"]:
            result["error"] = err[-2000:]
        results.append(result)
        if progress is not None:
            progress(result)
    summary = summarize(results)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    return {"summary": summary, "cases": results}


def _pct(value: float | None) -> str:
    return "  n/a" if value is None else f"{100 * value:5.1f}%"


def render(summary: dict[str, Any], title: str = "") -> str:
    lines = [title, ""] if title else []
    lines.append(f"{'tier':<10}{'cases':>6}{'dups':>6}{'strict':>8}{'honest':>8}{'crashes':>9}"
                 f"{'false':>7}{'noise':>7}{'controls clear':>16}{'findings':>10}")
    for name, s in [*summary["tiers"].items(), ("all", summary["all"])]:
        lines.append(f"{name:<10}{s['cases']:>6}{s['duplicates']:>6}{_pct(s['strict']):>8}"
                     f"{_pct(s['honest']):>8}{s['crashes']:>9}{s['false_duplicates']:>7}"
                     f"{s['noise_hits']:>7}{_pct(s['controls_clear']):>16}"
                     f"{_pct(s['findings_recall']):>10}")
    columns = [*LAYERS, MISSED, CRASHED]
    lines += ["", "truth \\ reported".ljust(18) + "".join(
        c.replace("_retry", "").replace("model_reemission", "model_re")
        .replace("redelivery", "redeliv")[:9].rjust(10) for c in columns)]
    for layer, row in summary["confusion"].items():
        lines.append(layer.ljust(18) + "".join(str(row.get(c, 0) or ".").rjust(10)
                                               for c in columns))
    return "\n".join(lines)


def progress_line(r: dict[str, Any]) -> str:
    marks = " ".join(f"{d['layer']}->{d['reported']}{'' if d['strict'] else ' WRONG'}"
                     for d in r["duplicates"])
    extra = ""
    if r["crashed"]:
        tail = (r.get("error") or "").strip().splitlines()
        extra = f" CRASH {visible(tail[-1][:160]) if tail else ''}"
    if r["false_duplicates"]:
        extra += f" false {len(r['false_duplicates'])}"
    if any(not c["clear"] for c in r["controls"]):
        extra += " CONTROL"
    return f"{r['tier']:<9}{r['case']:<28}{marks}{extra}  ({r['seconds']:.1f}s)"


def run_eval(root: Path, analyze: Run, out: str | None = None, quiet: bool = False) -> int:
    """`twice lab eval --corpus DIR`: score every case, print the summary, write the results."""
    if not find_cases(root):
        print(f"twice lab eval: no truth.json in the corpus format under {root}",
              file=sys.stderr)
        return 2

    def progress(r: dict[str, Any]) -> None:
        if not quiet:
            print(progress_line(r), file=sys.stderr)

    result = run_corpus(root, analyze, progress)
    print(render(result["summary"], f"corpus {root} ({result['summary']['all']['cases']} cases)"))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nresults: {out}")
    return 0
