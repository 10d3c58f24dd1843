"""Issue 37: the device calls' tarballs into `benchmarks/results/h200/qwen3.5/`, repaired where
kvbench's own bugs of the day left marks in the files, so that today's readers take them.

    python benchmarks/gpu/qwen3.5/collect.py CALL2_TARBALL CALL3_5_TARBALL OUT
    PYTHONPATH=src python -m kvbench rescore OUT/runs

Run from the repository root (the job files name the traces relative to it). What it does,
each step printed:

1. copies each job directory and its step's files (`memory.jsonl.gz`, `call.log`, `run.log`,
   `run.json`, `pva.txt` as the device printed it, SGLang's last `/metrics` text gzip-ed) into
   `runs/<arm>-c<conc>[-a|-b]`, the probe into `probe/`, call 2's failed starts into
   `attempt-1/`, call 5's cut repeat into `attempt-2/`;
2. names each job's config key where the results lock had redacted it (`<redacted>`: kvbench's
   `--config-keys` was read as a secret flag, fixed in kvbench/redaction.py): the recipe key
   whose job fingerprint equals the job's is its key, and only that one;
3. numbers call 5's rerun of the conc-8 HiCache job repeat 1 (it ran as repeat 0 again, under
   a fingerprint suffix, because of 2): a second measurement of the same job, what
   `--repeat 2` was sent for; its own job.json/result.json keep the rest;
4. plans every job again with this kvbench (the page size among --engine-arg, the pools SGLang
   0.5.17 sizes) and keeps the run's own plan as `plan.orig.json`, only where the new plan
   gives the engine the same arguments and the same configured host size: what the server was
   told is unchanged, its projection is corrected.

Then `kvbench rescore` derives each result.json again (the run's own kept as result.orig.json)."""

from __future__ import annotations

import gzip
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import orjson

from kvbench.files import read_json, write_json_atomic
from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job
from kvbench.recipe import load_runners
from kvbench.redaction import REDACTED
from kvbench.sweep.options import RunOptions
from kvbench.sweep.spec import job_fingerprint

HERE = Path(__file__).resolve().parent
RECIPE, RUNNERS = HERE / "recipe.yaml", HERE / "runners.yaml"
# run.sh: the flags of every arm; the probe ran them without the replay jobs' caps
PROBE_ARGS = ["--attention-backend=triton", "--sampling-backend=pytorch", "--disable-cuda-graph"]
HICACHE = "results-q35/qwen3.5_tp1_conc{c}_kvdram-hicache_spec-mtp"
RESIDENT = "results-q35/qwen3.5_tp1_conc{c}_kvnone_spec-mtp"
# (destination, tarball, job directory, the run.sh step's directory)
JOBS = [
    ("attempt-1/unpatched-c4", "call2", "results-q35-unpatched/"
     "qwen3.5_tp1_conc4_kvdram-hicache_spec-mtp", "unpatched-c4"),
    ("runs/hicache-c8-a", "call35", HICACHE.format(c=8), "hicache-c8"),
    ("runs/resident-c8", "call35", RESIDENT.format(c=8), "resident-c8"),
    ("runs/unpatched-c4", "call35", "results-q35-unpatched/"
     "qwen3.5_tp1_conc4_kvdram-hicache_spec-mtp", "unpatched-c4"),
    ("runs/hicache-c4", "call35", HICACHE.format(c=4), "hicache-c4"),
    ("runs/resident-c4", "call35", RESIDENT.format(c=4), "resident-c4"),
    ("runs/hicache-c8-b", "call35", HICACHE.format(c=8) + "__d1c59061", "hicache-c8x2"),
    ("attempt-2/hicache-c8-b-r1", "call35", HICACHE.format(c=8) + "__d1c59061__r1", None),
]
PROBES = [("attempt-1/probe", "call2", "probe"), ("probe", "call35", "probe")]
STEP_FILES = ("memory.jsonl.gz", "call.log", "run.log", "run.json", "pva.txt")


def _copy_step(step: Path, dest: Path, port: str | None) -> None:
    for name in STEP_FILES:
        if (step / name).is_file() and (step / name).stat().st_size:
            shutil.copy2(step / name, dest / ("pva.device.txt" if name == "pva.txt" else name))
    for metrics in sorted(step.glob("metrics-*.txt")):
        if port is None or metrics.stem in (f"metrics-{port}", "metrics-idle", "metrics-after"):
            with open(metrics, "rb") as src, open(dest / f"{metrics.name}.gz", "wb") as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
                shutil.copyfileobj(src, out)


def _port(job: Path) -> str | None:
    argv = read_json(job / "command.json").get("argv") or []
    return argv[argv.index("--port") + 1] if "--port" in argv else None


def _recipe_keys() -> list[str]:
    return sorted({j.config_key for j in select_jobs(Selection(config_files=(RECIPE,)))})


def _name_key(job: Path) -> None:
    spec = read_json(job / "job.json")
    if spec.get("config_key") != REDACTED:
        return
    options = RunOptions.model_validate(spec["options"])
    found = [k for k in _recipe_keys()
             if job_fingerprint(spec["row"], options, k) == spec["fingerprint"]]
    if len(found) != 1:
        raise SystemExit(f"{job}: no single recipe key has the job's fingerprint ({found})")
    for name in ("job.json", "result.json"):
        if (job / name).is_file():
            doc = read_json(job / name)
            doc["config_key"] = found[0]
            write_json_atomic(job / name, doc)
    print(f"{job}: config key {found[0]} (its fingerprint {spec['fingerprint'][:8]}...)")


def _repeat(job: Path, repeat: int) -> None:
    for name in ("job.json", "result.json"):
        doc = read_json(job / name)
        doc["repeat"] = repeat
        write_json_atomic(job / name, doc)
    print(f"{job}: repeat {repeat} (call 5 ran the job's repeat 0 again: a second measurement)")


def _replan(job: Path, old: dict, new: dict) -> None:
    """Keep the run's plan as plan.orig.json and write today's, where the server was told the
    same: the engine arguments and the configured host size are unchanged."""
    def told(p: dict) -> tuple:
        return (p.get("engine-args"), p.get("engine-env"), p.get("engine-config"),
                [(h["name"], h.get("configured-gb") is not None) for h in p["host-pools"]])
    if told(old) != told(new):
        raise SystemExit(f"{job}: the new plan would launch another server: not replaced")
    if not (job / "plan.orig.json").exists():
        shutil.copy2(job / "plan.json", job / "plan.orig.json")
    write_json_atomic(job / "plan.json", new)
    host = "".join(f", host {a['name']} {a['units']:,} -> {b['units']:,}"
                   for a, b in zip(old["host-pools"], new["host-pools"], strict=True))
    print(f"{job}: plan again: page {old['page-size-tokens']} -> {new['page-size-tokens']}, "
          f"device KV {old['gpu-kv-tokens']:,} -> {new['gpu-kv-tokens']:,}{host}")


def _plan_job(job: Path) -> dict:
    spec = read_json(job / "job.json")
    options = RunOptions.model_validate(spec["options"])
    (found,) = [j for j in select_jobs(Selection(config_files=(RECIPE,),
                                                 config_keys=(spec["config_key"],)))
                if j.exp_name == spec["row"]["exp-name"]]
    return plan_job(found, load_runners(RUNNERS), sizing=options.sizing, force=options.force,
                    engine_args=options.engine_args).to_json()


def _plan_probe(server: Path, recipe: Path = RECIPE, runners: Path = RUNNERS,
                engine_args: list[str] = PROBE_ARGS) -> dict:
    """Today's plan of a probe's launch (`kvbench launch` of `recipe`'s row, `engine_args`)."""
    old = read_json(server / "plan.json")
    (found,) = [j for j in select_jobs(Selection(config_files=(recipe,),
                                                 config_keys=(old["config-key"],)))
                if j.exp_name == old["exp-name"]]
    return plan_job(found, load_runners(runners), engine_args=engine_args).to_json()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for name, tarball in zip(("call2", "call35"), argv[:2], strict=True):
            roots[name] = Path(tmp) / name
            with tarfile.open(tarball) as tar:
                tar.extractall(roots[name], filter="data")
        for dest, call, job, step in JOBS:
            src, target = roots[call] / job, out / dest
            shutil.copytree(src, target, dirs_exist_ok=True)
            if step is not None:
                _copy_step(roots[call] / step, target, _port(src))
        for dest, call, step in PROBES:
            target = out / dest
            shutil.copytree(roots[call] / step, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("metrics-*.txt", "pva.txt"))
            _copy_step(roots[call] / step, target, None)
    for dest, *_ in JOBS:
        _name_key(out / dest)
    _repeat(out / "runs/hicache-c8-b", 1)
    for dest, *_ in JOBS:
        job = out / dest
        _replan(job, read_json(job / "plan.json"), orjson.loads(orjson.dumps(_plan_job(job))))
    for dest, *_ in PROBES:
        server = out / dest / "server"
        _replan(server, read_json(server / "plan.json"), _plan_probe(server))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
