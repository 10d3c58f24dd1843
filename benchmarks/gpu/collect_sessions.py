"""Issue 37, sessions 11 and 12: the device's /tmp/kvb (its last tarball holds every step) into the
results folders, with the same repairs and files as qwen3.5/collect.py (whose helpers this imports).

Session 11:

- the three Qwen3.5 conc-8 jobs, run under kvbench's default replay of agentic rows of the day
  (`--profile agentx`: sampled starts, the harness's warm-up, 50 s profiled after it) into
  `benchmarks/results/h200/qwen3.5/runs-agentx/{resident-c8-r0,resident-c8-r1,hicache-c8}`
  with their steps' files (memory samples, call.log, run.log, SGLang's last /metrics);
- the MLA probe (DeepSeek-V3 scaled, `kvbench launch` of the HiCache + MTP arm, uncapped) into
  `benchmarks/results/h200/mla/probe/`, planned again with this kvbench (the run's plan kept as
  `plan.orig.json`) where the new plan gives the engine the same arguments.

Session 12 (`--session 12`): the two conc-8 jobs replayed as session 9's were (`PROFILE=none`:
from each trace's beginning, no warm-up, 50 s; the same options_id, so they pool with
`runs/`), into `runs/{resident-c8-s12,hicache-c8-s12}`, and the HiCache job the call's deadline
cut (its step's files only: the next call ran the job again in the same job directory) into
`attempt-3/hicache-c8`.

    PYTHONPATH=src python benchmarks/gpu/collect_sessions.py [--session 12] TARBALL
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from kvbench.files import read_json

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[0] / "results" / "h200"
JOB = "results-q35/qwen3.5_tp1_conc8_{arm}_spec-mtp"
# (destination under qwen3.5/, job directory, the run.sh step's directory)
JOBS = {"11": [("runs-agentx/resident-c8-r0", JOB.format(arm="kvnone"), "resident-c8"),
               ("runs-agentx/resident-c8-r1", JOB.format(arm="kvnone") + "__r1", "resident-c8x2"),
               ("runs-agentx/hicache-c8", JOB.format(arm="kvdram-hicache"), "hicache-c8")],
        "12": [("runs/resident-c8-s12", JOB.format(arm="kvnone"), "resident-c8"),
               ("runs/hicache-c8-s12", JOB.format(arm="kvdram-hicache"), "hicache-c8"),
               ("attempt-3/hicache-c8", None, "hicache-c8-cut")]}
MLA = HERE / "mla"
MLA_PROBE_ARGS = ["--attention-backend=triton", "--sampling-backend=pytorch",
                  "--disable-cuda-graph"]  # mla/run.sh COMMON


def _collect_module():
    spec = importlib.util.spec_from_file_location("collect", HERE / "qwen3.5" / "collect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    session = "11"
    if argv[:1] == ["--session"]:
        session, argv = argv[1], argv[2:]
    if len(argv) != 1 or session not in JOBS:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    collect = _collect_module()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with tarfile.open(argv[0]) as tar:
            tar.extractall(root, filter="data")
        for dest, job, step in JOBS[session]:
            target = RESULTS / "qwen3.5" / dest
            target.mkdir(parents=True, exist_ok=True)
            if job is not None:
                shutil.copytree(root / job, target, dirs_exist_ok=True)
            collect._copy_step(root / step, target, job and collect._port(root / job))
            print(f"{target}: from {job or step}")
        if session != "11":
            return 0
        target = RESULTS / "mla" / "probe"
        shutil.copytree(root / "mla-probe", target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("metrics-*.txt", "pva.txt"))
        collect._copy_step(root / "mla-probe", target, None)
    server = RESULTS / "mla" / "probe" / "server"
    collect._replan(server, read_json(server / "plan.json"), collect._plan_probe(
        server, MLA / "recipe.yaml", MLA / "runners.yaml", MLA_PROBE_ARGS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
