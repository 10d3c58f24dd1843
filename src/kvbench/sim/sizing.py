"""From names on the command line to a cost model and tier sizes in tokens (per rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.errors import SimError
from kvbench.hardware import HardwareProfile, load_hardware
from kvbench.sim.costs import CostModel
from kvbench.sim.engine_profile import EngineProfile, load_engine_profile

REFERENCE_MODEL = "reference-8b"
# Fraction of HBM the engine may use for weights + KV pool (SGLang's mem_fraction_static is
# of the same order); the rest is activations, CUDA graphs and the allocator's slack.
DEFAULT_MEM_FRACTION = 0.88


def infer_precision(model: str) -> str:
    """The weight precision a checkpoint name announces (`...-FP8`, `...-NVFP4`), else bf16."""
    name = model.lower()
    if "fp4" in name:
        return "fp4"
    return "fp8" if "fp8" in name else "bf16"


def resolve_costs(model: str, hardware: str | HardwareProfile, tp: int = 1,
                  precision: str | None = None, *, kv_dtype: str | None = None,
                  dp_attention: bool = False,
                  engine: str | Path | EngineProfile | None = None) -> CostModel:
    """`model` is `reference-8b` (built in) or anything `kvbench.models.load_model` knows;
    `precision` (bf16 | fp8 | fp4) defaults to what the model name says; `engine` is an
    engine profile name or YAML path (default sglang, see engine_profile.py)."""
    hw = hardware if isinstance(hardware, HardwareProfile) else load_hardware(hardware)
    engine_profile = load_engine_profile(engine)
    precision = precision or infer_precision(model)
    if model == REFERENCE_MODEL:
        if tp != 1:
            raise SimError(f"--tp: the built-in {REFERENCE_MODEL} runs at tp 1, got {tp}")
        return CostModel.reference(hw, engine=engine_profile)
    profile = _load_model(model)
    return CostModel.from_profiles(profile, hw, tp, precision=precision, kv_dtype=kv_dtype,
                                   dp_attention=dp_attention, engine=engine_profile)


def model_context_tokens(model: str) -> int | None:
    """The model's own context limit (config.json max_position_embeddings, as its profile
    states it), or None when unknown (the built-in reference model has none)."""
    if model == REFERENCE_MODEL:
        return None
    return _load_model(model).native_context_tokens


def _load_model(name: str) -> Any:
    try:
        from kvbench.models import load_model
    except ImportError as e:
        raise SimError(
            f"--model {name!r}: model profiles (kvbench.models) are not part of this build",
            hint=f"use --model {REFERENCE_MODEL}",
        ) from e
    return load_model(name)


def gpu_tier_tokens(costs: CostModel, hardware: str | HardwareProfile,
                    mem_fraction: float = DEFAULT_MEM_FRACTION) -> int:
    """KV pool tokens per rank: HBM x fraction - weights per rank, over KV bytes per token."""
    hw = hardware if isinstance(hardware, HardwareProfile) else load_hardware(hardware)
    pool = hw.hbm_bytes.value * mem_fraction - costs.weight_bytes_per_rank
    if pool <= 0:
        raise SimError(
            f"{costs.label}: weights per rank ({costs.weight_bytes_per_rank / 1e9:.1f} GB) do "
            f"not fit in {mem_fraction:.0%} of {hw.name}'s {hw.hbm_bytes.value / 1e9:.0f} GB",
            hint="raise --tp or pass --gpu-tokens",
        )
    return int(pool // costs.kv_bytes_per_token_per_rank)


def host_tier_tokens(costs: CostModel, host_cache_gb: float) -> int:
    """Host pool tokens per rank for `--host-cache-gb` (decimal GB per rank, like SGLang's
    --hicache-size)."""
    if host_cache_gb < 0:
        raise SimError(f"--host-cache-gb must be >= 0, got {host_cache_gb}")
    return int(host_cache_gb * 1e9 // costs.kv_bytes_per_token_per_rank)
