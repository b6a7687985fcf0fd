"""The accuracy harness: generate lab incidents, analyse them as `twice analyze DIR --format json`
does, and score the answers against what the lab did (truth.json). docs/accuracy.md explains the
measures and the seed ranges.

`python -m twice.lab eval --seeds N [--start S] [--realism clean|field] [--out [PATH]] [--keep DIR]`

- each incident is generated in a fresh subprocess (time-machine and moto are process-wide), at
  most `--jobs` (<= 2) at a time; the analysis runs in this process through the command line's
  own code path (`twice.cli.lab.analyze_folder`, passed in as `analyze`), one at a time, timing
  the engine (`twice.engine.analyze`) alone;
- the incident's group: every group with an attempt whose `request_id` (or `attempt_id`) is one
  of truth.json's `request_ids`; its reported layer: the layer of its first unprotected duplicate
  (of its first duplicate when all are protected); none reported: `missed`;
- strict: reported == truth. honest: strict, or the duplicate declares exactly two candidate
  layers (its layer and the ones in `alternatives`) and truth is one of them. Never merged;
- false duplicates: every reported pair whose two attempts are not both request ids of a
  duplicate incident (on a control, every pair is false);
- findings recall: truth's `expected_findings` reported in the incident's group(s).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twice.formats import visible

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "accuracy.json"

# Seed ranges (docs/accuracy.md). DEV: look at these while developing. HELD_OUT: nobody looks at
# them until a final measurement. CI: tests/lab/test_accuracy.py's own, fixed.
DEV_SEEDS = range(1000, 2000)
HELD_OUT_SEEDS = range(900_000, 901_000)
CI_SEEDS = range(5000, 5020)
CLEAN_SEED = 7  # clean realism: the scenarios at the samples' seed, unless seeds are given
# The CI gate's 20 field incidents: one scenario forced per seed of CI_SEEDS, so every layer (the
# step and model timeouts drawn across the bands) and every control is there
CI_SCENARIOS = (
    "sdk_retry", "sdk_retry", "sdk_retry_replayed", "gateway_retry", "gateway_retry",
    "step_retry", "step_retry", "step_retry", "redelivery", "redelivery",
    "model_reemission", "model_reemission", "model_reemission", "human_pause", "human_pause",
    "control_new_turn", "control_renewal", "control_same_amount", "control_two_subscriptions",
    "control_declined_retry",
)

LAYERS = ("sdk_retry", "gateway_retry", "step_retry", "redelivery", "model_reemission")
NONE = "none"
MISSED = "missed"  # no duplicate reported for the incident's requests (right for a control)
MAX_EXAMPLES = 12
MAX_JOBS = 2

GENERATE = """
import json, sys, time
started = time.perf_counter()
from twice.lab.accuracy import generate
spec = json.loads(sys.argv[1])
imported = time.perf_counter()
scenario = generate(spec["realism"], spec["seed"], spec["out"], spec.get("scenario"))
print(json.dumps({"scenario": scenario, "import_s": imported - started,
                  "run_s": time.perf_counter() - imported}))
"""


def clean_scenarios() -> list[str]:
    from twice.lab.scenarios import ALL_SCENARIOS

    return list(ALL_SCENARIOS)


def scenario_for(realism: str, seed: int) -> str:
    """The scenario a seed stands for: the field mix's draw, or the clean scenarios in turn."""
    if realism == "field":
        from twice.lab.field import field_scenario

        return field_scenario(seed)
    names = clean_scenarios()
    return names[seed % len(names)]


def generate(realism: str, seed: int, out: str | Path, scenario: str | None = None) -> str:
    """One incident folder with the detailed truth; returns the scenario's name."""
    from twice.lab.scenarios import run_scenario

    name = scenario or scenario_for(realism, seed)
    run_scenario(name, out, seed=seed, realism=realism,  # type: ignore[arg-type]
                 detailed_truth=True)
    return name


@dataclass(frozen=True)
class Spec:
    realism: str
    seed: int
    scenario: str | None = None  # None: the one the seed stands for

    @property
    def label(self) -> str:
        return f"{self.realism}-{self.seed}" + (f"-{self.scenario}" if self.scenario else "")


# ---------------------------------------------------------------------------- running


def generate_in_subprocess(spec: Spec, out: Path, timeout: float = 900) -> dict[str, Any]:
    arg = json.dumps({"realism": spec.realism, "seed": spec.seed, "out": str(out),
                      "scenario": spec.scenario})
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", GENERATE, arg], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"generation failed for {spec.label}: {done.stderr[-2000:]}")
    info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    info["wall_s"] = wall
    return info


# The analysis of one incident folder: (the `twice analyze --format json` report, wall s, engine
# s or None). The command line passes its own (`twice.cli.lab.analyze_folder`), so what is
# measured is the command's whole path.
Analyze = Callable[[Path], tuple[dict[str, Any], float, float | None]]


# ---------------------------------------------------------------------------- scoring


def _base(attempt_id: str) -> str:
    return attempt_id.split("#", 1)[0]


def _is_incident(attempt: dict[str, Any], ids: set[str]) -> bool:
    return (attempt.get("request_id") in ids or attempt.get("attempt_id") in ids
            or _base(str(attempt.get("attempt_id"))) in ids)


def candidates(duplicate: dict[str, Any]) -> set[str]:
    """The layers a duplicate names: its own and its `alternatives` (absent: none)."""
    alternatives = duplicate.get("alternatives") or []
    return {str(duplicate["layer"])} | {str(a.get("layer")) for a in alternatives
                                        if isinstance(a, dict) and a.get("layer")}


def score(truth: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """One incident's result (see the module docstring)."""
    ids = set(truth.get("request_ids") or [])
    layer = str(truth["layer"])
    control = layer == NONE
    groups = [g for g in report.get("groups", [])
              if any(_is_incident(a, ids) for a in g["attempts"])]
    groups.sort(key=lambda g: min(a["at"] for a in g["attempts"]))
    dups = [d for g in groups for d in g["duplicates"]]
    chosen = next((d for d in dups if not d.get("protected")), dups[0] if dups else None)
    reported = str(chosen["layer"]) if chosen is not None else MISSED
    named = candidates(chosen) if chosen is not None else set()
    if control:
        strict = honest = reported == MISSED
    else:
        strict = reported == layer
        honest = strict or (len(named) == 2 and layer in named)
    expected = list(truth.get("expected_findings") or [])
    found = sorted({f["code"] for g in groups for f in g["findings"]})
    exported = set(truth.get("exported_request_ids", ids)) & ids
    return {
        "truth_layer": layer,
        # two or more of its requests are named in the exported files (a replay has no event)
        "visible": len(exported) >= 2,
        "truth_protected": bool(truth.get("protected")),
        "reported_layer": reported,
        "reported_protected": None if chosen is None else bool(chosen.get("protected")),
        "candidates": sorted(named),
        "strict": strict,
        "honest": honest,
        "incident_groups": len(groups),
        "expected_findings": expected,
        "reported_findings": found,
        "findings_hit": [c for c in expected if c in found],
        "false_duplicates": false_duplicates(truth, report),
    }


def false_duplicates(truth: dict[str, Any], report: dict[str, Any]) -> list[dict[str, Any]]:
    ids = set(truth.get("request_ids") or [])
    control = truth["layer"] == NONE
    out = []
    for group in report.get("groups", []):
        attempts = {a["attempt_id"]: a for a in group["attempts"]}
        for d in group["duplicates"]:
            first, second = attempts.get(d["first"], {}), attempts.get(d["second"], {})
            mine = [_is_incident(a, ids) for a in (first, second)]
            if all(mine) and not control:
                continue
            out.append({
                "on": "controls" if control and any(mine) else "noise",
                "first": d["first"], "second": d["second"], "layer": d["layer"],
                "protected": bool(d.get("protected")), "gap_seconds": d.get("gap_seconds"),
                "customers": [first.get("subject"), second.get("subject")],
                "touches_incident": any(mine),
            })
    return out


# ---------------------------------------------------------------------------- one incident


def evaluate(spec: Spec, root: Path, analyze: Analyze) -> dict[str, Any]:
    folder = root / spec.label
    result: dict[str, Any] = {"seed": spec.seed, "realism": spec.realism, "folder": str(folder)}
    try:
        info = generate_in_subprocess(spec, folder)
        truth = json.loads((folder / "truth.json").read_text())
        report, analysis_s, engine_s = analyze(folder)
    except Exception as error:  # noqa: BLE001 - one failed incident must not end the run
        result["error"] = f"{type(error).__name__}: {error}"[:3000]
        return result
    result.update(scenario=info["scenario"], **score(truth, report))
    result["time"] = {"generation_s": round(info["wall_s"], 3),
                      "generation_run_s": round(info["run_s"], 3),
                      "analysis_s": round(analysis_s, 3),
                      "engine_s": None if engine_s is None else round(engine_s, 3)}
    result["variant"] = _variant_summary(truth)
    return result


def _variant_summary(truth: dict[str, Any]) -> dict[str, Any]:
    v = truth.get("variant") or {}
    if not v:
        return {}
    applied = v.get("applied", {})
    return {
        "options": v.get("options"),
        "clock_offset": v.get("clock_offset"),
        "exports": [k for k, on in v.get("exports", {}).items() if on],
        "instrumentation": applied.get("instrumentation"),
        "instrumentation_drawn": v.get("instrumentation"),
        "busy_threads": (v.get("busy_day_run") or {}).get("threads"),
        "neighbours": len(v.get("neighbours_run") or []),
        "pending_seams": v.get("pending_seams"),
    }


def evaluate_kept(folder: Path, analyze: Analyze) -> dict[str, Any]:
    """One incident generated earlier (`--keep`), scored again: the same folders measured by
    two engines are the fairest before and after."""
    truth = json.loads((folder / "truth.json").read_text())
    seed = int(folder.name.rsplit("-", 1)[-1]) if folder.name.rsplit("-", 1)[-1].isdigit() \
        else -1
    result: dict[str, Any] = {"seed": seed, "realism": truth.get("realism", "clean"),
                              "folder": str(folder)}
    try:
        report, analysis_s, engine_s = analyze(folder)
    except Exception as error:  # noqa: BLE001 - one failed incident must not end the run
        result["error"] = f"{type(error).__name__}: {error}"[:3000]
        return result
    result.update(scenario=truth.get("scenario"), **score(truth, report))
    result["time"] = {"generation_s": 0.0, "generation_run_s": 0.0,
                      "analysis_s": round(analysis_s, 3),
                      "engine_s": None if engine_s is None else round(engine_s, 3)}
    result["variant"] = _variant_summary(truth)
    return result


def kept_folders(root: Path) -> list[Path]:
    """The incident folders under `root` with a lab truth.json (a `layer` and `request_ids`)."""
    out = []
    for truth in sorted(root.glob("*/truth.json")):
        try:
            doc = json.loads(truth.read_text())
        except ValueError:
            continue
        if isinstance(doc, dict) and "layer" in doc and "request_ids" in doc:
            out.append(truth.parent)
    return out


# ---------------------------------------------------------------------------- the run


def run(specs: Iterable[Spec], analyze: Analyze, *, jobs: int = MAX_JOBS,
        keep: Path | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    specs = list(specs)
    jobs = max(1, min(jobs, MAX_JOBS))
    root = keep if keep is not None else Path(tempfile.mkdtemp(prefix="twice-accuracy-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(evaluate, s, root, analyze) for s in specs]
            results = []
            for future in futures:
                result = future.result()
                results.append(result)
                if progress is not None:
                    progress(result)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    summary = summarize(results)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    return {"summary": summary, "incidents": results}


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(values), 3), "p50": round(statistics.median(values), 3),
            "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
            "max": round(ordered[-1], 3)}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if "error" not in r]
    dup = [r for r in ok if r["truth_layer"] != NONE]
    controls = [r for r in ok if r["truth_layer"] == NONE]
    visible = [r for r in dup if r["visible"]]
    confusion: dict[str, Counter[str]] = {}
    for r in ok:
        confusion.setdefault(r["truth_layer"], Counter())[r["reported_layer"]] += 1
    per_layer = {
        layer: {"n": len(rs), "strict": _rate(sum(r["strict"] for r in rs), len(rs)),
                "honest": _rate(sum(r["honest"] for r in rs), len(rs))}
        for layer in [*LAYERS, NONE]
        if (rs := [r for r in ok if r["truth_layer"] == layer])
    }
    false = [f | {"seed": r["seed"], "scenario": r["scenario"]}
             for r in ok for f in r["false_duplicates"]]
    # a duplicate the exports do not show (a replay that emitted no event, nothing else naming
    # it) has no group, so no finding can be asked of it: recall counts the incidents that show
    seen = [r for r in ok if r["truth_layer"] == NONE or r["visible"]]
    expected = Counter(c for r in seen for c in r["expected_findings"])
    hit = Counter(c for r in seen for c in r["findings_hit"])
    return {
        "incidents": len(results),
        "errors": [{"seed": r["seed"], "error": r["error"]} for r in results if "error" in r],
        "duplicate_incidents": len(dup),
        "controls": len(controls),
        "layer_strict": _rate(sum(r["strict"] for r in dup), len(dup)),
        "layer_honest": _rate(sum(r["honest"] for r in dup), len(dup)),
        "visible_duplicates": len(visible),
        "layer_strict_visible": _rate(sum(r["strict"] for r in visible), len(visible)),
        "layer_honest_visible": _rate(sum(r["honest"] for r in visible), len(visible)),
        "controls_clear": _rate(sum(r["strict"] for r in controls), len(controls)),
        "per_layer": per_layer,
        "confusion": {t: dict(c) for t, c in sorted(confusion.items())},
        "false_duplicates": {
            "total": len(false),
            "on_controls": sum(f["on"] == "controls" for f in false),
            "on_noise": sum(f["on"] == "noise" for f in false),
            "unprotected": sum(not f["protected"] for f in false),
            "touching_incident": sum(f["touches_incident"] for f in false),
            "incidents_with_any": len({f["seed"] for f in false}),
            "examples": false[:MAX_EXAMPLES],
        },
        "findings": {
            "expected": sum(expected.values()),
            "hit": sum(hit.values()),
            "recall": _rate(sum(hit.values()), sum(expected.values())),
            "per_code": {c: {"expected": n, "hit": hit[c], "recall": _rate(hit[c], n)}
                         for c, n in sorted(expected.items())},
        },
        "time": {
            "generation_s": _stats([r["time"]["generation_s"] for r in ok]),
            "generation_run_s": _stats([r["time"]["generation_run_s"] for r in ok]),
            "analysis_s": _stats([r["time"]["analysis_s"] for r in ok]),
            "engine_s": _stats([r["time"]["engine_s"] for r in ok
                                if r["time"]["engine_s"] is not None]),
        },
        # the clean realism always has the lab's spans
        "by_instrumentation": _by(ok, lambda r: str((r.get("variant") or {}).get(
            "instrumentation", "lab"))),
        "by_scenario": _by(ok, lambda r: str(r["scenario"])),
    }


def _by(results: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted({key(r) for r in results}):
        rs = [r for r in results if key(r) == name]
        out[name] = {"n": len(rs), "strict": _rate(sum(r["strict"] for r in rs), len(rs)),
                     "false_duplicates": sum(len(r["false_duplicates"]) for r in rs)}
    return out


# ---------------------------------------------------------------------------- printing


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def render(summary: dict[str, Any], title: str = "") -> str:
    columns = [*LAYERS, "unknown", MISSED]
    extra = sorted({c for row in summary["confusion"].values() for c in row} - set(columns))
    columns += extra
    rows = [r for r in [*LAYERS, NONE] if r in summary["confusion"]]
    width = max(len(c) for c in [*columns, *rows, "truth \\ reported"]) + 1
    short = {c: c.replace("_retry", "").replace("model_reemission", "model_re")
             .replace("redelivery", "redeliv") for c in columns}
    cell = max(8, *(len(v) for v in short.values())) + 1
    lines = []
    if title:
        lines += [title, ""]
    lines.append("truth \\ reported".ljust(width) + "".join(short[c].rjust(cell) for c in columns)
                 + "n".rjust(5))
    for r in rows:
        counts = summary["confusion"][r]
        lines.append(r.ljust(width) + "".join(str(counts.get(c, 0) or ".").rjust(cell)
                                              for c in columns)
                     + str(sum(counts.values())).rjust(5))
    fd = summary["false_duplicates"]
    fi = summary["findings"]
    t = summary["time"]
    lines += [
        "",
        f"(for `none` rows, `{MISSED}` = nothing reported: the right answer)",
        f"incidents {summary['incidents']} ({summary['duplicate_incidents']} duplicates, "
        f"{summary['controls']} controls, {len(summary['errors'])} failed to generate/analyse)",
        f"correct layer, strict: {_pct(summary['layer_strict'])}    "
        f"honest (two declared candidates): {_pct(summary['layer_honest'])}",
        f"  on the {summary['visible_duplicates']} whose two requests the exports name: "
        f"{_pct(summary['layer_strict_visible'])} strict, "
        f"{_pct(summary.get('layer_honest_visible'))} honest",
        f"controls with nothing reported: {_pct(summary['controls_clear'])}",
        f"false duplicates: {fd['total']} (on controls {fd['on_controls']}, on noise "
        f"{fd['on_noise']}; unprotected {fd['unprotected']}; in {fd['incidents_with_any']} "
        "incidents)",
        f"findings recall (incidents the exports show): {_pct(fi['recall'])} "
        f"({fi['hit']}/{fi['expected']})  " + ", ".join(
            f"{c} {v['hit']}/{v['expected']}" for c, v in fi["per_code"].items()),
    ]
    if t["generation_s"]:
        lines.append(
            f"time per incident: generation {t['generation_s']['mean']:.1f} s "
            f"(without imports {t['generation_run_s']['mean']:.1f} s, max "
            f"{t['generation_s']['max']:.1f})"
            f", analysis {t['analysis_s']['mean']:.2f} s"
            + (f" (engine {t['engine_s']['mean']:.2f} s)" if t["engine_s"] else ""))
    for f in fd["examples"][:6]:
        lines.append(f"  false: seed {f['seed']} {f['scenario']}: {f['first']} -> {f['second']} "
                     f"{f['layer']}{' (protected)' if f['protected'] else ''}, customers "
                     f"{f['customers'][0]} / {f['customers'][1]}")
    for e in summary["errors"][:5]:
        lines.append(f"  error: seed {e['seed']}: {e['error'][:300]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- command line


def ci_specs() -> list[Spec]:
    return [Spec("field", seed, name) for seed, name in zip(CI_SEEDS, CI_SCENARIOS, strict=True)]


def clean_specs(seed: int = CLEAN_SEED, only_samples: bool = False) -> list[Spec]:
    """Every clean scenario (or only the samples') at one seed."""
    from twice.lab.scenarios import SCENARIOS

    names = list(SCENARIOS) if only_samples else clean_scenarios()
    return [Spec("clean", seed, name) for name in names]


def specs_for(realism: str, count: int, start: int | None) -> list[Spec]:
    if realism == "clean" and start is None:
        # every clean scenario at the samples' seed, then again at the next seeds
        names = clean_scenarios()
        return [Spec("clean", CLEAN_SEED + i // len(names), names[i % len(names)])
                for i in range(count)]
    first = start if start is not None else DEV_SEEDS.start
    return [Spec(realism, s) for s in range(first, first + count)]


def run_eval(analyze: Analyze, *, seeds: int | None, ci: bool = False, start: int | None = None,
             realism: str = "field", out: str | None = None, label: str | None = None,
             keep: str | None = None, jobs: int = MAX_JOBS, folders: str | None = None) -> int:
    """`twice lab eval`: generate, analyse and score; print the summary, write the results."""
    if folders is not None:
        kept = kept_folders(Path(folders))
        if not kept:
            print(f"twice lab eval: no lab incident folders under {folders}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        results = [evaluate_kept(f, analyze) for f in kept]
        result: dict[str, Any] = {"summary": summarize(results), "incidents": results}
        result["summary"]["wall_s"] = round(time.perf_counter() - started, 1)
        label = label or f"folders:{Path(folders).name}"
        result["summary"].update(label=label, seeds=[r["seed"] for r in results],
                                 generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
                                 engine_commit=_git("HEAD"), engine_tree=_git("HEAD:twice"))
        print(render(result["summary"], f"{label} ({len(kept)} incidents)"))
        path = Path(out) if out else Path(tempfile.gettempdir()) / (
            f"twice-accuracy-{label.replace(':', '-')}.json")
        write_results(path, label, result)
        print(f"\nresults: {path}")
        return 0
    if ci:
        specs = ci_specs()
        label = label or f"field:ci:{CI_SEEDS.start}-{CI_SEEDS.stop - 1}"
    elif seeds is None:
        print("twice lab eval: give --seeds N (or --ci)", file=sys.stderr)
        return 2
    else:
        specs = specs_for(realism, seeds, start)
        first, last = specs[0].seed, specs[-1].seed
        label = label or (f"{realism}:{first}-{last}" if first != last
                          else f"{realism}:scenarios@{first}")

    def progress(r: dict[str, Any]) -> None:
        if "error" in r:
            # an error may quote the evidence: its controls are named, never obeyed
            print(f"seed {r['seed']}: ERROR {visible(r['error'][:200])}", file=sys.stderr)
            return
        mark = "ok" if r["strict"] else ("~" if r["honest"] else "WRONG")
        print(f"seed {r['seed']:>7} {r['scenario']:<26} truth {r['truth_layer']:<17} "
              f"reported {r['reported_layer']:<17} {mark:<5} false {len(r['false_duplicates'])}"
              f"  gen {r['time']['generation_s']:.1f}s", file=sys.stderr)

    result = run(specs, analyze, jobs=jobs, keep=Path(keep) if keep else None,
                 progress=progress)
    result["summary"].update(label=label, realism=specs[0].realism if specs else realism,
                             seeds=[s.seed for s in specs],
                             generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
                             engine_commit=_git("HEAD"), engine_tree=_git("HEAD:twice"))
    print(render(result["summary"], f"{label} ({len(specs)} incidents)"))
    path = Path(out) if out else Path(tempfile.gettempdir()) / (
        f"twice-accuracy-{label.replace(':', '-')}.json")
    write_results(path, label, result)
    print(f"\nresults: {path}")
    return 0


def write_results(path: Path, label: str, result: dict[str, Any]) -> None:
    """Add (or replace) one labelled run in a results file, keeping the others."""
    doc: dict[str, Any] = {"runs": {}}
    if path.exists():
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            doc = {"runs": {}}
    doc.setdefault("runs", {})[label] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def _git(revision: str) -> str | None:
    """A commit (or, for `HEAD:twice`, the engine's source tree: the same hash means the same
    engine code whatever else changed)."""
    try:
        done = subprocess.run(["git", "rev-parse", revision], cwd=ROOT, capture_output=True,
                              text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None
