"""Benchmark `twice analyze` on a generated incident, against the floor of parsing alone.

    python benchmarks/analyze_bench.py [--events 100000] [--spans 100000] [--checkpoints 10000]
                                       [--out benchmarks/results/analyze.json]
                                       [--folder DIR ...] [--baseline TREE] [--repeat 3]

Generates, in a temp folder, an incident in the real formats: Stripe events (JSON lines, two
events per PaymentIntent confirmed in one request), OTLP JSON lines (a tool span and an HTTP
client span per call, batched per line like the file exporter), and a LangGraph SqliteSaver
database written through SqliteSaver.put. One call in a hundred is executed twice (a step
retry with a new key). Then, each in a fresh subprocess so peak memory is its own:
  floor    read + orjson.loads every line of the JSON files
  analyze  load all sources + analyze (what `twice analyze --format json` does)
and records wall time, peak RSS and events per second.

`--folder DIR` (repeatable) measures incident folders that exist (e.g. field incidents kept by
`twice lab eval --keep`) instead of generating one. `--baseline TREE` runs the same analysis
with the code of another checkout (e.g. `git worktree add /tmp/old <commit>`; a tree from
before the one import name imports `connectors`, not `twice.connectors`), alternating the two
`--repeat` times in one run, and records each one's best time and the ratio: on a shared
machine only a ratio measured side by side means anything.

`generate` is also the data of benchmarks/suite.py (10k / 100k / 1M events, growth table,
DuckDB comparison) and benchmarks/web_render_bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twice.lab.otlp_json import attribute  # noqa: E402

T0 = 1_717_424_400  # 2024-06-03T14:20:00Z


def generate(folder: Path, n_events: int, n_spans: int, n_checkpoints: int, seed: int) -> dict:
    rng = random.Random(seed)
    calls = max(n_events // 2, n_spans // 2)
    dup_every = 100
    ids = [f"{i:08x}" for i in range(calls)]
    events_path = folder / "events.jsonl"
    spans_path = folder / "spans.jsonl"
    n_ev = n_sp = 0
    batch: list[dict] = []
    with events_path.open("wb") as ev, spans_path.open("wb") as sp:
        for i, cid in enumerate(ids):
            t = T0 + i * 0.05
            thread = f"th_{i // 4:07d}"
            tcid = f"toolu_01{cid}{cid}{cid[:6]}"
            customer = f"cus_{rng.randrange(10**8):08d}"
            amount = rng.choice([900, 1900, 4900, 9900])
            runs = [(t, f"key_{cid}_0")]
            if i % dup_every == 0:
                runs.append((t + 35 + rng.random() * 5, f"key_{cid}_1"))
            for r, (tr, key) in enumerate(runs):
                req = f"req_{cid}{r}"
                pi = {"id": f"pi_{cid}{r}", "object": "payment_intent", "amount": amount,
                      "currency": "usd", "customer": customer, "status": "succeeded",
                      "metadata": {}}
                ch = {"id": f"ch_{cid}{r}", "object": "charge", "amount": amount,
                      "currency": "usd", "customer": customer, "status": "succeeded",
                      "payment_intent": pi["id"], "metadata": {}}
                for obj, typ in ((pi, "payment_intent.succeeded"), (ch, "charge.succeeded")):
                    if n_ev >= n_events:
                        break
                    ev.write(orjson.dumps({
                        "id": f"evt_{obj['id']}", "object": "event", "api_version": "2024-06-20",
                        "created": int(tr + 0.3), "data": {"object": obj}, "livemode": False,
                        "pending_webhooks": 0, "request": {"id": req, "idempotency_key": key},
                        "type": typ}) + b"\n")
                    n_ev += 1
                if n_sp + 2 > n_spans:
                    continue
                batch += call_spans(i, r, tr, key, req, tcid, thread, customer, amount)
                n_sp += 2
                if len(batch) >= 512:
                    sp.write(orjson.dumps(_export(batch)) + b"\n")
                    batch = []
        if batch:
            sp.write(orjson.dumps(_export(batch)) + b"\n")
    _checkpoints(folder / "checkpoints.sqlite", n_checkpoints, rng)
    return {"events": n_ev, "spans": n_sp, "checkpoints": n_checkpoints,
            "bytes": sum(p.stat().st_size for p in folder.iterdir())}


def call_spans(i: int, r: int, tr: float, key: str, req: str, tcid: str, thread: str,
               customer: str, amount: int) -> list[dict]:
    """The two spans of run r of call i: its tool span and the Stripe HTTP client span under it."""
    tool_span_id = f"{i:08x}{r:08x}"
    start = int(tr * 1e9)
    trace = f"{i:032x}"
    return [{
        "traceId": trace, "spanId": tool_span_id, "name": "execute_tool charge",
        "kind": 1, "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 900_000_000), "status": {"code": 1},
        "attributes": [
            attribute("gen_ai.operation.name", "execute_tool"),
            attribute("gen_ai.tool.name", "charge_subscription"),
            attribute("gen_ai.tool.call.id", tcid),
            attribute("gen_ai.conversation.id", thread),
            attribute("gen_ai.tool.call.arguments", json.dumps(
                {"customer_id": customer, "amount": amount, "currency": "usd"})),
        ]}, {
        "traceId": trace, "spanId": f"{i:08x}{r + 8:08x}",
        "parentSpanId": tool_span_id, "name": "POST", "kind": 3,
        "startTimeUnixNano": str(start + 100_000_000),
        "endTimeUnixNano": str(start + 700_000_000), "status": {"code": 0},
        "attributes": [
            attribute("http.request.method", "POST"),
            attribute("url.full", "https://api.stripe.com/v1/payment_intents"),
            attribute("http.response.status_code", 200),
            attribute("http.request.resend_count", 0),
            attribute("http.request.header.idempotency-key", [key]),
            attribute("http.response.header.request-id", [req]),
        ]}]


def _export(spans: list[dict]) -> dict:
    return {"resourceSpans": [{
        "resource": {"attributes": [attribute("service.name", "billing-agent"),
                                    attribute("host.name", "worker-a")]},
        "scopeSpans": [{"scope": {"name": "twice.bench"}, "spans": spans}]}]}


def _checkpoints(path: Path, n: int, rng: random.Random) -> None:
    """n checkpoints through LangGraph's own SqliteSaver: threads of 4 steps each."""
    import sqlite3

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    for th in range(n // 4):
        thread = f"th_{th:07d}"
        cid = f"{th * 4:08x}"
        tcid = f"toolu_01{cid}{cid}{cid[:6]}"
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        messages: list = [HumanMessage("renew my subscription")]
        steps = [
            [],
            [AIMessage("", tool_calls=[{"name": "charge_subscription", "id": tcid, "args": {
                "customer_id": f"cus_{rng.randrange(10**8):08d}", "amount": 4900,
                "currency": "usd"}}])],
            [ToolMessage('{"status": "succeeded"}', tool_call_id=tcid,
                         name="charge_subscription")],
            [AIMessage("Done.")],
        ]
        for step, new in enumerate(steps):
            messages = messages + new
            ckpt = empty_checkpoint()
            ckpt["channel_values"] = {"messages": messages}
            ckpt["channel_versions"] = {"messages": step + 1}
            config = saver.put(config, ckpt, {"source": "loop", "step": step},
                               {"messages": step + 1})
    conn.close()


FLOOR = """
import sys, orjson
n = 0
for path in sys.argv[1:]:
    with open(path, 'rb') as fh:
        for line in fh:
            orjson.loads(line); n += 1
import resource
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

ANALYZE = """
import sys
from pathlib import Path
if len(sys.argv) < 3 or (Path(sys.argv[2]) / "twice" / "connectors").is_dir():
    from twice.connectors import registry
else:  # a tree from before the one import name
    from connectors import registry
from twice.engine import analyze
from twice.report import to_contract
import time
started = time.perf_counter()
found, _ = registry.scan_folder(Path(sys.argv[1]))
loaded = registry.load_all([(n, p, {}) for n, p in found])
loaded_at = time.perf_counter()
report = to_contract(analyze(loaded.rows, loaded.warnings))
done = time.perf_counter()
import resource
print(len(loaded.rows), len(report['groups']), round(loaded_at - started, 4),
      round(done - loaded_at, 4), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def measure(code: str, args: list[str], tree: Path | None = None) -> dict:
    """Run `code` in a fresh interpreter (with `tree`'s code first on the path, if given); it
    prints its results and, last, its peak RSS (KiB)."""
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else None
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True, cwd=tree, env=env)
    wall = time.perf_counter() - start
    *values, peak_kib = out.stdout.strip().splitlines()[-1].split()  # the last line: ours
    return {"wall_s": round(wall, 3), "peak_rss_mib": round(int(peak_kib) / 1024, 1),
            "stdout": " ".join(values)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--spans", type=int, default=100_000)
    ap.add_argument("--checkpoints", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/analyze.json"))
    ap.add_argument("--folder", type=Path, action="append", default=[],
                    help="an incident folder to measure instead of a generated one (repeatable)")
    ap.add_argument("--baseline", type=Path, help="another checkout to measure side by side")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.folder or args.baseline:
        return compare(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        sizes = generate(folder, args.events, args.spans, args.checkpoints, args.seed)
        gen_s = time.perf_counter() - t
        floor = measure(FLOOR, [str(folder / "events.jsonl"), str(folder / "spans.jsonl")])
        run = measure(ANALYZE, [str(folder)])
    rows, groups = (int(x) for x in run["stdout"].split()[:2])
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "input": {**sizes, "generate_s": round(gen_s, 1)},
        "floor_orjson_parse": floor,
        "analyze": {**run, "timeline_rows": rows, "duplicate_groups": groups,
                    "events_per_s": round(sizes["events"] / run["wall_s"]),
                    "vs_floor": round(run["wall_s"] / max(floor["wall_s"], 1e-9), 2)},
        "targets": {"wall_s": 10, "peak_rss_mib": 1536},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def compare(args: argparse.Namespace) -> None:
    """This tree against `--baseline` on the same folders, alternating, best of `--repeat`."""
    here = Path(__file__).resolve().parent.parent
    trees = {"this": here, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    with tempfile.TemporaryDirectory() as tmp:
        folders = list(args.folder)
        if not folders:
            folders = [Path(tmp)]
            generate(folders[0], args.events, args.spans, args.checkpoints, args.seed)
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.repeat):
            for name, tree in trees.items():
                walls, loads, engines, peaks, outs = 0.0, 0.0, 0.0, 0.0, []
                for folder in folders:
                    run = measure(ANALYZE, [str(folder.resolve()), str(tree)], tree)
                    _, _, load_s, engine_s = run["stdout"].split()
                    walls += run["wall_s"]
                    loads += float(load_s)
                    engines += float(engine_s)
                    peaks = max(peaks, run["peak_rss_mib"])
                    outs.append(run["stdout"])
                runs[name].append({"wall_s": round(walls, 3), "load_s": round(loads, 3),
                                   "analyze_s": round(engines, 3), "peak_rss_mib": peaks,
                                   "stdout": outs})
    best = {name: min(r["wall_s"] for r in rs) for name, rs in runs.items()}
    best_engine = {name: min(r["analyze_s"] for r in rs) for name, rs in runs.items()}
    best_load = {name: min(r["load_s"] for r in rs) for name, rs in runs.items()}
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "folders": [str(f) for f in args.folder] or "generated",
        "trees": {name: str(tree) for name, tree in trees.items()},
        "best_wall_s": best,  # with interpreter start and imports
        "best_load_s": best_load,  # the connectors
        "best_analyze_s": best_engine,  # the engine: analyze + the JSON contract
        "per_folder_best_analyze_s": {n: round(b / len(folders), 4)
                                      for n, b in best_engine.items()},
        "peak_rss_mib": {n: max(r["peak_rss_mib"] for r in rs) for n, rs in runs.items()},
        "runs": runs,
    }
    if "baseline" in best:
        result["this_vs_baseline"] = {
            key: round(values["this"] / max(values["baseline"], 1e-9), 2)
            for key, values in (("wall", best), ("load", best_load), ("analyze", best_engine))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
