"""GPU KV capacity estimate: HBM x memory fraction - weights per rank, left for KV pools.

An estimate, not a measurement: the engine's `max_total_num_tokens` (SGLang) or
`num_gpu_blocks` (vLLM) after start-up is the truth. The planner needs it for ratio-mode
sizing and proportional hybrid splits, and prints it so a reader can sanity-check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvbench.models import KvPool, ModelProfile
from kvbench.plan.topology import Topology
from kvbench.units import GB, GiB, MiB

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

# SGLang sizes its pools from the memory free after its CUDA context and process-group init
# (pre_model_load_memory, srt/distributed/bootstrap.py:108): rest = free after the weights of
# target and draft - pre x (1 - mem_fraction_static) (mem_cache/kv_cache_configurator.py
# 1614-1657, 0.5.17), i.e. pre x fraction - the weights loaded. Measured on the H200 (torch
# 2.11, CUDA 13): 139.80 GiB total, 139.13 GiB free at "Load weight begin" in every SGLang
# 0.5.17 log of issues 25 and 37 (benchmarks/results/h200/{sglang,qwen3.5}).
SGLANG_PRE_LOAD_RESERVE_BYTES = int(0.67 * GiB)
# SGLang resets an unset --max-running-requests to 48 with speculative decoding
# (arg_groups/speculative_hook.py:540-545, 0.5.17); the Qwen3.5 H100/H200 launchers pass none.
SGLANG_SPEC_RUNNING_DEFAULT = 48
# Up to this release SGLang counts a draft's KV layers in its per-token cell size only for a
# draft with its own --speculative-draft-model-path (model_runner_components/
# spec_aux_hidden_state.py:58-76 in 0.5.16 and 0.5.17, pool_configurator.py:147-163): a
# path-less MTP head, what every MTP launcher runs, gets a pool of the target's token count
# after the target's, out of the (1 - fraction) headroom (the issue-37 probe on the H200:
# "Memory pool end. avail mem=27.83 GB" = 139.13 x 0.2 after the target pool, 1.92 after the
# draft's). 0.5.23 counts it (spec_aux_hidden_state.py:146-176); assumed from 0.5.18, the
# release that packs the draft layers into the KV pool (sizers/hicache_semantics.py).
LAST_DRAFT_OUTSIDE_BUDGET_RELEASE = (0, 5, 17)
# ... except that SGLang gives these architectures' MTP the model's own path as the draft path
# when none is passed (arg_groups/speculative_hook.py:560-580, 0.5.17: DeepseekV3/V32/V4,
# Glm4Moe, Glm4MoeLite, GlmMoeDsa, ...), so their draft is a path-given one and its layer counts
# in the cell size. Measured (issue 37, DeepSeek-V3 scaled to 4 layers, MTP, one H200): target
# and draft pools of 15,461,376 tokens each, 66.35 + 16.59 GB, both inside the fraction.
SGLANG_DRAFT_PATH_FILLED = frozenset({"deepseek_v3", "deepseek_v32", "deepseek_v4", "glm4_moe",
                                      "glm4_moe_lite", "glm_moe_dsa"})
# Multimodal features cross processes over CUDA IPC by default on one node from 0.5.17
# (server_args.py:7604-7616; 0.5.16 defaults to CPU transport, 0.5.23 has a CUDA VMM
# transport instead, not modelled): each tokenizer process reserves its share of
# SGLANG_MM_FEATURE_CACHE_MB (1024 MiB, environ.py:969) on GPU 0 when its processor starts
# (multimodal/processors/base_processor.py:341-364, utils/cuda_ipc_transport_utils.py:152), with
# its own CUDA context: 690 MiB each for 6 workers on the H200 (518 MiB context + 172 MiB pool,
# the probe's OOM message). Allocated after the pools, out of the same headroom.
CUDA_IPC_RELEASES = ((0, 5, 17), (0, 5, 23))  # [first, before)
CUDA_IPC_POOL_BYTES = 1024 * MiB
CUDA_CONTEXT_BYTES = 518 * MiB
# An MTP draft loads its own embedding and LM head and takes the target's only after the pools
# are sized (models/qwen3_5_mtp.py:89-117 allocates them; speculative/eagle_worker_v2.py:
# 192-201 calls set_embed_and_head in init_lm_head after alloc_memory_pool;
# managers/scheduler.py:974-981 sizes the pools after both workers loaded; 0.5.23 the same):
# the scaled Qwen3.5's draft logged 7.08 GB, its MTP layer plus 2 x 248,320 x 4,096 x 2 B.
# Embedding, head and a vision tower stay bf16 in fp8 and fp4 checkpoints.
EMBED_HEAD_BYTES_PER_PARAM = 2


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
# Flags among --engine-arg that change what the planner sizes with besides the caps: the page
# size (an override of the recipe's, or of the engine default where the launcher passes none;
# issue 37's resident arm ran `--engine-arg=--page-size=16` and its plan said 1, the
# flashinfer default the launcher leaves to SGLang).
ENGINE_ARG_FLAGS = {**CAP_FLAGS, "--page-size": "page_size"}
# vLLM's: the GPU KV pool in bytes (skips the memory profiling: v1/worker/gpu_worker.py:479 in
# 0.26, "reserved ... as specified by kv_cache_memory_bytes"), the context its capacity line is
# counted in, and the block size (plan/vllm_kv.py raises it for a hybrid model)
VLLM_ARG_FLAGS = {"--kv-cache-memory-bytes": "kv_cache_memory_bytes",
                  "--max-model-len": "max_model_len", "--block-size": "page_size"}
# and its prefix-caching switch, 1 or 0 (the adapter passes --enable-prefix-caching; a later
# --no-enable-prefix-caching among the engine args turns it off)
VLLM_SWITCHES = {"--enable-prefix-caching": ("prefix_caching", 1),
                 "--no-enable-prefix-caching": ("prefix_caching", 0)}


def engine_caps(engine_args: Sequence[str], engine: str = "sglang") -> dict[str, int]:
    """The device-pool caps and the page size among an engine's extra flags (`--flag=N` or
    `--flag N`) of the row's engine, SGLang's (the default) or vLLM's; the last spelling of a
    flag wins, as in the engine's argument parser."""
    caps: dict[str, int] = {}
    args = list(engine_args)
    flags = VLLM_ARG_FLAGS if engine == "vllm" else ENGINE_ARG_FLAGS
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if engine == "vllm" and arg in VLLM_SWITCHES:
            key, on = VLLM_SWITCHES[arg]
            caps[key] = on
        elif name in flags:
            raw = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                caps[flags[name]] = int(raw)
            except ValueError:
                continue
    return caps


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What the image and the launcher decide beyond the row (planner.py reads them):
    `release` the image's engine release (plan/version.py), `running_unset` the launcher
    leaves --max-running-requests to the engine, `tokenizer_workers` the --tokenizer-worker-num
    it passes (None: the engine's 1), `device_memory_bytes` what CUDA reports as the GPU's
    memory (the hardware profile's; None: its datasheet HBM), `cuda` an NVIDIA GPU."""

    release: tuple[int, int, int] | None = None
    running_unset: bool = False
    tokenizer_workers: int | None = None
    device_memory_bytes: int | None = None
    cuda: bool = True


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
    # SGLang: the memory free before the weights, the weights loaded when the pools are sized
    # (the MTP draft's own embedding and head included), the running requests sized for, and
    # what comes out of the (1 - fraction) headroom after the pools (a path-less MTP draft's
    # KV up to 0.5.17, the tokenizers' CUDA-IPC reserve) against that headroom
    pre_load_bytes: int = 0
    loaded_weights_bytes: int = 0
    running_requests: int = 0
    headroom_bytes: int = 0
    outside_budget_bytes: dict[str, int] = field(default_factory=dict)


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
    facts: EngineFacts | None = None,
) -> GpuEstimate:
    """`recipe_fraction`: the fraction the recipe's launcher passes (plan/settings.py); the
    engine default, less the HiCache staging cut, where it names none.
    `weights_offload_bytes`: weights per rank the engine keeps in host memory instead (vLLM
    --cpu-offload-gb), not in HBM. `caps` (engine_caps): SGLang's explicit device-pool caps,
    which the engine applies instead of (KV: below) its memory-derived sizes. `facts`: the
    image's release and the launcher's choices the engine resolves (EngineFacts)."""
    caps = caps or {}
    facts = facts or EngineFacts()
    if recipe_fraction is not None:
        fraction = recipe_fraction
    else:
        fraction = MEM_FRACTION.get(topo.engine, 0.9)
        if hicache:
            fraction = round(fraction - HICACHE_FRACTION_CUT, 2)
    # a vision tower loads too, in bf16 (EMBED_HEAD_BYTES_PER_PARAM) whatever the checkpoint
    weights = max(0, (model.weight_bytes(topo.precision)
                      + model.vision_params * EMBED_HEAD_BYTES_PER_PARAM) // topo.weight_shards
                  - weights_offload_bytes)
    loaded, pre, headroom = weights, 0, 0
    if topo.engine == "trtllm":  # free_gpu_memory_fraction applies after weights load
        pool = int((hbm_bytes - weights) * fraction)
    elif topo.engine == "sglang":  # mem_fraction_static covers weights + KV pools
        pre = (facts.device_memory_bytes or hbm_bytes) - SGLANG_PRE_LOAD_RESERVE_BYTES
        if topo.spec_decoding == "mtp" and model.mtp_layers:
            loaded += 2 * model.vocab_size * model.hidden_size * EMBED_HEAD_BYTES_PER_PARAM \
                // max(1, topo.tp)
        pool = int(pre * fraction) - loaded
        headroom = pre - int(pre * fraction)
    else:
        pool = int(hbm_bytes * fraction) - weights - ACTIVATION_RESERVE_BYTES
    spec = topo.spec_decoding not in ("none", "", None)
    running = caps.get("max_running_requests") or (
        SGLANG_SPEC_RUNNING_DEFAULT if topo.engine == "sglang" and facts.running_unset and spec
        else topo.max_running_requests())
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
    # (DeepSeek-V4's own configurator gives the draft its share itself: sizers/hicache.py)
    draft_outside = (topo.engine == "sglang" and facts.release is not None
                     and facts.release <= LAST_DRAFT_OUTSIDE_BUDGET_RELEASE
                     and model.compressed is None
                     and model.model_type not in SGLANG_DRAFT_PATH_FILLED)
    per_token = sum(p.bytes_per_token_per_rank for p in pools
                    if not (draft_outside and p.name == "draft_kv"))
    notes = []
    tokens = max(0, (pool - fixed) // per_token) if per_token else 0
    if "max_total_tokens" in caps:
        tokens = min(tokens, caps["max_total_tokens"])
    if "max_total_tokens" in caps or topo.engine == "sglang":
        tokens = tokens // page_tokens * page_tokens  # pool_configurator.py:317-325
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
    outside = _outside_budget(topo, model, pools, tokens, page_tokens, facts, draft_outside)
    if outside and sum(outside.values()) > headroom:
        notes.append(_headroom_note(outside, headroom, fraction, facts.release))
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
        pre_load_bytes=pre,
        loaded_weights_bytes=loaded,
        running_requests=running,
        headroom_bytes=headroom,
        outside_budget_bytes=outside,
    )


def _outside_budget(topo: Topology, model: ModelProfile, pools: list[KvPool], tokens: int,
                    page: int, facts: EngineFacts, draft_outside: bool) -> dict[str, int]:
    """Device bytes SGLang allocates after its pools, out of the (1 - fraction) headroom."""
    out: dict[str, int] = {}
    if topo.engine != "sglang":
        return out
    draft = next((p for p in pools if p.name == "draft_kv"), None)
    if draft_outside and draft is not None and tokens:
        # the padded page too: (size + page) rows (mem_cache/memory_pool.py:2037)
        out["draft_kv"] = (tokens + page) * draft.bytes_per_token_per_rank
    first, before = CUDA_IPC_RELEASES
    if model.vision_params and facts.cuda and facts.release is not None \
            and first <= facts.release < before and not topo.is_multinode:
        workers = facts.tokenizer_workers or 1
        out["tokenizer_ipc"] = workers * CUDA_CONTEXT_BYTES + CUDA_IPC_POOL_BYTES
    return out


def _headroom_note(outside: dict[str, int], headroom: int, fraction: float,
                   release: tuple[int, int, int] | None) -> str:
    what = {"draft_kv": "the path-less MTP draft's KV pool",
            "tokenizer_ipc": "the tokenizer workers' CUDA contexts and multimodal IPC pools"}
    parts = " + ".join(f"{what[k]} {v / GB:,.2f} GB" for k, v in outside.items())
    version = "v" + ".".join(map(str, release)) if release else "this SGLang"
    return (f"SGLang {version} allocates {parts} after its pools, out of the "
            f"{headroom / GB:,.2f} GB that --mem-fraction-static {fraction} leaves: "
            f"{sum(outside.values()) / GB:,.2f} GB do not fit and the start fails with CUDA "
            "out of memory; cap --max-total-tokens, lower the fraction or --tokenizer-worker-num, "
            "or pass --mm-feature-transport cpu")
