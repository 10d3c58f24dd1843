"""How long `kvbench` takes before a command's work, against `python -c pass`.

Side by side, interleaved round-robin so that the machine's load hits every case alike, each
a fresh process with its output piped:
- `python -c pass`: the interpreter with this environment's site-packages (the floor);
- `--help`, `version`: the whole command; the short path (cli/fast.py) and typer's
  (`main(argv, fast=False)`, what every command ran before);
- `validate`, `plan --format json`: start-up alone, the process up to the command's work
  (`run_validate` / `run_plan` replaced by a no-op in the process), short path and typer;
- the same two end to end on the quickstart recipe (examples/quickstart.yaml, 6 rows), where
  the work's own imports (pydantic for the recipe models and the plans) come on top.
Prints per case the median and the minimum of wall and CPU (user + system) milliseconds and
each median's ratio to `python -c pass`. Run:

    PYTHONPATH=src python benchmarks/cli_startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
VALIDATE = ["validate", str(EXAMPLES / "quickstart.yaml"), str(EXAMPLES / "runners.yaml")]
PLAN = ["plan", "--config-files", str(EXAMPLES / "quickstart.yaml"), "--runner-config",
        str(EXAMPLES / "runners.yaml"), "--format", "json"]

# The process up to the work: the work function is a no-op, so what is timed is the
# interpreter, kvbench's CLI and the command line's parsing into the work's parameters.
STUB = """import sys
import kvbench.cli.{module} as m
m.{function} = lambda *a, **k: None
from kvbench.cli import main
main(sys.argv[1:], fast={fast})
"""
RUN = "import sys\nfrom kvbench.cli import main\nmain(sys.argv[1:], fast={fast})\n"


def cases() -> list[tuple[str, list[str]]]:
    py = sys.executable
    out: list[tuple[str, list[str]]] = [("python -c pass", [py, "-c", "pass"])]
    for name, args in (("--help", ["--help"]), ("version", ["version"])):
        out.append((f"{name} (short path)", [py, "-m", "kvbench", *args]))
        out.append((f"{name} (typer)", [py, "-c", RUN.format(fast=False), *args]))
    for name, args, module, function in (
            ("validate", VALIDATE, "validate_fast", "run_validate"),
            ("plan --format json", PLAN, "plan_fast", "run_plan")):
        for fast, label in ((True, "short path"), (False, "typer")):
            stub = STUB.format(module=module, function=function, fast=fast)
            out.append((f"{name}: start-up ({label})", [py, "-c", stub, *args]))
    for name, args in (("validate", VALIDATE), ("plan --format json", PLAN)):
        out.append((f"{name}: whole ({'short path'})", [py, "-m", "kvbench", *args]))
        out.append((f"{name}: whole (typer)", [py, "-c", RUN.format(fast=False), *args]))
    return out


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"{argv[-3:]} exited {res.returncode}: {res.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    todo = cases()
    for _, argv in todo:  # warm the page cache and the recipe parse cache
        measure(argv, env)
    walls: dict[str, list[float]] = {name: [] for name, _ in todo}
    cpus: dict[str, list[float]] = {name: [] for name, _ in todo}
    for _ in range(args.repeat):
        for name, argv in todo:
            wall, cpu = measure(argv, env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    base_wall = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    print(f"{args.repeat} runs each, interleaved; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    print("| case | wall median ms | wall min ms | CPU median ms | CPU min ms | "
          "x pass (wall) | x pass (CPU) |\n|---|---:|---:|---:|---:|---:|---:|")
    for name, _ in todo:
        w, c = walls[name], cpus[name]
        print(f"| {name} | {statistics.median(w):.1f} | {min(w):.1f} | "
              f"{statistics.median(c):.1f} | {min(c):.1f} | "
              f"{statistics.median(w) / base_wall:.2f} | {statistics.median(c) / base_cpu:.2f} |")


if __name__ == "__main__":
    main()
