"""The result.json schema: one versioned file per job. Field names follow the reference
(InferenceX agentic) result where they mean the same thing; units are in the names."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from kvbench import SCHEMA_VERSION, bounds

STATUSES = ("ok", "failed", "skipped")
# what results/reuse.py `cache_reuse` writes: the share of prompt tokens per source
REUSE_SHARES = ("gpu", "host", "external", "recomputed", "unknown_tier")
REUSE_KEYS = ("source", "prompt_tokens", *REUSE_SHARES, "cached_tokens")


class Result(BaseModel):
    # extra="forbid": a result written by a different schema must fail loudly on load.
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kvbench_version: str
    created_at: str
    status: str
    failure: dict[str, Any] | None = None
    fingerprint: str
    config_key: str
    exp_name: str
    repeat: Annotated[int, bounds.REPEAT_INDEX.validator()] = 0
    job_row: dict[str, Any]

    # job identity and topology (reference names)
    hw: str
    runner: str
    # numbers a reader compares and draws, each within its physical range (kvbench/bounds.py)
    conc: Annotated[int, bounds.LANES.validator()]
    image: str | None = None
    model: str
    infmax_model_prefix: str | None = None
    framework: str
    precision: str | None = None
    spec_decoding: str = "none"
    disagg: bool = False
    scenario_type: str = "agentic-coding"
    is_multinode: bool = False
    tp: Annotated[int, bounds.PARALLELISM.validator()] = 1
    ep: Annotated[int, bounds.PARALLELISM.validator()] = 1
    dp_attention: bool = False
    pp: Annotated[int, bounds.PARALLELISM.validator()] = 1
    dcp_size: Annotated[int, bounds.PARALLELISM.validator()] = 1
    pcp_size: Annotated[int, bounds.PARALLELISM.validator()] = 1
    num_gpus: Annotated[int, bounds.GPUS.validator()] = 1
    kv_offloading: str = "none"
    kv_offload_backend: dict[str, Any] | None = None
    allocated_cpu_dram_gb: Annotated[float, bounds.HOST_GB.validator()] = 0
    router: dict[str, Any] | None = None
    duration_s: Annotated[float | None, bounds.MEASURED_S.validator()] = None

    plan: dict[str, Any] | None = None
    # which sizing gave the host pools (launcher: the InferenceX launcher's arithmetic, or
    # budget) and the other's node bytes beside it (plan/plan.py sizing_summary; absent in
    # results written before it)
    host_sizing: dict[str, Any] | None = None
    num_requests_total: int = 0
    num_requests_successful: int = 0
    request_accounting: dict[str, Any]
    request_metrics: dict[str, Any] | None = None
    server_metrics: dict[str, Any]
    telemetry: dict[str, Any]
    energy: dict[str, Any] | None = None
    client: dict[str, Any] | None = None
    validation: dict[str, Any]
    # {valid, reasons, checks}: results/validity.py (absent in results written before it)
    validity: dict[str, Any] | None = None
    # the prompt tokens' shares from GPU / host / recomputed: results/reuse.py (absent in
    # results written before it)
    cache_reuse: dict[str, Any] | None = None
    # the same point as InferenceX's aggregator and dashboard compute it: {backend, source,
    # cache (its hit rates), share (HBM / host / unreused)} (metrics/inferencex.py; absent in
    # results written before it)
    inferencex_cache: dict[str, Any] | None = None
    warnings: list[str] = []
    # what the replay ran: the corpus (name, content fingerprint, whether an AgentX one), the
    # most requests in flight (subagents run alongside their parent), the warm-up and the
    # profiling phase after it (replay/runner.py `phases`). None: written before it.
    workload: dict[str, Any] | None = None
    # engine-image patches checked at server start and what each did (launch/patcher.py)
    engine_patches: list[dict[str, Any]] | None = None
    # Digest of the run options that change what was measured (traces by content, workload
    # bounds, engine arguments): results that differ in it are other experiments, never
    # repeats of one arm (compare and the dashboard keep them apart). None: written before it.
    options_id: str | None = None
    # The measurement identity options_id is the digest of (sweep/options.py): a reader
    # showing several option sets names the options that differ (results/option_sets.py).
    # None: written before it.
    run_options: dict[str, Any] | None = None
    # Set by a reader that shows several option sets side by side (the dashboard), never saved.
    _arm_suffix: str = PrivateAttr("")

    @field_validator("status")
    @classmethod
    def _status(cls, v: str) -> str:
        if v not in STATUSES:
            raise ValueError(f"status {v!r} is not one of {', '.join(STATUSES)}")
        return v

    @field_validator("cache_reuse")
    @classmethod
    def _reuse_shape(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # compare and the dashboard index these keys (results/reuse.py writes them)
        if v is not None:
            missing = [k for k in REUSE_KEYS if k not in v]
            if missing:
                raise ValueError(f"lacks {', '.join(missing)} (a result's cache "
                                 f"reuse has {', '.join(REUSE_KEYS)})")
            for k in REUSE_SHARES:
                if v[k] is not None and (problem := bounds.RATIO.problem(v[k])) is not None:
                    raise ValueError(f"cache_reuse.{k} {v[k]!r}: {problem}")
        return v

    @field_validator("inferencex_cache")
    @classmethod
    def _inferencex_shape(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # compare averages the share's segments and the dashboard draws them
        # (metrics/inferencex.py `cache_share` writes them): a string there was a traceback
        share = (v or {}).get("share")
        if share is None:
            return v
        if not isinstance(share, dict) or type(share.get("combined")) is not bool:
            raise ValueError("share: not an InferenceX share (hbm, host, unreused, combined)")
        for k in ("hbm", "host", "unreused"):
            if (problem := bounds.RATIO.problem(share.get(k))) is not None:
                raise ValueError(f"share.{k} {share.get(k)!r}: {problem}")
        return v

    @property
    def valid(self) -> bool | None:
        return None if self.validity is None else bool(self.validity.get("valid"))

    @property
    def sessions(self) -> str:
        """The sessions its replay sent, by their digest's first 12 hex digits
        (workload/identity.py; "unrecorded": written before results recorded it). Runs of one
        option set that sent other sessions (the same trace files read by two kvbench
        versions) are other experiments: compare and the dashboard keep them apart."""
        digest = recorded_sessions(self.workload)
        return digest[:12] if digest is not None else "unrecorded"

    def tag_arm(self, tag: str) -> None:
        """Append `tag` to this result's arm name (in memory only): a reader showing several
        run-option sets keeps their arms apart."""
        self._arm_suffix += f" [{tag}]"

    @property
    def arm(self) -> str:
        """The configuration without concurrency: what a Pareto front or a line is drawn for."""
        backend = (self.kv_offload_backend or {}).get("name")
        offload = "resident" if self.kv_offloading == "none" else f"offload-{backend or 'dram'}"
        topo = f"tp{self.tp}" + (f"ep{self.ep}" if self.ep > 1 else "") + (
            "-dpa" if self.dp_attention else "")
        spec = "" if self.spec_decoding in ("none", None) else f" spec-{self.spec_decoding}"
        return (f"{self.framework} {self.infmax_model_prefix or self.model} {topo} {offload}{spec}"
                f"{self._arm_suffix}")


def recorded_sessions(workload: Any) -> str | None:
    """The digest of the sessions a result's replay sent, from its `workload` (None: written
    before results recorded it)."""
    corpus = workload.get("corpus") if isinstance(workload, dict) else None
    digest = corpus.get("fingerprint") if isinstance(corpus, dict) else None
    return digest if isinstance(digest, str) else None


def impossible_metric(result: Result) -> str | None:
    """The first count, metric or energy figure of `result` that is NaN, infinite, negative
    or past the physical range its unit has (a latency of 10^300 ms, a time scale of 1e300):
    such a number compares as anything, and compare/report would draw it as a finding.
    Checked when a result is read, not when a run writes it (a run's odd gauge must not lose
    its measurements)."""
    for name in ("conc", "num_gpus", "num_requests_total", "num_requests_successful",
                 "allocated_cpu_dram_gb", "request_metrics", "server_metrics", "energy",
                 "cache_reuse"):
        bad = _impossible(getattr(result, name), name)
        if bad:
            return bad
    return None


# the unit a metric's name carries (DESIGN.md: units in names) and its range; summary
# statistics (mean, p50, n ...) take their parent's. Checked in order: the first match wins.
_UNIT_RANGES: tuple[tuple[Any, bounds.Range], ...] = (
    (lambda k: k == "time_scale", bounds.TIME_SCALE),
    (lambda k: "tok_s" in k, bounds.TOKEN_RATE),
    (lambda k: k.endswith("requests_s"), bounds.REQUEST_RATE),
    (lambda k: k.endswith("_ms") or "_ms_" in k, bounds.MEASURED_MS),
    (lambda k: k in ("window_s", "duration_s", "elapsed_s", "profiled_s"), bounds.MEASURED_S),
    (lambda k: k.endswith("tokens") or k.startswith("cached_tokens"), bounds.TOKEN_TOTAL),
)
_STATS = frozenset({"mean", "std", "n", "min", "max", "p50", "p75", "p90", "p95", "p99"})
# mappings of a metric's name to the words it was read from (server_metrics.sources: the
# engine counter each figure came from), not to numbers
_LABELS = frozenset({"sources"})


def _unit_range(key: str, inherited: bounds.Range | None) -> bounds.Range | None:
    if key in _STATS:
        return inherited
    return next((rng for match, rng in _UNIT_RANGES if match(key)), None)


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return "list" if isinstance(v, list | tuple) else type(v).__name__


def _impossible(value: Any, path: str, rng: bounds.Range | None = None) -> str | None:
    """The first number under `value` that is NaN, infinite, negative or outside the range
    of its unit (`rng`, from its name), as `path: value`."""
    if value is None:
        return None
    if isinstance(value, bool | str):  # a flag or a word, unless its name gives it a unit
        return None if rng is None else f"{path} is {value!r}: {rng.problem(value)}"
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            return f"{path} is {value!r}: a metric is a finite number >= 0"
        if rng is not None and (problem := rng.problem(value)) is not None:
            return f"{path} is {value!r}: {problem}"
        return None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        kinds = {_kind(v) for v in value if v is not None}
        # a series with holes (None) is a numeric one: a word there is no measurement
        if (len(kinds) > 1 and kinds & {"number", "list"}) or (
                None in value and kinds - {"number", "list", "dict"}):
            return f"{path} mixes {' and '.join(sorted(kinds))} items: a series is uniform"
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        if k in _LABELS:
            continue
        bad = _impossible(v, f"{path}.{k}" if isinstance(k, str) else f"{path}[{k}]",
                          _unit_range(k, rng) if isinstance(k, str) else rng)
        if bad:
            return bad
    return None
