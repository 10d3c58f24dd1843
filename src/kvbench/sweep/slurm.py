"""The Slurm executor: one job array per resource shape, one array task per job, each task
running `kvbench run-job --job-file ...`; a multi-node row gets one allocation of its own
(its nodes, a task per worker; `run-job` starts each worker with srun); then waits and
collects the result files.

Array tasks share one set of sbatch options, so jobs are grouped by (GPUs, exclusive). Real
engines get `--gres=gpu:<tp*pp*pcp>` and `--exclusive` (host DRAM budgets assume the node
is theirs); the embedded engine needs neither."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.errors import SweepError, SweepOptionError
from kvbench.sweep import layout
from kvbench.sweep.events import JobOutcome
from kvbench.sweep.spec import JobSpec

CPU_ONLY_FRAMEWORKS = ("sim",)
DEFAULT_GPUS_PER_NODE = 8
# Slurm's MaxArraySize default is 1001 and its hard ceiling 4,000,001 (slurm.conf(5))
MAX_ARRAY_TASKS = 4_000_001
_SLURM_NAMES = re.compile(r"[A-Za-z0-9_.\-]{1,128}(?:,[A-Za-z0-9_.\-]{1,128}){0,63}")
# sbatch(1) --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes", "days-hours:minutes:seconds"
_SLURM_TIME = re.compile(r"(?:[0-9]{1,7}(?::[0-9]{1,2}){0,2}|[0-9]{1,5}-[0-9]{1,2}"
                         r"(?::[0-9]{1,2}){0,2}|UNLIMITED|unlimited|infinite|INFINITE)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# sbatch reads an #SBATCH line as words (Slurm src/sbatch/opt.c, _get_argument): whitespace
# ends a word, '...' or "..." group one, a backslash escapes the next character (inside
# quotes too), an unquoted '#' ends the line, and an unmatched quote is fatal for the whole
# script. A value of kvbench's own (the results path) is written as one word.
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_./%:=,@+\-]+")


def sbatch_word(value: str) -> str:
    """`value` as exactly one word of an #SBATCH line."""
    if _SBATCH_PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sbatch_reads(line: str) -> bool:
    """Whether sbatch reads `line` (an #SBATCH line's text) without a fatal error: every
    quote closed, and no word starting with ':'."""
    quote, escaped, word_start = "", False, True
    for ch in line:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch.isspace():
            word_start = True
            continue
        elif word_start and ch == ":":
            return False
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        word_start = False
    return not quote


@dataclass(frozen=True, slots=True)
class Resources:
    gpus: int
    exclusive: bool

    @classmethod
    def of(cls, spec: JobSpec) -> Resources:
        if spec.row.get("framework") in CPU_ONLY_FRAMEWORKS:
            return cls(gpus=0, exclusive=False)
        return cls(gpus=spec.job().gpus, exclusive=True)


@dataclass
class SlurmExecutor:
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None  # sbatch --time, e.g. "08:00:00"
    max_parallel: int | None = None  # array throttle (%N)
    sbatch_args: list[str] = field(default_factory=list)
    poll_interval_s: float = 2.0
    timeout_s: float | None = None
    env: dict[str, str] | None = None  # environment for sbatch/squeue (e.g. SLURM_CONF)
    python: str = sys.executable
    # multi-node rows of CPU-only engines: one node per worker instead of all on one node
    spread_cpu_workers: bool = False
    submitted: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Each value becomes an `#SBATCH` line of a script: a newline would end the directive
        # and start a shell line (dropping the --array/--nodes/--gres lines after it), and
        # sbatch stops reading directives at the first non-comment line. Names are refused
        # unless they are what Slurm itself accepts (slurm.conf PartitionName: no spaces or
        # commas in one name; sbatch -p takes a comma-separated list).
        for flag, value, pattern, allowed in (
                ("--partition", self.partition, _SLURM_NAMES,
                 "letters, digits, '_', '.', '-', comma-separated"),
                ("--account", self.account, _SLURM_NAMES,
                 "letters, digits, '_', '.', '-', comma-separated"),
                ("--time-limit", self.time_limit, _SLURM_TIME,
                 "minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED or infinite")):
            if value is not None and not pattern.fullmatch(value):
                raise SweepOptionError(f"{flag} {value[:80]!r}: not a Slurm value "
                                       f"(allowed: {allowed})")
        for arg in self.sbatch_args:
            if (not arg.startswith("-") or len(arg) > 1024 or _CONTROL.search(arg)
                    or not _sbatch_reads(arg)):
                raise SweepOptionError(
                    f"--sbatch-arg {arg[:80]!r}: not one sbatch option (allowed: a single "
                    f"line starting with '-', without control characters, an unclosed quote "
                    f"or a word starting with ':', at most 1,024 characters)")
        if self.max_parallel is not None and not 1 <= self.max_parallel <= MAX_ARRAY_TASKS:
            raise SweepOptionError(f"--max-parallel {self.max_parallel}: out of range "
                                   f"(allowed: 1 to {MAX_ARRAY_TASKS:,})")

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, **(self.env or {})})
        except FileNotFoundError:
            raise SweepError(f"{argv[0]} not found: the slurm executor needs the Slurm "
                             f"client commands on PATH") from None
        except subprocess.TimeoutExpired:
            raise SweepError(f"{argv[0]} did not answer within 60 s") from None

    def script(self, specs: Sequence[JobSpec], res: Resources, array_dir: Path,
               results: Path) -> str:
        """The sbatch script of one array (written to array_dir/array.sbatch)."""
        n = len(specs)
        throttle = f"%{self.max_parallel}" if self.max_parallel else ""
        lines = [*self._header(array_dir.name, array_dir / "task-%a.log"),
                 f"#SBATCH --array=0-{n - 1}{throttle}",
                 "#SBATCH --nodes=1",
                 "#SBATCH --ntasks=1"]
        if res.gpus:
            lines.append(f"#SBATCH --gres=gpu:{res.gpus}")
        if res.exclusive:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {a}" for a in self.sbatch_args]
        lines += [
            "set -euo pipefail",
            f"exec {shlex.quote(self.python)} -m kvbench run-job "
            f"--job-file {shlex.quote(str(array_dir / 'jobs'))}/${{SLURM_ARRAY_TASK_ID}}.json "
            f"--results {shlex.quote(str(results))}",
        ]
        return "\n".join(lines) + "\n"

    def _header(self, name: str, output: Path) -> list[str]:
        if _CONTROL.search(str(output)):
            raise SweepOptionError(f"results directory {str(output.parent)[:120]!r}: a path "
                                   f"with a control character cannot be an #SBATCH --output "
                                   f"(allowed: a path without newlines or control characters)")
        lines = ["#!/bin/bash", f"#SBATCH --job-name=kvbench-{name}",
                 f"#SBATCH {sbatch_word(f'--output={output}')}"]
        for flag, value in (("--partition", self.partition), ("--account", self.account),
                            ("--time", self.time_limit)):
            if value:
                lines.append(f"#SBATCH {flag}={value}")
        return lines

    def multinode_script(self, spec: JobSpec, job_dir: Path, results: Path) -> str:
        """One allocation for a multi-node row: its nodes, one task per worker; the batch
        step runs `kvbench run-job`, which starts every worker with srun (sweep/multinode.py)."""
        from kvbench.sweep.workers import nodes_needed, workers_of

        workers = workers_of(spec.row)
        cpu_only = spec.row.get("framework") in CPU_ONLY_FRAMEWORKS
        gpn = _gpus_per_node(spec)
        nodes = nodes_needed(workers, gpn, cpu_only, self.spread_cpu_workers)
        if not cpu_only and isinstance(spec.row.get("node-count"), int):
            # newer layout: the generator's allocation size (num-nodes, or the srt-slurm
            # recipe's roles), which may hold more than the workers' own GPUs need
            nodes = max(nodes, spec.row["node-count"])
        gres = min(gpn, max(w.gpus for w in workers))
        tasks = len(workers)
        built = _built_launch(spec)
        if built is not None:
            # the adapter places its workers itself (plan_workers: whole nodes each, or a
            # role packed onto `<ROLE>_NODES=`; a recipe row: srtctl's placement): its
            # nodes, a task per worker process, and the most GPUs one node holds
            count = spec.row.get("node-count")
            nodes = max(built.nodes, count if isinstance(count, int) else 0)
            gres = min(gpn, max(built.node_gpus().values(), default=0))
            tasks = max(len(built.workers), 1)
        lines = [*self._header(job_dir.name, job_dir / "task.log"),
                 f"#SBATCH --nodes={nodes}",
                 f"#SBATCH --ntasks={tasks}"]
        if not cpu_only and gres:
            lines += [f"#SBATCH --gres=gpu:{gres}",
                      "#SBATCH --exclusive"]
        lines += [f"#SBATCH {a}" for a in self.sbatch_args]
        lines += ["set -euo pipefail",
                  f"exec {shlex.quote(self.python)} -m kvbench run-job --job-file "
                  f"{shlex.quote(str(job_dir / 'job.json'))} --results "
                  f"{shlex.quote(str(results))}"]
        return "\n".join(lines) + "\n"

    def submit_multinode(self, specs: Sequence[JobSpec], results: Path
                         ) -> list[tuple[str, Path, list[JobSpec]]]:
        """One sbatch allocation per multi-node row."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        out = []
        for i, spec in enumerate(specs):
            job_dir = (layout.sweep_dir(results) / "slurm" / f"{stamp}-mn{i}").resolve()
            job_dir.mkdir(parents=True, exist_ok=True)
            spec.write(job_dir / "job.json")
            script = job_dir / "allocation.sbatch"
            script.write_text(self.multinode_script(spec, job_dir, results.resolve()))
            out.append((self._sbatch(script), job_dir, [spec]))
        return out

    def _sbatch(self, script: Path) -> str:
        out = self._run(["sbatch", "--parsable", str(script)])
        if out.returncode != 0:
            raise SweepError(f"sbatch failed ({out.returncode}): {out.stderr.strip()}",
                             hint=f"the script is {script}")
        job_id = out.stdout.strip().split(";")[0]
        (script.parent / "slurm-job-id").write_text(job_id + "\n")
        self.submitted.append(job_id)
        return job_id

    def submit(self, specs: Sequence[JobSpec], results: Path) -> list[tuple[str, Path,
                                                                           list[JobSpec]]]:
        """Write job files and scripts, sbatch one array per resource group."""
        groups: dict[Resources, list[JobSpec]] = {}
        for spec in specs:
            groups.setdefault(Resources.of(spec), []).append(spec)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        arrays = []
        for g, (res, members) in enumerate(groups.items()):
            array_dir = (layout.sweep_dir(results) / "slurm" / f"{stamp}-{g}").resolve()
            (array_dir / "jobs").mkdir(parents=True, exist_ok=True)
            for i, spec in enumerate(members):
                spec.portable().write(array_dir / "jobs" / f"{i}.json")
            script = array_dir / "array.sbatch"
            script.write_text(self.script(members, res, array_dir, results.resolve()))
            arrays.append((self._sbatch(script), array_dir, members))
        return arrays

    def active(self, job_ids: Sequence[str]) -> int:
        """How many tasks of these arrays are still pending or running."""
        out = self._run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i %T"])
        if out.returncode != 0:
            if "Invalid job id" in out.stderr:
                return 0  # all finished and purged
            raise SweepError(f"squeue failed: {out.stderr.strip()}")
        return len([ln for ln in out.stdout.splitlines() if ln.strip()])

    def cancel(self) -> None:
        if self.submitted:
            self._run(["scancel", *self.submitted])

    def run(self, specs: Sequence[JobSpec], results: Path, *, rerun_failed: bool = True,
            on_poll: Callable[[int, int], None] | None = None) -> list[JobOutcome]:
        """Submit the jobs not yet done, wait for every array task, collect outcomes."""
        results = Path(results)
        todo = [s for s in specs if not s.done_in(results, rerun_failed=rerun_failed)]
        skipped = {s.dir_name for s in specs} - {s.dir_name for s in todo}
        # One array task runs one single-node server; a multi-node row gets an allocation
        # of its own with a task per worker.
        single = [s for s in todo if not s.job().is_multinode]
        multi = [s for s in todo if s.job().is_multinode]
        arrays = self.submit(single, results) if single else []
        allocations = self.submit_multinode(multi, results) if multi else []
        ids = [a[0] for a in arrays + allocations]
        t0 = time.monotonic()
        try:
            while ids and (left := self.active(ids)):
                if on_poll is not None:
                    on_poll(len(todo) - left, len(todo))
                if self.timeout_s is not None and time.monotonic() - t0 > self.timeout_s:
                    self.cancel()
                    raise SweepError(f"Slurm arrays {ids} still running after "
                                     f"{self.timeout_s:.0f} s; cancelled")
                time.sleep(self.poll_interval_s)
        except KeyboardInterrupt:
            self.cancel()
            raise
        task_logs = {s.dir_name: a[1] / f"task-{i}.log"
                     for a in arrays for i, s in enumerate(a[2])}
        task_logs.update({a[2][0].dir_name: a[1] / "task.log" for a in allocations})
        return [self._collect(s, results, s.dir_name in skipped, task_logs.get(s.dir_name))
                for s in specs]

    @staticmethod
    def _collect(spec: JobSpec, results: Path, skipped: bool, log: Path | None) -> JobOutcome:
        job_dir = results / spec.dir_name
        path = str(job_dir / layout.RESULT_FILE)
        if skipped:
            return JobOutcome(spec.dir_name, "skipped", reason="result exists", result_path=path)
        status = spec.status_in(results)
        if status is None:
            tail = ""
            if log is not None and log.exists():
                tail = " | ".join(log.read_text(errors="replace").splitlines()[-5:])
            return JobOutcome(spec.dir_name, "failed", phase="slurm",
                              reason=f"the array task wrote no result.json; task log "
                                     f"{log}: {tail}")
        from kvbench.files import read_json

        failure = read_json(job_dir / layout.RESULT_FILE).get("failure") or {}
        return JobOutcome(spec.dir_name, status, phase=failure.get("stage"),
                          reason=failure.get("reason"), result_path=path)


def _built_launch(spec: JobSpec):  # -> kvbench.engines.LaunchSpec | None
    """The launch of a row whose adapter builds it whole (every worker placed on the
    allocation's nodes), else None (one single-node server per worker row). A row the adapter
    refuses gets its smallest allocation: `run-job` there records the refusal as its result."""
    from kvbench.engines import get_adapter
    from kvbench.errors import KvbenchError

    try:
        adapter = get_adapter(spec.row.get("framework", ""), multinode=True)
    except KvbenchError:
        return None
    if not adapter.builds_workers:
        return None
    runners = None
    if spec.runner_config:
        from kvbench.recipe import load_runners

        runners = load_runners(Path(spec.runner_config))
    from kvbench.engines import LaunchSpec

    try:
        return adapter.build(spec.job(), None, port=0, runners=runners)
    except KvbenchError:
        return LaunchSpec(engine=adapter.name, argv=[], base_url="", metrics_url="",
                          health_url="", served_model_name="")


def _gpus_per_node(spec: JobSpec) -> int:
    """The runner's gpus-per-node from runners.yaml, else 8 (the catalog's GPU nodes)."""
    if spec.runner_config:
        from kvbench.recipe import load_runners

        known = load_runners(Path(spec.runner_config)).gpus_per_node(spec.row.get("runner", ""))
        if known is not None:
            return known
    return DEFAULT_GPUS_PER_NODE
