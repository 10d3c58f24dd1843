"""Engine profiles: what an inference engine adds to the hardware's time, as sourced data.

The cost model's hardware terms (FLOPs, bytes, link) are the same whichever engine runs the
model; what differs is the engine's fixed host work per step, how its attention kernel is
costed, and whether its kernels reach what plain torch reaches. One small YAML per engine
kind ships in `engines/`; `kvbench simulate --engine-profile NAME|PATH` picks one."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvbench import yamldoc
from kvbench.errors import SimError, validation_message
from kvbench.hardware.profile import Sourced

ENGINE_DIR = Path(__file__).parent / "engines"
DEFAULT_ENGINE = "sglang"


def _defaulted(value: float, source: str, description: str):
    """A profile number that may be left out: its default, the default's source, its meaning."""
    return Field(default=Sourced(value=value, source=source), description=description)


class EngineProfile(BaseModel):
    """Per-step overheads in seconds; each number says where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    step_overhead_s: Sourced = Field(description="fixed host cost of every forward pass")
    prefill_overhead_s: Sourced = Field(description="extra fixed cost of a step that prefills")
    per_sequence_overhead_s: Sourced = Field(
        description="host cost per sequence in the step (bookkeeping, sampling, streaming)")
    attention: Literal["per_request", "packed_dense"] = Field(
        description="attention costing mode (costs.ATTENTION_MODES)")
    attention_source: str
    attention_efficiency: Sourced = _defaulted(
        1.0, "default: attention runs at the dense layers' rate",
        "fraction of the effective FLOP/s the attention kernel reaches (a masked "
        "SDPA kernel is slower than the flash kernel calibrate timed)")
    use_layer_efficiency: bool = Field(
        description="scale FLOP/s and HBM rates by the hardware profile's measured "
        "layer_efficiency (prefill, decode): true for engines that run plain torch layers")
    layer_efficiency_source: str
    kv_manager: Literal["radix", "vllm_blocks"] = Field(
        "radix", description="radix: SGLang's radix tree (cache.py); vllm_blocks: vLLM's block "
        "pool, free-block queue and scheduler with preemption (blocks.py, vllm.py)")
    block_tokens: Sourced = _defaulted(
        16, "vLLM's default block_size on CUDA",
        "tokens per KV block of the vllm_blocks manager (a plan's page size replaces it)")
    admit_full_prompt: Sourced = _defaulted(
        0, "default: a waiting request needs its first chunk's blocks only",
        "1: the vllm_blocks scheduler admits a waiting request only when the free "
        "blocks hold its whole prompt (vLLM's scheduler_reserve_full_isl)")
    load_ready_steps: Sourced = _defaulted(
        -1, "default: a host hit is loaded within the step that computes the request's "
        "first chunk, overlapping its compute",
        ">= 0: the vllm_blocks scheduler loads a host hit asynchronously; the "
        "request is scheduled for the rest of its prompt only once this many steps have "
        "started after the load ended (vLLM's WAITING_FOR_REMOTE_KVS)")
    load_stall_s: Sourced = _defaulted(
        0.0, "default: admitting a host hit and resuming it after its load cost nothing extra",
        "host seconds the engine spends resuming a request after its asynchronous host load "
        "(load_ready_steps >= 0), done while the step before runs: what outlasts that step "
        "stalls the step that resumes it, every request in it")
    load_back_min_tokens: Sourced = _defaulted(
        0, "default: every host hit is loaded back",
        "the radix KV manager recomputes a host hit of fewer tokens than this instead of "
        "loading it back (SGLang HiCache's load_back_threshold)")
    prompt_token_overhead_s: Sourced = _defaulted(
        0.0, "default: no host cost per prompt token",
        "host time per prompt token before the scheduler sees the request "
        "(API-server tokenization on one thread, sim/tokenizer.py), whether or not the "
        "tokens are cached")
    load_bandwidth_efficiency: Sourced = _defaulted(
        1.0, "default: host loads run at the hardware profile's host-to-device rate",
        "fraction of the hardware profile's host-to-device rate that the "
        "engine's host-hit loads reach (their copy size)")
    decode_kv_read_efficiency: Sourced = _defaulted(
        1.0, "default: decode attention reads the KV at the HBM rate the weights stream at",
        "fraction of the HBM rate at which the engine's decode attention kernel reads each "
        "sequence's KV (TPOT growth with context)")
    decode_kv_parallel_batch: Sourced = _defaulted(
        1.0, "default: the decode attention kernel reads at the same rate at any batch size",
        "batch size up to which the decode attention kernel's KV read rate grows with the "
        "batch (a kernel whose grid is too small to fill the GPU for one sequence reads "
        "batch x decode_kv_read_efficiency of the HBM rate, up to this many sequences)")

    @field_validator("decode_kv_parallel_batch")
    @classmethod
    def _at_least_one(cls, v: Sourced) -> Sourced:
        if not (math.isfinite(v.value) and v.value >= 1):
            raise ValueError(f"value must be a finite number >= 1, got {v.value}")
        return v

    @field_validator("attention_efficiency", "load_bandwidth_efficiency",
                     "decode_kv_read_efficiency")
    @classmethod
    def _positive(cls, v: Sourced, info) -> Sourced:
        if not 0 < v.value <= 1:
            raise ValueError(f"{info.field_name} must be in (0, 1], got {v.value}")
        return v

    @field_validator("step_overhead_s")
    @classmethod
    def _step(cls, v: Sourced) -> Sourced:
        # a free step would let virtual time stand still while the scheduler spins
        if not (math.isfinite(v.value) and v.value > 0):
            raise ValueError(f"value must be a finite number > 0, got {v.value}")
        return v

    @field_validator("prefill_overhead_s", "per_sequence_overhead_s", "prompt_token_overhead_s",
                     "load_stall_s")
    @classmethod
    def _non_negative(cls, v: Sourced) -> Sourced:
        # zero is real data (sglang.yaml: no extra prefill or per-sequence cost)
        if not (math.isfinite(v.value) and v.value >= 0):
            raise ValueError(f"value must be a finite number >= 0, got {v.value}")
        return v

    @field_validator("block_tokens", "admit_full_prompt", "load_ready_steps",
                     "load_back_min_tokens")
    @classmethod
    def _integral(cls, v: Sourced, info) -> Sourced:
        low, high = {"block_tokens": (1, 1 << 20), "admit_full_prompt": (0, 1),
                     "load_ready_steps": (-1, 10_000),
                     "load_back_min_tokens": (0, 1 << 20)}[info.field_name]
        if not (math.isfinite(v.value) and v.value == int(v.value) and low <= v.value <= high):
            raise ValueError(f"value must be an integer within {low}..{high}, got {v.value}")
        return v


def engine_profile_names() -> list[str]:
    return sorted(p.stem for p in ENGINE_DIR.glob("*.yaml"))


@cache
def _load_file(path: Path) -> EngineProfile:
    raw = yamldoc.load_file(path, "engine profile", SimError)
    try:
        return EngineProfile.model_validate(raw)
    except ValidationError as e:
        raise SimError(validation_message(e, f"{path}: invalid engine profile")) from None


def load_engine_profile(name_or_path: str | Path | EngineProfile | None) -> EngineProfile:
    """A shipped profile by name (`sglang`, `vllm`, `transformers`), a YAML path, or the
    default (sglang) for None."""
    if isinstance(name_or_path, EngineProfile):
        return name_or_path
    if name_or_path is None:
        name_or_path = DEFAULT_ENGINE
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise SimError(f"--engine-profile: file {str(path)!r} does not exist")
        return _load_file(path.resolve())
    name = str(name_or_path).lower()
    if name not in engine_profile_names():
        raise SimError(
            f"--engine-profile: unknown engine profile {str(name_or_path)!r}; known: "
            f"{', '.join(engine_profile_names())}",
            hint=f"or pass a YAML file in the format of {ENGINE_DIR}/{DEFAULT_ENGINE}.yaml",
        )
    return _load_file(ENGINE_DIR / f"{name}.yaml")


def engine_profile_for(framework: str) -> str | None:
    """The engine profile a recipe framework runs on (`dynamo-vllm` -> vllm), else None
    (the default)."""
    known = engine_profile_names()
    return next((p for p in framework.lower().split("-") if p in known), None)
