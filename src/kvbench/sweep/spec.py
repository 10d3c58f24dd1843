"""JobSpec: one job of a sweep as a file (job.json), with its fingerprint and directory."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvbench import SCHEMA_VERSION, bounds
from kvbench.errors import (
    KvbenchError,
    SweepError,
    SweepOptionError,
    shown,
    validation_message,
)
from kvbench.files import path_part, read_json, write_json_atomic
from kvbench.recipe.fields import (
    KV_OFFLOAD_BACKENDS,
    KV_OFFLOADINGS,
    SCENARIO_TYPES,
    SPEC_DECODINGS,
)
from kvbench.redaction import REDACTED, redact_json
from kvbench.sweep.layout import JOB_FILE, is_done, replayed_other_sessions, result_status
from kvbench.sweep.options import RunOptions


def job_fingerprint(row: dict[str, Any], options: RunOptions | None = None,
                    config_key: str | None = None) -> str:
    """Stable hash of the row, kvbench's result schema version and the workload options: a
    result with this fingerprint measured exactly this job. The config key counts too: the
    real catalog has identical rows under two keys (power A/B twins) that are distinct jobs."""
    identity = {
        "config-key": config_key,
        "row": row,
        "schema-version": SCHEMA_VERSION,
        "workload": (options or RunOptions()).measurement_identity(),
    }
    return hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()


# A job file's row is a matrix row (matrix/generate.py), read back from disk or a CI matrix
# entry where nothing checked it since the recipe was validated: each number is held to its
# physical range (kvbench/bounds.py) and each closed word to the recipe vocabulary, so a
# planted `tp: 1024` or `kv-offloading: tape` is refused before a server starts.
_ROW_RANGES: dict[str, bounds.Range] = {
    "tp": bounds.PARALLELISM, "pp": bounds.PARALLELISM, "ep": bounds.PARALLELISM,
    "dcp-size": bounds.PARALLELISM, "pcp-size": bounds.PARALLELISM, "conc": bounds.LANES,
    "isl": bounds.CONTEXT_TOKENS, "osl": bounds.OUTPUT_TOKENS,
    "max-model-len": bounds.CONTEXT_TOKENS, "total-cpu-dram-gb": bounds.HOST_GB,
    "num-worker": bounds.WORKER_COUNT, "num-nodes": bounds.NODES,
    "node-count": bounds.NODES, "size-gb-per-rank": bounds.HOST_GB_PER_RANK,
    "duration": bounds.DURATION_S,
}
_ROW_WORDS: dict[str, tuple[str, ...]] = {
    "kv-offloading": KV_OFFLOADINGS, "spec-decoding": SPEC_DECODINGS,
    "kv-offload-backend.name": KV_OFFLOAD_BACKENDS, "scenario-type": SCENARIO_TYPES,
}
_ROW_PARTS = ("prefill", "decode", "worker", "kv-offload-backend")


def row_problem(row: dict[str, Any]) -> str | None:
    """What makes a job row impossible (`path value: problem`), or None."""
    found = bounds.long_text(row)
    if found is not None:
        return f"{bounds.path_text(found[0])}: {bounds.text_problem(found[1])}"
    places = [("", row)] + [(f"{k}.", row[k]) for k in _ROW_PARTS if isinstance(row.get(k),
                                                                                dict)]
    for prefix, part in places:
        for key, value in part.items():
            where = prefix + str(key)
            rng = _ROW_RANGES.get(key)
            if rng is not None:
                for v in value if key == "conc" and isinstance(value, list) else (value,):
                    if (problem := rng.problem(v)) is not None:
                        return f"{where} {shown(v)}: {problem}"
            words = _ROW_WORDS.get(where)
            if words is not None and value not in words:
                return f"{where} {shown(value)} is not allowed (allowed: {', '.join(words)})"
            if isinstance(value, float) and not math.isfinite(value):
                return f"{where} {shown(value)}: not a finite number"
    return None


class JobSpec(BaseModel):
    """Everything `kvbench run-job` needs: the row, where results go, how to run it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config_key: str
    scenario: str
    row: dict[str, Any]
    repeat: Annotated[int, bounds.REPEAT_INDEX.validator()] = 0
    fingerprint: str
    dir_name: str
    runner_config: str | None = None
    # the master config the row comes from (its checkout holds the recipes the row names)
    config_file: str | None = None
    options: RunOptions = Field(default_factory=RunOptions)

    @field_validator("options", mode="before")
    @classmethod
    def _sized_before_launcher_sizing(cls, v: Any) -> Any:
        """A job.json written before launcher sizing was the default has no `sizing`: its
        job was budget-sized (plan/launcher_sizing.py), and its identity says so."""
        if isinstance(v, dict) and "sizing" not in v:
            return {**v, "sizing": "budget"}
        return v
    schema_version: int = SCHEMA_VERSION

    @field_validator("dir_name")
    @classmethod
    def _one_path_part(cls, name: str) -> str:
        # a job file or --job-json from elsewhere must not aim run-job outside --results
        if name != path_part(name):
            raise ValueError(f"dir_name {name!r} is not a plain directory name (allowed: "
                             "letters, digits and ._+=@,-; no path separators, no leading dot)")
        return name

    @field_validator("row")
    @classmethod
    def _possible_row(cls, row: dict[str, Any]) -> dict[str, Any]:
        if (problem := row_problem(row)) is not None:
            raise ValueError(problem)
        return row

    @property
    def exp_name(self) -> str:
        return str(self.row.get("exp-name", self.config_key))

    def corpus_digest(self) -> str:
        """The digest of the sessions this job's replay sends (workload/identity.py), as its
        result records it: the traces as this kvbench loads them, or the synthetic sessions
        of the replay's seed."""
        paths = self.options.trace_paths()
        seed = None
        if paths is None:
            seed = self.options.replay_workload(self.job().conc, float(
                self.row.get("duration") or 0), self.repeat)["seed"]
        return _corpus_digest(None if paths is None else tuple(map(str, paths)), seed)

    def status_in(self, results: Path) -> str | None:
        """Its result's status in `results` if that result is this job's (layout.py
        `result_status`: the fingerprint, profile and sessions), else None."""
        return result_status(results / self.dir_name, self.fingerprint,
                             self.options.profile_name, self.corpus_digest)

    def done_in(self, results: Path, rerun_failed: bool = True) -> bool:
        """Whether resume may skip it (layout.py `is_done`)."""
        return is_done(results / self.dir_name, self.fingerprint,
                       profile=self.options.profile_name, corpus=self.corpus_digest,
                       rerun_failed=rerun_failed)

    def stale_in(self, results: Path) -> bool:
        """Whether its result in `results` replayed other sessions than it would now."""
        return replayed_other_sessions(results / self.dir_name, self.fingerprint,
                                       self.options.profile_name, self.corpus_digest)

    def job(self):
        """The matrix Job this spec runs."""
        from kvbench.matrix import Job

        return Job(config_key=self.config_key, row=self.row, scenario=self.scenario,
                   config_file=Path(self.config_file) if self.config_file else None)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")

    def write(self, path: Path) -> Path:
        """job.json, secrets redacted (by name and value): a record, and what `run-job` reads."""
        return write_json_atomic(path, redact_json(self.to_json()))

    def portable(self) -> JobSpec:
        """This spec, checked to survive being written and read elsewhere (a Slurm task file,
        a CI matrix entry): a secret in it would be redacted there, so it is refused here."""
        if redact_json(self.to_json()) != self.to_json():
            raise SweepError(
                f"job {self.dir_name}: its engine arguments or options hold a secret, which "
                "is never written to a job file",
                hint="pass secrets to the engine through the environment (its own variable, "
                "e.g. HF_TOKEN or the engine's API-key variable), not --engine-arg")
        return self

    @classmethod
    def read(cls, path: Path) -> JobSpec:
        try:
            spec = cls.model_validate(read_json(path))
        except ValidationError as e:
            raise SweepOptionError(validation_message(e, f"cannot read job file {path}")) from None
        except (OSError, ValueError) as e:
            raise SweepOptionError(f"cannot read job file {path}: {e}") from None
        if REDACTED in orjson.dumps(spec.to_json()).decode():
            raise SweepError(f"{path}: the job's arguments hold a redacted secret; it cannot "
                             "run from this file",
                             hint="pass secrets through the environment, not --engine-arg")
        return spec


def job_run_options(job_dir: Path) -> dict | None:
    """Result.run_options (the measurement identity) of the job that wrote `job_dir`, from its
    job.json: for results written before kvbench recorded it (`kvbench rescore`). None
    without a readable job.json or when its traces are gone (their content is part of it)."""
    try:
        spec = JobSpec.model_validate(read_json(Path(job_dir) / JOB_FILE))
        return spec.options.measurement_identity()
    except (OSError, ValueError, KvbenchError):  # no job.json, or its traces are gone
        return None


def job_absent_cached_tokens_are_zero(job_dir: Path) -> bool:
    """Whether the server of the job that wrote `job_dir` (its command.json) reported cached
    tokens only when there were some, so a usage without them means 0 (`kvbench rescore`)."""
    from kvbench.engines import get_adapter

    try:
        command = read_json(Path(job_dir) / "command.json")
        data = get_adapter(read_json(Path(job_dir) / JOB_FILE)["row"]["framework"]).data
    except (OSError, ValueError, KeyError, TypeError, KvbenchError):
        return False
    return data.cache_report_omits_zero is not None and \
        data.cache_report_omits_zero in (command.get("argv") or [])


@lru_cache(maxsize=8)
def _corpus_digest(paths: tuple[str, ...] | None, seed: int | None) -> str:
    """One load per trace set (or synthetic seed) however many jobs a sweep resumes."""
    from kvbench.replay.runner import workload_sessions
    from kvbench.workload import SyntheticSpec
    from kvbench.workload.identity import fingerprint

    trace = None if paths is None else [Path(p) for p in paths]
    return fingerprint(workload_sessions(trace, SyntheticSpec(seed=seed or 0)))


def _held_by_other_job(job_dir: Path, config_key: str, row: dict[str, Any]) -> bool:
    """Whether `job_dir` holds another job's files (its job.json names another config key or
    row): two keys that differ only where the exp-name does not look (a HiCache write policy,
    say) run in separate `kvbench run` calls into one results directory must not take each
    other's directory, where the second would clear the first's result. The same job with
    other options (another --duration) is the same job: it reruns in place, as before."""
    try:
        held = read_json(job_dir / JOB_FILE)
    except (OSError, ValueError):
        return False
    # compared as job.json holds it (JSON), so a tuple or an int-valued float reads the same
    mine = orjson.loads(orjson.dumps({"config_key": config_key, "row": row}))
    return isinstance(held, dict) and (held.get("config_key"), held.get("row")) != (
        mine["config_key"], mine["row"])


def build_specs(jobs: Sequence[Any], options: RunOptions, *, repeats: int = 1,
                runner_config: Path | None = None, results: Path | None = None) -> list[JobSpec]:
    """One spec per (job, repeat). Directory names are the exp-name; an exp-name shared with
    another job, in this sweep (the reference's exp-name omits ep, dp-attn, runner, the config
    key and the offload backend's settings) or in `results` already, gets a short fingerprint
    suffix; repeats after the first get `__r<n>`. Order: repeat-major."""
    if repeats < 1:
        raise SweepError(f"repeats must be >= 1, got {repeats}")
    # each job's own options: the validity profile its row replays under (RunOptions.for_row)
    per_job = [options.for_row(j.row) for j in jobs]
    prints = [job_fingerprint(j.row, o, j.config_key) for j, o in zip(jobs, per_job,
                                                                      strict=True)]
    if len(set(prints)) != len(prints):
        dup = Counter(prints).most_common(1)[0][0]
        name = jobs[prints.index(dup)].exp_name
        raise SweepError(f"the selection contains the same job twice ({name})",
                         hint="check for duplicate config keys across the recipe files")
    names = Counter(j.exp_name for j in jobs)
    specs = []
    # repeat-major: every job once, then every job again, so that a drift of the machine
    # (another tenant, thermal state) spreads over all arms instead of biasing the one that
    # ran while it lasted
    for r in range(repeats):
        for job, fp, job_options in zip(jobs, prints, per_job, strict=True):
            name = path_part(job.exp_name)  # the exp-name holds recipe text (model-prefix)
            shared = names[job.exp_name] > 1 or (
                results is not None and _held_by_other_job(Path(results) / name,
                                                           job.config_key, dict(job.row)))
            base = f"{name}__{fp[:8]}" if shared else name
            specs.append(JobSpec(
                config_key=job.config_key, scenario=job.scenario, row=dict(job.row),
                repeat=r, fingerprint=fp, dir_name=base if r == 0 else f"{base}__r{r}",
                runner_config=str(Path(runner_config).resolve()) if runner_config else None,
                config_file=(str(Path(job.config_file).resolve())
                             if getattr(job, "config_file", None) else None),
                options=job_options,
            ))
    return specs
