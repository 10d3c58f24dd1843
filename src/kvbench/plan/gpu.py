"""GPU KV capacity estimate: HBM x memory fraction - weights per rank, left for KV pools.

An estimate, not a measurement: the engine's `max_total_num_tokens` (SGLang) or
`num_gpu_blocks` (vLLM) after start-up is the truth. The planner needs it for ratio-mode
sizing and proportional hybrid splits, and prints it so a reader can sanity-check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvbench.models import KvPool, ModelProfile
from kvbench.plan.topology import Topology
from kvbench.units import GiB

# Memory fraction each engine gives weights + KV by default, and what HiCache takes back for
# staging buffers (reference/kvoffload.md 9 rule 7: lower mem-fraction-static by 0.01-0.05).
MEM_FRACTION = {"sglang": 0.85, "vllm": 0.90, "atom": 0.90, "trtllm": 0.90}
HICACHE_FRACTION_CUT = 0.03
# Activations and CUDA graphs outside the fraction of engines that count them inside it.
ACTIVATION_RESERVE_BYTES = 4 * GiB


# SGLang's Mamba pool with the radix cache on (mem_cache/kv_cache_configurator.py
# _handle_max_mamba_cache, sglang 0.5.17 lines 1816-1980 and 0.5.23): the state pool takes
# ratio/(1+ratio) of the memory left after the weights (mamba_full_memory_ratio, fallback 0.9);
# with speculative decoding it also reserves per-draft-token intermediate states for
# max_running / slots-per-request requests. Slots per running request
# (_calculate_mamba_ratio, 0.5.17 lines 1659-1688): 3, plus 2 for the extra_buffer ping-pong
# under the overlap schedule, which SGLang picks for the hybrid models it lists
# (arg_groups/overrides.py:1432-1503, Qwen3.5, Qwen3-Next, Kimi-Linear/K3; verified on the
# issue-37 argv: mamba_radix_cache_strategy=extra_buffer).
MAMBA_FULL_MEMORY_RATIO = 0.9
MAMBA_MAX_RUNNING_RATIO = 3 + 2
SGLANG_DRAFT_TOKENS = 4  # sglang.yaml's --speculative-num-draft-tokens for MTP rows


def sglang_mamba_pool(rest_bytes: int, per_req: int, *, draft_tokens: int,
                      max_running: int) -> tuple[int, int]:
    """(Mamba state slots, device bytes of the states plus the speculative intermediates)."""
    if per_req <= 0 or rest_bytes <= 0:
        return 0, 0
    budget = rest_bytes * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
    if draft_tokens:
        d = draft_tokens
        slots = int((budget - per_req * (1 + d)) // (per_req * (1 + d / MAMBA_MAX_RUNNING_RATIO)))
        slots = max(0, slots)
        capped = min(max(1, max_running), slots // MAMBA_MAX_RUNNING_RATIO)
        intermediate = per_req * (capped + 1) * d
    else:
        slots = max(0, int((budget - per_req) // per_req))
        intermediate = 0
    return slots, (slots + 1) * per_req + intermediate


# SGLang flags that cap the device pools instead of sizing them from memory
# (server_args.py, 0.5.17): the KV pool in tokens (kv_cache_configurator.py
# _apply_token_constraints, page-aligned down), the Mamba state slots (_handle_max_mamba_cache:
# an explicit size skips the memory ratio) and the running requests (the speculative
# intermediates are reserved for min(running, slots / ratio) + 1 requests).
CAP_FLAGS = {"--max-total-tokens": "max_total_tokens",
             "--max-mamba-cache-size": "max_mamba_cache_size",
             "--max-running-requests": "max_running_requests"}


def engine_caps(engine_args: Sequence[str]) -> dict[str, int]:
    """The device-pool caps among an engine's extra flags (`--flag=N` or `--flag N`)."""
    caps: dict[str, int] = {}
    args = list(engine_args)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in CAP_FLAGS:
            raw = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                caps[CAP_FLAGS[name]] = int(raw)
            except ValueError:
                continue
    return caps


@dataclass(frozen=True, slots=True)
class GpuEstimate:
    hardware: str
    hbm_bytes: int
    mem_fraction: float
    weights_per_rank_bytes: int
    pool_bytes: int
    kv_tokens: int
    state_slots: int
    device_bytes: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def estimate_gpu(
    topo: Topology,
    model: ModelProfile,
    pools: list[KvPool],
    hbm_bytes: int,
    hardware: str,
    *,
    hicache: bool,
    recipe_fraction: float | None = None,
    weights_offload_bytes: int = 0,
    caps: Mapping[str, int] | None = None,
    page_tokens: int = 1,
) -> GpuEstimate:
    """`recipe_fraction`: the fraction the recipe's launcher passes (plan/settings.py); the
    engine default, less the HiCache staging cut, where it names none.
    `weights_offload_bytes`: weights per rank the engine keeps in host memory instead (vLLM
    --cpu-offload-gb), not in HBM. `caps` (engine_caps): SGLang's explicit device-pool caps,
    which the engine applies instead of (KV: below) its memory-derived sizes."""
    caps = caps or {}
    if recipe_fraction is not None:
        fraction = recipe_fraction
    else:
        fraction = MEM_FRACTION.get(topo.engine, 0.9)
        if hicache:
            fraction = round(fraction - HICACHE_FRACTION_CUT, 2)
    weights = max(0, model.weight_bytes(topo.precision) // topo.weight_shards
                  - weights_offload_bytes)
    if topo.engine == "trtllm":  # free_gpu_memory_fraction applies after weights load
        pool = int((hbm_bytes - weights) * fraction)
    elif topo.engine == "sglang":  # mem_fraction_static covers weights + KV pools
        pool = int(hbm_bytes * fraction) - weights
    else:
        pool = int(hbm_bytes * fraction) - weights - ACTIVATION_RESERVE_BYTES
    running = caps.get("max_running_requests") or topo.max_running_requests()
    slots = running
    mamba = next((p for p in pools if p.name == "mamba"), None)
    fixed = sum(p.fixed_bytes_per_request_per_rank for p in pools) * slots
    mamba_bytes = None
    if topo.engine == "sglang" and mamba is not None:
        # SGLang sizes the Mamba pool itself from the memory left after weights
        draft = SGLANG_DRAFT_TOKENS if topo.spec_decoding == "mtp" else 0
        per_req = mamba.fixed_bytes_per_request_per_rank
        if "max_mamba_cache_size" in caps:
            slots = caps["max_mamba_cache_size"]
            capped = min(running, slots // MAMBA_MAX_RUNNING_RATIO)
            mamba_bytes = (slots + 1) * per_req + (per_req * (capped + 1) * draft if draft else 0)
        else:
            slots, mamba_bytes = sglang_mamba_pool(pool, per_req, draft_tokens=draft,
                                                   max_running=running)
        fixed = mamba_bytes + sum(p.fixed_bytes_per_request_per_rank for p in pools
                                  if p.name != "mamba") * running
    per_token = sum(p.bytes_per_token_per_rank for p in pools)
    notes = []
    tokens = max(0, (pool - fixed) // per_token) if per_token else 0
    if "max_total_tokens" in caps:
        tokens = min(tokens, caps["max_total_tokens"]) // page_tokens * page_tokens
    if pool - fixed <= 0:
        notes.append(
            f"weights {weights / 1e9:.1f} GB/rank + {slots} request states leave no KV pool in "
            f"{hbm_bytes / 1e9:.0f} GB x {fraction}: estimate only, check the engine log"
        )
    device = {p.name: p.bytes_per_token_per_rank * tokens for p in pools}
    for p in pools:
        if p.fixed_bytes_per_request_per_rank:
            n = slots if p.name == "mamba" else running
            device[p.name] = device.get(p.name, 0) + p.fixed_bytes_per_request_per_rank * n
    if mamba_bytes is not None:
        # the whole state pool as the engine weighs it when it splits --hicache-size: the pad
        # slot and the speculative intermediates too (MambaPool.get_kv_size_bytes ->
        # mem_usage_bytes over every state tensor, memory_pool.py:374-379, 1132-1133;
        # hybrid_pool_assembler.py:97-110, sglang 0.5.17)
        device["mamba"] = mamba_bytes
    return GpuEstimate(
        hardware=hardware,
        hbm_bytes=hbm_bytes,
        mem_fraction=fraction,
        weights_per_rank_bytes=weights,
        pool_bytes=max(0, pool),
        kv_tokens=int(tokens),
        state_slots=slots,
        device_bytes=device,
        notes=tuple(notes),
    )
