"""What the sweep adds around a replay: one quickstart job run by `run_job` (plan, launch,
readiness, replay with /metrics scraping and telemetry, stop, result) against the baseline of
the same server started by hand and the same replay run bare, side by side.

    PYTHONPATH=src python benchmarks/sweep_overhead.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from kvbench.matrix import Selection, select_jobs
from kvbench.replay import ReplayConfig, run_replay
from kvbench.sweep import build_specs, run_job
from kvbench.sweep.job import free_port
from kvbench.sweep.quickstart import RECIPE, quickstart_options

TIME_SCALE = 50.0


def spec_for(conc: int):
    runners = RECIPE.parent / "runners.yaml"
    jobs = select_jobs(Selection(config_files=(RECIPE,), runner_config=runners,
                                 min_conc=conc, max_conc=conc))
    return build_specs(jobs[1:], quickstart_options(TIME_SCALE), runner_config=runners)[0]


def bare(spec, work: Path) -> float:
    """Baseline: serve-sim with the argv the sweep used, health polling, the replay alone."""
    import orjson

    command = orjson.loads((work / "sweep" / spec.dir_name / "command.json").read_bytes())
    argv = list(command["argv"])
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        opts = spec.options
        run_replay(ReplayConfig(url=f"http://127.0.0.1:{port}", model=spec.row["model"],
                                trace=opts.trace_paths(), concurrency=spec.row["conc"],
                                max_requests=opts.max_requests,
                                think_time_scale=opts.think_time_scale,
                                output_dir=work / "bare"))
    finally:
        proc.terminate()
        proc.wait()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conc", type=int, default=8)
    args = ap.parse_args()
    spec = spec_for(args.conc)
    swept, base = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            t0 = time.perf_counter()
            outcome = run_job(spec, work / "sweep")
            swept.append(time.perf_counter() - t0)
            assert outcome.status == "ok", outcome
            base.append(bare(spec, work))
    s, b = statistics.median(swept), statistics.median(base)
    print(f"job {spec.dir_name}, {args.repeat} runs, time scale {TIME_SCALE:g}")
    print(f"{'':34}{'median s':>10}{'min s':>10}")
    print(f"{'bare server + replay (baseline)':34}{b:10.2f}{min(base):10.2f}")
    print(f"{'kvbench run_job':34}{s:10.2f}{min(swept):10.2f}")
    print(f"ratio run_job / baseline: {s / b:.2f}x (+{s - b:.2f} s per job)")


if __name__ == "__main__":
    main()
