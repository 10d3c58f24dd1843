"""The simulator's errors against the real H200 runs (vLLM 0.26 and SGLang 0.5.17, each with
its engine profile: validate_sim.SERVED), on two halves of the
sessions: a fit half and a held-out half, split by a fixed hash of the session id (BLAKE2b of
the id, first byte even: fit). Whatever is tuned by looking at runs is tuned on the fit half
only; the held-out half says whether it holds on sessions it was not tuned on (issue 26).

Each run is simulated whole (the sessions share the engine), then both sides are cut by half:
per (arm, conc), over the non-warm-up requests of that half that completed: TTFT p50 / p90,
the hit rate (prompt tokens served from any cache tier over prompt tokens: the records' usage
cached_tokens, the simulator's device + host hits; the per-tier split exists only for the
whole run, in /metrics), input and output tok/s of that half over the run's span, and the
offload / resident ratios of TTFT p50 and output tok/s.

    PYTHONPATH=src python benchmarks/gpu/heldout.py [--runs DIR] [--out FILE.json] [--markdown]

Before runs of a longer duration are taken, `--predict S --conc C --runs DIR` writes what the
simulator says they will measure (each arm's first run at C in DIR as its template, its
duration set to S): the prediction is committed before the device runs, so nothing about it
can have been chosen by looking at them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import statistics
from collections import defaultdict
from pathlib import Path

from kvbench.files import iter_jsonl

HERE = Path(__file__).resolve().parent
RUNS = HERE.parents[0] / "results" / "h200" / "vllm" / "runs"
HALVES = ("fit", "held-out")
TARGETS = ("TTFT p50 and tok/s within 15%, hit rate within 5 points, offload / resident "
           "ratios within 10%")


def half_of(session_id: str) -> str:
    """The fixed split: never changes with the runs, the profile or the order of files."""
    return HALVES[hashlib.blake2b(session_id.encode()).digest()[0] % 2]


def _validate_module():
    spec = importlib.util.spec_from_file_location("validate_sim", HERE / "validate_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _p(vals: list[float], q: float) -> float | None:
    """The median, or the nearest-rank quantile `q` (p90)."""
    if not vals:
        return None
    if q == 0.5:
        return statistics.median(vals)
    return sorted(vals)[min(len(vals) - 1, int(q * len(vals)))]


def _stats(rows: list[dict], span_s: float) -> dict:
    prompt = sum(r["prompt"] for r in rows)
    return {"requests": len(rows),
            "ttft_p50_ms": _p([r["ttft_ms"] for r in rows], 0.5),
            "ttft_p90_ms": _p([r["ttft_ms"] for r in rows], 0.9),
            "hit_total": sum(r["cached"] for r in rows) / prompt if prompt else 0.0,
            "input_tok_s": prompt / span_s, "output_tok_s": sum(r["out"] for r in rows) / span_s}


def _real_rows(run: Path) -> tuple[list[dict], float]:
    recs = list(iter_jsonl(run / "records.jsonl"))
    ok = [r for r in recs if r["status"] == "ok" and not r["is_warmup"]]
    span = (max(r["t_last_ns"] for r in ok) - min(r["t_send_ns"] for r in ok)) / 1e9
    return [{"session": r["session_id"], "ttft_ms": (r["t_first_ns"] - r["t_send_ns"]) / 1e6,
             "prompt": r["prompt_tokens"], "cached": r["cached_tokens"] or 0,
             "out": r["completion_tokens"]} for r in ok], span


def _sim_rows(done: list) -> tuple[list[dict], float]:
    ok = [r for r in done if r.error is None and r.first_s >= 0
          and not r.meta.get("is_warmup")]
    span = max(r.finish_s for r in ok) - min(r.arrival_s for r in ok)
    return [{"session": r.meta["session_id"], "ttft_ms": r.ttft_s * 1e3,
             "prompt": r.input_tokens, "cached": r.device_hit_tokens + r.host_hit_tokens,
             "out": r.output_tokens} for r in ok], span


def evaluate(runs: Path = RUNS, hardware: str = "h200-measured",
             engine_profile: str | None = None) -> list[dict]:
    v = _validate_module()
    sims: dict[tuple, tuple[list, float]] = {}
    groups: dict[tuple[str, int, str], list[tuple[dict, dict]]] = defaultdict(list)
    workloads: dict[tuple[int, str], tuple] = {}
    for run in sorted(p for p in runs.iterdir() if (p / "result.json").is_file()):
        real = v._real(run)
        key = v.setting(real)
        # the repeats of an arm pool against the first one's simulation (their host pools
        # differ by a few tokens, as each server sized them), so they must have replayed one
        # workload: a run of other sessions or bounds (runs-s15 beside runs) is another
        # experiment
        workload = (real["profile"], real["corpus"])
        if workloads.setdefault((real["conc"], real["arm"]), workload) != workload:
            raise ValueError(f"{run.name}: another workload than the arm's other runs "
                             "(its validity profile or sessions digest); evaluate each "
                             "workload's runs apart (--runs)")
        if key not in sims:  # deterministic: one simulation per setting
            done: list = []
            v._simulated(v.sessions_for(real), real, hardware, engine_profile, done)
            sims[key] = _sim_rows(done)
        (rrows, rspan), (srows, sspan) = _real_rows(run), sims[key]
        for half in HALVES:
            groups[(half, real["conc"], real["arm"])].append((
                _stats([r for r in rrows if half_of(r["session"]) == half], rspan),
                _stats([r for r in srows if half_of(r["session"]) == half], sspan)))
    out = []
    for (half, conc, arm), pairs in sorted(groups.items()):
        real = {k: statistics.fmean(p[0][k] for p in pairs if p[0][k] is not None)
                for k in pairs[0][0]}
        out.append({"half": half, "conc": conc, "arm": arm, "repeats": len(pairs),
                    "real": real, "sim": pairs[0][1]})
    by = {(r["half"], r["conc"], r["arm"]): r for r in out}
    for r in out:
        base = by.get((r["half"], r["conc"], "resident"))
        if r["arm"] == "resident" or base is None:
            continue
        r["ratio"] = {k: {"real": r["real"][k] / base["real"][k],
                          "sim": r["sim"][k] / base["sim"][k]}
                      for k in ("ttft_p50_ms", "output_tok_s")}
    return out


def predict(runs: Path, conc: int, duration_s: float, hardware: str = "h200-measured") -> dict:
    """The simulation of each arm at `conc` for `duration_s`, with the arm's first run in
    `runs` as its template (the host pool its server sized, its sessions and profile): the
    whole run and each half, as evaluate() scores them."""
    v = _validate_module()
    out: dict = {"conc": conc, "duration_s": duration_s, "hardware": hardware, "arms": {}}
    for run in sorted(p for p in runs.iterdir() if (p / "result.json").is_file()):
        real = v._real(run)
        if real["conc"] != conc or real["arm"] in out["arms"]:
            continue
        real["duration_s"] = duration_s
        done: list = []
        whole = v._simulated(v.sessions_for(real), real, hardware, None, done)
        rows, span = _sim_rows(done)
        out["arms"][real["arm"]] = {
            "template": run.name, "host_tokens": real["host_tokens"],
            "whole": {k: whole[k] for k in ("requests", "hit_device", "hit_host", "ttft_p50_ms",
                                             "ttft_p90_ms", "output_tok_s")},
            **{half: _stats([r for r in rows if half_of(r["session"]) == half], span)
               for half in HALVES}}
    return out


def _rel(a: float, b: float) -> str:
    return f"{(b / a - 1) * 100:+.0f}%"


def markdown(rows: list[dict]) -> str:
    """The two halves side by side per (conc, arm): measured -> simulated with the relative
    error (hit rate: the difference in points)."""
    by = {(r["half"], r["conc"], r["arm"]): r for r in rows}
    keys = sorted({(r["conc"], r["arm"]) for r in rows})

    def cell(r: dict, k: str) -> str:
        a, b = r["real"][k], r["sim"][k]
        if k == "hit_total":
            return f"{a:.2f} -> {b:.2f} ({(b - a) * 100:+.1f} pt)"
        return f"{a:,.0f} -> {b:,.0f} ({_rel(a, b)})" if k.startswith("ttft") else _rel(a, b)

    def ratio(r: dict, k: str) -> str:
        x = (r.get("ratio") or {}).get(k)
        if x is None:
            return "-"
        return f"{x['real']:.2f} -> {x['sim']:.2f} ({_rel(x['real'], x['sim'])})"

    cols = [("n real/sim", None), ("TTFT p50 ms", "ttft_p50_ms"), ("TTFT p90", "ttft_p90_ms"),
            ("hit rate", "hit_total"), ("out tok/s", "output_tok_s"),
            ("TTFT p50 off/res", "r:ttft_p50_ms"), ("out tok/s off/res", "r:output_tok_s")]
    head = "| conc | arm | " + " | ".join(f"{c} {h}" for c, _ in cols for h in HALVES) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(cols))]
    for conc, arm in keys:
        cells = []
        for _, k in cols:
            for half in HALVES:
                r = by[(half, conc, arm)]
                if k is None:
                    cells.append(f"{r['real']['requests']:.0f}/{r['sim']['requests']}")
                elif k.startswith("r:"):
                    cells.append(ratio(r, k[2:]))
                elif k == "ttft_p90_ms":
                    cells.append(_rel(r["real"][k], r["sim"][k]))
                else:
                    cells.append(cell(r, k))
        lines.append(f"| {conc} | {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--predict", type=float, metavar="S",
                    help="write the simulation of runs of S seconds instead (with --conc)")
    ap.add_argument("--conc", type=int, default=6)
    a = ap.parse_args()
    if a.predict:
        got = json.dumps(predict(a.runs, a.conc, a.predict), indent=1) + "\n"
        if a.out:
            a.out.write_text(got)
        print(got, end="")
        return
    rows = evaluate(a.runs)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(markdown(rows) if a.markdown else json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
