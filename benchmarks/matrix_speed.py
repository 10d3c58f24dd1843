"""`kvbench matrix` against the reference generator, whole process, side by side.

    python3 benchmarks/matrix_speed.py --reference REF [--repeats 9]

REF is a folder holding the classic reference generator as InferenceX 843c6254f has it
(`utils/matrix_logic/generate_sweep_configs.py` and `validation.py`; not in this
repository: `git show 843c6254f:utils/matrix_logic/...` from a clone). Both read the real
classic configs committed in tests/data/inferencex/ and expand every agentic row
(`full-sweep --scenario-type agentic-coding --no-evals`, 746 rows). Each repeat runs, in
turn: the reference; kvbench with an empty parse cache (cold: YAML, validation, cache
write); kvbench with the cache primed (warm). Printed: the median wall and CPU
(user + system) seconds of each and kvbench's speed-up on both; the outputs are checked
byte-identical first. The machine's load moves wall time; CPU time is the steadier figure."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "inferencex"
ARGS = ["--config-files", str(DATA / "amd-master.yaml"), str(DATA / "nvidia-master.yaml"),
        "--runner-config", str(DATA / "runners.yaml"), "--scenario-type", "agentic-coding",
        "--no-evals"]


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, check=True, capture_output=True).stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=9)
    opts = parser.parse_args()
    reference = [sys.executable, str(opts.reference / "utils" / "matrix_logic" /
                                     "generate_sweep_configs.py"), "full-sweep", *ARGS]
    kvbench = [sys.executable, "-m", "kvbench", "matrix", "--format", "json", *ARGS]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cache = Path(tempfile.mkdtemp(prefix="kvbench-matrix-cache-"))
    warm_env = {**env, "KVBENCH_CACHE_DIR": str(cache / "warm")}
    try:
        ref_out = _timed(reference, env)[2]
        kvb_out = _timed(kvbench, warm_env)[2]  # also primes the warm cache
        if ref_out.strip() != kvb_out.strip():
            sys.exit("the outputs differ: fix that before timing")
        times: dict[str, list[tuple[float, float]]] = {"reference": [], "cold": [], "warm": []}
        for i in range(opts.repeats):
            times["reference"].append(_timed(reference, env)[:2])
            cold_env = {**env, "KVBENCH_CACHE_DIR": str(cache / f"cold-{i}")}
            times["cold"].append(_timed(kvbench, cold_env)[:2])
            times["warm"].append(_timed(kvbench, warm_env)[:2])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in times.items()}
    rows = len(__import__("json").loads(ref_out))
    print(f"{rows} agentic rows, {opts.repeats} repeats, medians "
          f"(python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f})")
    print(f"{'':28} {'wall s':>8} {'cpu s':>8} {'x wall':>8} {'x cpu':>8}")
    ref_wall, ref_cpu = med["reference"]
    for name, label in (("reference", "reference generator"), ("cold", "kvbench, cache cold"),
                        ("warm", "kvbench, cache warm")):
        wall, cpu = med[name]
        print(f"{label:28} {wall:8.3f} {cpu:8.3f} {ref_wall / wall:8.2f} {ref_cpu / cpu:8.2f}")


if __name__ == "__main__":
    main()
