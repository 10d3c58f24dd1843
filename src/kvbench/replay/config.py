"""What one replay run does (pydantic: the boundary the CLI, the sweep and tests fill in)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbench.replay.profile import chat_prompts
from kvbench.units import MAX_REPLAY_WORKERS, MAX_SESSION_LANES
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.synthetic import SyntheticSpec


class ReplayConfig(BaseModel):
    # forbid: a misspelt option must fail, not silently run a different experiment
    model_config = ConfigDict(extra="forbid")

    url: str
    model: str
    endpoint: Literal["chat", "completions"] = "chat"
    trace: list[Path] | None = None  # None: synthetic
    synthetic: SyntheticSpec | None = None
    concurrency: int = Field(1, ge=1, le=MAX_SESSION_LANES, description="live session lanes")
    # processes the lanes are sharded over (replay/workers.py): one event loop sustains about
    # a core's worth of streams; records merged, one summary
    workers: int = Field(1, ge=1, le=MAX_REPLAY_WORKERS)
    duration_s: float | None = Field(None, gt=0)
    max_requests: int | None = Field(None, ge=1, description="profiled requests to send")
    warmup_requests: int = Field(0, ge=0)
    seed: int = 0
    correlation_header: str | None = "X-Session-ID"
    output_dir: Path
    tokenizer: str | None = None
    num_gpus: int = Field(1, ge=1)
    max_tokens_cap: int | None = Field(None, ge=1)
    # additions beyond the cross-area contract
    think_time_cap_s: float | None = Field(
        60.0, ge=0, description="longest idle gap before one turn (None: uncapped)")
    think_time_scale: float = Field(1.0, ge=0)
    # When no lane has a request in flight or one ready to send, the pending think times
    # shift together so that the next request leaves within this (server-clock) time:
    # AgentX's system idle cap (replay/idle.py). None: think times as they are.
    system_idle_cap_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    # ... and within one session tree: when none of its requests is in flight, its pending
    # timers shift so that its next request leaves within this (AgentX's trace idle cap, 300)
    tree_idle_cap_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    # one-token requests each lane sends after its t* warm-up requests, with no idle delay,
    # before the profiling phase (replay/warmup.py; AgentX: 10)
    warmup_per_lane: int | None = Field(None, ge=0)
    # the warm-up must drain within this (server seconds); past it the run ends (AgentX 1800)
    warmup_grace_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    # whole sessions whose peak prompt + output exceeds this are left out (the server's
    # context length: InferenceX's --max-context-length)
    max_context_tokens: int | None = Field(None, ge=1)
    # the corpus the traces are, by name (workload/identity.py checks its fingerprint)
    corpus: str | None = None
    # a session ends at its first context overflow (every later turn is longer still)
    end_session_on_context_overflow: bool = False
    # The embedded engine's --time-scale: its clock runs this many times faster than wall time.
    # Think times are shortened by it and the summary's timings stretched by it, so a result
    # is in the server's (simulated) time, never mislabelled compressed wall time. None: the
    # scale the server advertises (replay/clock.py), else 1; a contradicting value is refused.
    time_scale: float | None = Field(None, gt=0)
    # The server's clock is virtual (serve-sim --clock virtual, replay/lockstep.py): the run's
    # lane count, announced with every request so the server's clock waits for each lane;
    # the times recorded are the ones the server stamps. Set from the clock handshake.
    virtual_lanes: int | None = Field(None, ge=1, le=MAX_SESSION_LANES)
    # ... and the server's time when the run started there (POST /kvbench/run), in ns
    virtual_start_ns: int | None = None
    start: Literal["beginning", "sampled"] = "beginning"
    order: Literal["trace", "shuffled"] = "trace"  # sessions in the trace's order or seeded
    start_ratio: tuple[float, float] = (0.0, 1.0)
    # a validity profile to judge the run by (replay/profile.py), and whether the server was
    # started for this run alone (None: not known)
    profile: str | None = None
    fresh_server: bool | None = None
    # whether kvbench's embedded engine serves (the sweep knows it from the row or
    # --stand-in sim); a server that advertises its clock (replay/clock.py) is one as well.
    # A simulation is never a profile's submission.
    embedded_engine: bool = False
    # Open loop: sessions arrive at this rate (per second of the server's clock) instead of
    # `concurrency` lanes each taking the next when one ends; `concurrency` then caps the live
    # sessions. None: closed loop.
    session_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    arrival: Literal["poisson", "constant"] = "poisson"
    block_tokens: int | None = Field(
        None, ge=1, description="tokens per hash block instead of the trace's (scales prompts)")
    max_input_tokens: int | None = Field(None, ge=1, description="turns above are skipped")
    token_ids: bool | None = Field(
        None, description="completions prompts as token ids (default: when a tokenizer is set)")
    ignore_eos: bool = True
    include_usage: bool = True
    continuous_usage: bool = False
    request_timeout_s: float = Field(600.0, gt=0)
    grace_s: float = Field(30.0, ge=0, description="wait for in-flight requests after duration")
    # the run stops when nothing answered for this long (replay/lanes.py: SERVER_GONE_*)
    server_gone_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    keep_text: bool = False
    # records.jsonl.gz instead of records.jsonl (every reader takes either: files.iter_jsonl)
    compress_records: bool = False
    run_marker: str | None = None  # per-run cache-bust marker; random when None
    # the server reports per-request cached tokens only when some were (SGLang's cache
    # report): a successful response without them counts 0 cached tokens, not unknown
    absent_cached_tokens_are_zero: bool = False
    api_key: str | None = None  # sent as a Bearer token; never written to a file
    # goodput: requests within every one of these (keys ttft, tpot, e2e; server-clock ms)
    slo_ms: dict[Literal["ttft", "tpot", "e2e"], float] = Field(default_factory=dict)
    extra_body: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> ReplayConfig:
        if self.trace is not None and self.synthetic is not None:
            raise ValueError("set either trace or synthetic, not both")
        if self.trace is not None and not self.trace:
            raise ValueError("trace is an empty list of paths")
        for k, v in self.slo_ms.items():
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"slo_ms.{k} {v} must be a positive number of milliseconds")
        return self

    @property
    def bounds(self) -> WorkloadBounds:
        """Which requests this run sends (shared with `kvbench simulate`)."""
        return WorkloadBounds(
            concurrency=self.concurrency, duration_s=self.duration_s,
            max_requests=self.max_requests, warmup_requests=self.warmup_requests,
            max_tokens_cap=self.max_tokens_cap, think_time_cap_s=self.think_time_cap_s,
            think_time_scale=self.think_time_scale, start=self.start,
            start_ratio=self.start_ratio, seed=self.seed, order=self.order,
            block_tokens=self.block_tokens, max_input_tokens=self.max_input_tokens,
            grace_s=self.grace_s, warmup_per_lane=self.warmup_per_lane,
            max_context_tokens=self.max_context_tokens,
            tree_markers=chat_prompts(self.profile, self.endpoint == "chat")[1])

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
