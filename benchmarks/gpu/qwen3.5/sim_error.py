"""Issue 37 item 5: the simulator against the Qwen3.5 runs, on two sets and two engine
profiles side by side.

- FIT SET: session 9's six jobs (`runs/`: replayed from each trace's beginning, no warm-up,
  50 s); the new profile (`engine-sglang-h200-qwen3.5.yaml`, fit_profile.py) was fitted on
  their server logs and lone requests, so its errors here are in-sample.
- HELD-OUT SET: session 11's three jobs (`runs-agentx/`: the same traces under `kvbench run
  --profile agentx`: sampled starts at 25-75% of each trace, seed 42, 10 one-token warm-up
  requests per lane, then 50 s profiled); simulated with `--profile agentx`, which builds the
  same bounds from the same module the replay uses. Nothing was fitted on them.
- SESSION-12 SET: two more conc-8 jobs of the fit set's workload (resident-c8-s12,
  hicache-c8-s12: `PROFILE=none`, another H200 machine), never fitted on, with the new
  profile's predictions committed before they ran (`predictions-s12.txt`).

The old profile is the Qwen3-8B probe fit of issue 25 (results/h200/sglang/
engine-sglang-h200-triton.yaml); the fit set also keeps the predictions committed before the
runs (`predictions.txt`, predict.sh at kvbench 0dd7113). Every simulation is predict.sh's
`kvbench simulate` (the capped pools, MTP 3.39 of 4, outputs <= 256, write_through_selective)
run through the CLI's own helpers in this process, so the profiled requests can be listed:
the script prints, per held-out job, the (session, turn) pairs sent in the profiled phase by
the run and by the simulation.

Measured: TTFT p50/p90, throughput and the hit rate from each result.json's request metrics
(the profiled requests' own cached tokens, which add up to the engine's tier counters:
cache-truth.txt), the host share from the tier counters (`cached_tokens_by_tier`) where they
hold no warm-up; a (conc, arm) with several repeats is their mean. Simulated hit rates are
first-scheduling hits over the simulated prompt tokens. The error is (sim - real) / real for
times and rates of tokens, percentage points for hit rates.

    PYTHONPATH=src python benchmarks/gpu/qwen3.5/sim_error.py \
        > benchmarks/results/h200/qwen3.5/sim-error.txt
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

from kvbench.files import iter_jsonl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RESULTS = ROOT / "benchmarks/results/h200/qwen3.5"
PROFILES = {"old": ROOT / "benchmarks/results/h200/sglang/engine-sglang-h200-triton.yaml",
            "new": RESULTS / "engine-sglang-h200-qwen3.5.yaml"}
# per set: its folder, the replay profile it ran under, and the measured runs of each (conc,
# simulated arm); the unpatched HiCache arm has the patched arm's setting, so the same
# simulation
SETS = {
    "fit": (RESULTS / "runs", None, {
        (4, "resident"): ["resident-c4"], (4, "offload"): ["hicache-c4"],
        (4, "offload (unpatched)"): ["unpatched-c4"], (8, "resident"): ["resident-c8"],
        (8, "offload"): ["hicache-c8-a", "hicache-c8-b"]}),
    "held-out": (RESULTS / "runs-agentx", "agentx", {
        (8, "resident"): ["resident-c8-r0", "resident-c8-r1"],
        (8, "offload"): ["hicache-c8"]}),
    "session-12": (RESULTS / "runs", None, {
        (8, "resident"): ["resident-c8-s12"], (8, "offload"): ["hicache-c8-s12"]}),
}
# the predictions committed before each set's runs (the fit set: the old profile's)
COMMITTED = {"fit": HERE / "predictions.txt", "session-12": HERE / "predictions-s12.txt"}
METRICS = ("requests", "hit_host", "hit_total", "ttft_p50_ms", "ttft_p90_ms", "input_tok_s",
           "output_tok_s")
PREDICTED_ROWS = {"requests (errors)": "requests", "hit rate host": "hit_host",
                  "hit rate total": "hit_total", "ttft p50 (ms)": "ttft_p50_ms",
                  "ttft p90 (ms)": "ttft_p90_ms", "input tok/s": "input_tok_s",
                  "output tok/s": "output_tok_s"}


def _number(cell: str) -> float:
    text = cell.strip().split(" ")[0].replace(",", "")
    return float(text.rstrip("%")) / 100 if text.endswith("%") else float(text)


def committed(path: Path) -> dict[tuple[int, str], dict[str, float]]:
    """The tables of a predictions file (predict.sh's output), per --concurrency block."""
    out: dict[tuple[int, str], dict[str, float]] = {}
    conc = 0
    for line in path.read_text().splitlines():
        if m := re.match(r"== --concurrency (\d+)", line):
            conc = int(m[1])
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0] in PREDICTED_ROWS:
            for arm, cell in zip(("resident", "offload"), cells[1:], strict=True):
                out.setdefault((conc, arm), {})[PREDICTED_ROWS[cells[0]]] = _number(cell)
    return out


def simulate(profile: Path, conc: int, replay_profile: str | None, recv_interval: int = 1
             ) -> dict[str, tuple[dict[str, float], list[tuple[str, int]]]]:
    """predict.sh's `kvbench simulate ... --compare` through the CLI's own helpers (with
    `--scheduler-recv-interval`): per arm, the metrics and the profiled requests' (session,
    turn) in send order."""
    from kvbench.cli.sim import _bounds, _engine_config, _source, _speculate
    from kvbench.sim.simulate import SimSetup, run_sessions
    from kvbench.sim.sizing import resolve_costs

    args = _predict_args()
    model = args["--model"]
    costs = _speculate(resolve_costs(model, args["--hardware"], 1, engine=str(profile)),
                       float(args["--spec-accept-length"]), int(args["--spec-verify-tokens"]))
    bounds = _bounds(conc, replay_profile, duration=50.0,
                     max_tokens_cap=int(args["--max-tokens-cap"]))
    sessions = _source([str(ROOT / args["--trace"])], None, bounds.seed).sessions_for(
        model.split("/")[-1].lower(), conc)
    engine = _engine_config(str(profile), max_running_requests=int(
        args["--max-running-requests"]), chunked_prefill_tokens=8192, context_tokens=None,
        recv_interval_steps=recv_interval)
    out = {}
    for arm, host in (("resident", 0), ("offload", int(args["--host-tokens"]))):
        done: list = []
        setup = SimSetup(int(args["--gpu-tokens"]), host, "write_through_selective", conc,
                         engine)
        s = run_sessions(sessions, costs, setup, bounds, requests=done)
        sent = [(r.meta["session_id"], r.meta["turn"]) for r in sorted(
            done, key=lambda r: r.arrival_s) if not r.meta.get("is_warmup")]
        out[arm] = ({"requests": s["requests"], "hit_host": s["hit_rate"]["host"],
                     "hit_total": s["hit_rate"]["total"], "ttft_p50_ms": s["ttft_ms"]["p50"],
                     "ttft_p90_ms": s["ttft_ms"]["p90"],
                     "input_tok_s": s["throughput"]["input_tok_s"],
                     "output_tok_s": s["throughput"]["output_tok_s"]}, sent)
    return out


def recv_interval(run: Path) -> int:
    """The server's --scheduler-recv-interval as the job launched it (SGLang's default 1)."""
    argv = json.loads((run / "command.json").read_text())["argv"]
    flag = "--scheduler-recv-interval"
    return int(argv[argv.index(flag) + 1]) if flag in argv else 1


def _predict_args() -> dict[str, str]:
    """predict.sh's `--flag value` pairs (the workload and the capped pools)."""
    command = (HERE / "predict.sh").read_text()
    args = re.search(r"python3 -m kvbench simulate (.*?)--concurrency", command, re.S)[1]
    argv = [a for a in args.replace("\\\n", " ").split() if a]
    return {a: b for a, b in zip(argv, [*argv[1:], ""], strict=True) if a.startswith("--")}


def measured(run: Path) -> dict[str, float]:
    """The run's profiled requests; the host hit rate from the engine's tier counters where
    they count those requests only (no warm-up: their prompt tokens agree within 1%), else
    NaN (the agentx runs' counters hold the warm-up's 1.9M prompt tokens too)."""
    r = json.loads((run / "result.json").read_text())
    m, s = r["request_metrics"], r["server_metrics"]
    prompt, tiers = s["tokens"]["prompt_total"], s["cache"]["cached_tokens_by_tier"]
    host = (tiers["host"] or 0) + (tiers["external"] or 0)
    alone = abs(prompt / m["cache"]["prompt_tokens"] - 1) < 0.01
    return {"requests": m["latency"]["ttft_ms"]["n"],
            "hit_host": host / prompt if alone else math.nan,
            "hit_total": m["cache"]["hit_rate"],
            "ttft_p50_ms": m["latency"]["ttft_ms"]["p50"],
            "ttft_p90_ms": m["latency"]["ttft_ms"]["p90"],
            "input_tok_s": m["throughput"]["input_tok_s"],
            "output_tok_s": m["throughput"]["output_tok_s"]}


def sent(run: Path) -> list[tuple[str, int]]:
    """The profiled requests the replay sent, (session, turn) in send order."""
    recs = sorted((r for r in iter_jsonl(run / "records.jsonl") if not r["is_warmup"]),
                  key=lambda r: r["t_send_ns"])
    return [(r["session_id"], r["turn"]) for r in recs]


def _error(metric: str, sim: float, real: float) -> str:
    if math.isnan(real):
        return "n/a"
    if metric.startswith("hit"):
        return f"{(sim - real) * 100:+.1f} pt"
    return f"{(sim / real - 1) * 100:+.0f}%"


def _cell(metric: str, value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if metric.startswith("hit"):
        return f"{value * 100:.1f}%"
    return f"{value:,.0f}" if value >= 100 or metric == "requests" else f"{value:,.1f}"


def main() -> int:
    before = {name: committed(path) for name, path in COMMITTED.items()}
    print("| set | conc | arm (runs) | metric | measured | committed before (error) | "
          "old profile (error) | new profile (error) |")
    print("|---|---:|---|---|---:|---:|---:|---:|")
    rows, requests = [], []
    for set_name, (folder, replay_profile, jobs) in SETS.items():
        intervals = {recv_interval(folder / j) for names in jobs.values() for j in names}
        assert len(intervals) == 1, intervals  # one server setting per set
        sims = {(name, conc): simulate(path, conc, replay_profile, *intervals)
                for name, path in PROFILES.items() for conc in sorted({c for c, _ in jobs})}
        for (conc, arm), names in jobs.items():
            runs = [measured(folder / j) for j in names]
            real = {k: statistics.fmean(r[k] for r in runs) for k in METRICS}
            sim_arm = arm.split(" ")[0]
            old, new = sims[("old", conc)][sim_arm][0], sims[("new", conc)][sim_arm][0]
            first = before.get(set_name, {}).get((conc, sim_arm))
            for k in METRICS:
                b = "-" if first is None else (
                    f"{_cell(k, first[k])} ({_error(k, first[k], real[k])})")
                print(f"| {set_name} | {conc} | {arm} ({', '.join(names)}) | {k} | "
                      f"{_cell(k, real[k])} | {b} | {_cell(k, old[k])} "
                      f"({_error(k, old[k], real[k])}) | {_cell(k, new[k])} "
                      f"({_error(k, new[k], real[k])}) |")
            rows.append({"set": set_name, "conc": conc, "arm": arm, "measured": real,
                         "old": old, "new": new})
            if replay_profile is not None:
                for j in names:
                    requests.append((j, sent(folder / j), sims[("new", conc)][sim_arm][1]))
    print("\noffload / resident (measured; old profile; new profile):")
    for set_name in SETS:
        for conc in sorted({r["conc"] for r in rows if r["set"] == set_name}):
            res = next(r for r in rows if (r["set"], r["conc"], r["arm"]) == (
                set_name, conc, "resident"))
            off = next(r for r in rows if (r["set"], r["conc"], r["arm"]) == (
                set_name, conc, "offload"))
            for k in ("ttft_p50_ms", "output_tok_s"):
                cells = [off[s][k] / res[s][k] for s in ("measured", "old", "new")]
                print(f"  {set_name} conc {conc} {k:<13} " + "; ".join(f"{c:.3f}" for c in cells))
    print("\nheld-out: the profiled requests (session, turn), run vs simulation (new profile):")
    for job, real, sim in requests:
        common = len(set(real) & set(sim))
        print(f"  {job}: run {len(real)}, simulated {len(sim)}, in both {common}")
        print(f"    run only: {sorted(set(real) - set(sim))}")
        print(f"    simulated only: {sorted(set(sim) - set(real))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
