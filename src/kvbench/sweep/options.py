"""How jobs run: the workload, engine extras and per-phase timeouts, shared by every job of a
sweep and carried in each job.json so that `kvbench run-job` needs nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvbench import bounds
from kvbench.units import MAX_REPLAY_WORKERS
from kvbench.workload.choice import bundled_traces


class PhaseTimeouts(BaseModel):
    """Seconds each phase may take before the job fails with that phase named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ready_s: Annotated[float, bounds.TIMEOUT_S.validator()] = Field(
        1800.0, gt=0, description="server start until /health answers")
    replay_s: Annotated[float | None, bounds.TIMEOUT_S.validator()] = Field(
        None, gt=0,
        description="default: warm-up grace + duration + grace + 5 min, or 2 h without one")


class RunOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: list[Path] | None = None  # files or directories; None and not bundled: synthetic
    # kvbench's own Claude Code sessions, resolved where the job runs (a job spec sent to a
    # CI runner or Slurm node then needs no path that exists only on this machine)
    bundled_traces: bool = False
    endpoint: Literal["chat", "completions"] = "chat"
    # each number within its physical range (kvbench/bounds.py): a job file is read back from
    # disk or a CI matrix entry, where nothing checked it (warmup_requests 2^31 once hung)
    duration_s: Annotated[float | None, bounds.DURATION_S.validator()] = Field(
        None, gt=0, description="default: the row's duration")
    max_requests: Annotated[int | None, bounds.REQUESTS.validator()] = Field(None, ge=1)
    warmup_requests: Annotated[int, bounds.WARMUP_REQUESTS.validator()] = Field(0, ge=0)
    seed: Annotated[int, bounds.SEED.validator()] = 0
    # "shuffled": lanes take the sessions in an order drawn from seed + the repeat's number,
    # so the repeats of a point on the deterministic embedded engine sample different mixes
    # of sessions side by side (the quickstart's noise); "trace": every repeat the same
    order: Literal["trace", "shuffled"] = "trace"
    tokenizer: str | None = None
    max_tokens_cap: Annotated[int | None, bounds.OUTPUT_TOKENS.validator()] = Field(None, ge=1)
    max_input_tokens: Annotated[int | None, bounds.CONTEXT_TOKENS.validator()] = Field(None,
                                                                                     ge=1)
    think_time_scale: Annotated[float, bounds.RATE_SCALE.validator()] = Field(1.0, ge=0)
    engine_args: list[str] = Field(default_factory=list, description="appended to the argv")
    model_path: str | None = None
    # "dummy": the engine serves the model's shape with random weights (`kvbench dummy-model`
    # builds the directory, whose tokenizer then also synthesises the prompts)
    load_format: Literal["auto", "dummy"] = "auto"
    scrape_interval_s: Annotated[float, bounds.INTERVAL_S.validator()] = Field(1.0, gt=0)
    # a validity profile (replay/profile.py): its replay settings where these options keep
    # their defaults, and its verdict in each result. None: the row's default (`for_row`:
    # AgentX for a row with an InferenceX exp-name, none for kvbench's own rows); "none": no
    # profile. A job's spec carries the one it runs, resolved; part of the identity, since it
    # changes what the replay sends (warm-up, start, seed, idle caps, subagent timing).
    profile: str | None = None
    # how first-turn prefixes are busted, resolved with the profile (`for_row`): "tree" for the
    # harness's marker per session tree (a profile's `tree_marker`, chat endpoint), None for
    # kvbench's per-run marker, as every job ran before the harness's marker existed (so a job
    # file without the key keeps its identity, and a result of another marker never pools)
    cache_bust: Literal["tree"] | None = None
    # records.jsonl.gz and scrape.jsonl.gz (long runs, committed results): how the raw files
    # are stored, not what is measured
    compress_raw: bool = False
    # host pools: `launcher` (the default: the InferenceX launcher's size,
    # plan/launcher_sizing.py) or `budget` (the planner's); `force` runs a launcher size that
    # oversubscribes the row's budget
    sizing: Literal["launcher", "budget"] = "launcher"
    force: bool = False
    # image modifications (plan/image.py) the user says the image already carries: not
    # applied, recorded as skipped-by-user (part of the identity: the image may differ)
    skip_image_mods: tuple[str, ...] = ()
    # processes each job's replay shards its lanes over (at most the job's concurrency;
    # replay/workers.py): how the client runs, not what is measured
    replay_workers: int = Field(1, ge=1, le=MAX_REPLAY_WORKERS)
    # "sim": a worker's real command line is checked by its engine's own parser, then the
    # embedded engine serves in its place (launch/stand_in.py); rows the adapter builds whole
    # (sglang-disagg) only. Part of the identity: what serves is what is measured.
    stand_in: Literal["sim"] | None = None
    timeouts: PhaseTimeouts = Field(default_factory=PhaseTimeouts)

    def measurement_identity(self) -> dict:
        """The options that change what a job measures (part of its fingerprint); timeouts
        and scrape cadence do not. Traces count by content, not path, so a results directory
        resumes from another checkout or node."""
        identity = self.model_dump(mode="json", exclude={"timeouts", "scrape_interval_s",
                                                         "compress_raw", "model_path",
                                                         "replay_workers",
                                                         "trace", "bundled_traces"})
        paths = self.trace_paths()
        identity["trace"] = None if paths is None else _trace_digests(paths)
        # results measured before launcher sizing existed were budget-sized and carry no key
        if identity["sizing"] == "budget":
            del identity["sizing"]
        if not identity["force"]:
            del identity["force"]
        if identity["stand_in"] is None:
            del identity["stand_in"]
        if identity["order"] == "trace":
            del identity["order"]
        # a run without a profile keeps the identity runs had before profiles were part of it
        # (a spec's None: a job file written before profiles were resolved per row, none)
        if self.profile_name is None:
            del identity["profile"]
        else:
            identity["profile"] = self.profile_name
        if not identity["skip_image_mods"]:
            del identity["skip_image_mods"]
        if identity["cache_bust"] is None:
            del identity["cache_bust"]
        return identity

    def options_id(self) -> str:
        """Result.options_id: the digest of `measurement_identity`."""
        from kvbench.results.build import options_digest

        return options_digest(self.measurement_identity())

    def replay_workload(self, concurrency: int, row_duration_s: float | None,
                        repeat: int = 0) -> dict[str, Any]:
        """Which requests a job's replay sends, as ReplayConfig fields: the bounds (the row's
        duration where neither --duration nor --max-requests is given), and a validity
        profile's settings where the options name one. The job's replay and the forecast
        (sweep/forecast.py) both take them from here. `repeat`: the run's repeat number
        (with order "shuffled", its sessions' order)."""
        duration = self.duration_s
        if duration is None and self.max_requests is None:
            duration = row_duration_s or None
        out: dict[str, Any] = {
            "concurrency": concurrency, "duration_s": duration,
            "max_requests": self.max_requests, "warmup_requests": self.warmup_requests,
            "seed": self.seed + (repeat if self.order == "shuffled" else 0),
            "order": self.order, "max_tokens_cap": self.max_tokens_cap,
            "max_input_tokens": self.max_input_tokens, "think_time_scale": self.think_time_scale}
        if self.profile_name is not None:
            from kvbench.replay.profile import profile_named, replay_settings

            # every job starts its own server: a fresh deployment per concurrency point
            # a --seed given on the command line wins; the default 0 takes the profile's 42
            out.update(replay_settings(profile_named(self.profile_name), concurrency, {
                "duration_s": duration, "warmup_requests": self.warmup_requests or None,
                "seed": self.seed or None}))
            out.update(profile=self.profile_name, fresh_server=True)
        return out

    def for_row(self, row: dict[str, Any]) -> RunOptions:
        """These options as a job of `row` runs them: the validity profile resolved to its
        full name (the user's choice, else the row's default: replay/profile.py
        DEFAULT_PROFILE for a row with an InferenceX exp-name, plan/topology.py
        inferencex_row, as launcher sizing decides; none for kvbench's own rows), so that
        the job's file, fingerprint and result say which one ran."""
        from kvbench.plan.topology import inferencex_row
        from kvbench.replay.profile import (
            DEFAULT_PROFILE,
            NO_PROFILE,
            chat_prompts,
            profile_choice,
        )

        if self.profile is not None:
            chosen = profile_choice(self.profile)
        else:
            chosen = DEFAULT_PROFILE.name if inferencex_row(row) else NO_PROFILE
        bust = "tree" if chat_prompts(chosen, self.endpoint == "chat")[1] else None
        if (chosen, bust) == (self.profile, self.cache_bust):
            return self
        return self.model_copy(update={"profile": chosen, "cache_bust": bust})

    @property
    def profile_name(self) -> str | None:
        """The full name of the validity profile a job with these options replays under;
        None for none (and for options no row has resolved: a job file written before
        profiles were resolved per row ran without one)."""
        from kvbench.replay.profile import NO_PROFILE, profile_choice

        if self.profile is None or self.profile == NO_PROFILE:
            return None
        return profile_choice(self.profile)

    def trace_paths(self) -> list[Path] | None:
        """The traces to replay, or None for synthetic sessions."""
        if self.bundled_traces:
            return [*bundled_traces(), *(self.trace or [])]
        return self.trace

    @property
    def prompt_tokenizer(self) -> str | None:
        """The tokenizer prompts are synthesised with: a dummy model's own, unless given."""
        if self.tokenizer is None and self.load_format == "dummy":
            return self.model_path
        return self.tokenizer

    @property
    def time_scale(self) -> float | None:
        """The embedded engine's --time-scale among the engine args (None when absent: replay
        then takes the scale the server advertises)."""
        args = self.engine_args
        for i, arg in enumerate(args):
            if arg == "--time-scale" and i + 1 < len(args):
                return float(args[i + 1])
            if arg.startswith("--time-scale="):
                return float(arg.partition("=")[2])
        return None


def _trace_digests(paths: list[Path]) -> list[str]:
    import hashlib

    from kvbench.workload.loader import trace_files

    return [f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}"
            for p in trace_files(paths)]
