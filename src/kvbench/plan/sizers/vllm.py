"""vLLM CPU offload: `--kv-offloading-size` in GiB (2^30) for the whole engine, summed over its
TP x PP ranks (vllm/config/cache.py); each DP engine gets its own full amount. Each worker pins
cpu_bytes_to_use / world_size. `vllm-simple` names SimpleCPUOffloadConnector in
`--kv-transfer-config` with the same size in bytes, `cpu_bytes_to_use` = size x 2^30, as the
InferenceX launchers do (minimaxm3_fp4_b300_mtp.sh:45-50); the connector pins
cpu_bytes_to_use // world_size per rank (vllm 0.33
distributed/kv_transfer/kv_connector/v1/simple_cpu_offload_connector.py:100-106). Its other
settings (lazy_offload, enable_cross_layers_blocks) are the launchers' per key, in
engines/data/vllm.yaml.

How the pool is pinned decides the footprint:
- native (OffloadingConnector / CPUOffloadingSpec) through the versions measured or read here
  (v0.26) pins one torch tensor per KV cache tensor, `torch.zeros(..., pin_memory=True)`
  (v1/kv_offload/cpu/gpu_worker.py), and PyTorch's caching host allocator rounds each up to a
  power of two. Measured on an H200 with vLLM 0.26 and Qwen3-8B: `--kv-offloading-size 22.35`
  made 36 tensors of 10,171 blocks x 65,536 B = 0.667 GB, each pinned as 1 GiB, so 38.65 GB
  where the size says 24.00; host shared memory grew by 38.69 GB
  (benchmarks/results/h200/vllm/). From v0.33 the pool is one /dev/shm region registered with
  cudaHostRegister (v1/kv_offload/cpu/spec.py `_uses_shared_region`): exact. Releases between
  and unknown images get the per-tensor footprint, the larger one.
- simple (SimpleCPUOffloadConnector): `torch.zeros` unpinned, then cudaHostRegister
  (v1/simple_kv_offload/worker.py): exact; measured +23.96 GB for the same 24.00 GB size."""

from __future__ import annotations

import math

from kvbench.plan.footprint import pinned_bytes
from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Sizing, SizingContext, fit_knob
from kvbench.units import GB, GiB

CENTI_GIB = GiB / 100  # the flag is written with two decimals
FIRST_SHARED_REGION_RELEASE = (0, 33, 0)  # native pool in one exactly-registered mmap region
SIMPLE_CONNECTOR_KEY = "kv-transfer-config"  # plan.engine_config: the adapter's JSON flag


def pins_per_tensor(ctx: SizingContext, simple: bool) -> bool:
    release = ctx.version.release
    return not simple and (release is None or release < FIRST_SHARED_REGION_RELEASE)


class VllmOffloadSizer:
    engines = ("vllm",)

    def __init__(self, name: str, simple: bool) -> None:
        self.name = name
        self.simple = simple

    def size(self, ctx: SizingContext) -> Sizing:
        # One engine per DP rank under DP attention (world 1); otherwise one engine over TP x PP.
        world = 1 if ctx.topo.dp_attention else ctx.topo.tp * ctx.topo.pp

        per_tensor = pins_per_tensor(ctx, self.simple)
        layout = ctx.vllm_layout
        if layout is not None:
            # one KV tensor per layer of a group, a block = a page of each (plan/vllm_kv.py)
            tensors, block_bytes = layout.tensors, layout.block_bytes
        else:
            tensors = max(1, (ctx.model.full_layers + ctx.model.sliding_layers) // ctx.topo.pp)
            block_bytes = max(1, ctx.page_size_tokens * ctx.kv_bytes_per_token)

        def pools_of(centi: int) -> list[HostPool]:
            # vLLM parses the flag as a float and pins cpu_bytes_to_use = size * 2^30 over
            # the engine's ranks (config/vllm.py _post_init_kv_transfer_config): round up
            return pools_of_total(float(f"{centi / 100:.2f}") * (1 << 30),
                                  f"{centi / 100:.2f}")

        def pools_of_total(total: float, flag: str) -> list[HostPool]:
            per_rank = math.ceil(total / world)
            note = f"{flag} GiB engine total / {world} rank(s)"
            if per_tensor and per_rank:
                tensor_bytes = per_rank // block_bytes * (block_bytes // tensors)
                pinned = pinned_bytes(tensor_bytes, "pow2")
                note += (f"; {tensors} pinned tensors of {tensor_bytes / GB:.3f} GB, each "
                         f"rounded up to {pinned / GB:.3f} GB (torch pin_memory)")
                per_rank = tensors * pinned
            # configured_gb: the size as the flag gives it, which the pinned footprint may
            # exceed (per-tensor rounding); capacity's host axis is in these units
            return [HostPool(name="kv_offload", bytes_per_rank=per_rank,
                             inside_configured_size=True, note=note,
                             configured_gb=total / world / GB)]

        if ctx.launcher is not None:
            return self._launcher(ctx, world, pools_of_total, per_tensor, block_bytes)

        explicit = ctx.explicit_knob(CENTI_GIB, ranks=world)
        fit = fit_knob(ctx, pools_of, hi=ctx.per_rank_budget_bytes * world // int(CENTI_GIB) + 1,
                       explicit=explicit, pin_policy="exact",
                       describe=lambda c: f"--kv-offloading-size {c / 100:.2f} GiB "
                       f"({c * CENTI_GIB / world / GB:.2f} GB per rank)",
                       zero_means="vLLM turns --kv-offloading-size 0 into cpu_bytes_to_use 0, "
                       "which its CPU offloading spec rejects at start-up ('cpu_bytes_to_use "
                       "must be specified', vllm/v1/kv_offload/cpu/spec.py); run the row "
                       "GPU-resident (kv-offloading: none) instead")
        centi = fit.value if fit.value is not None else (explicit or 0)
        per_rank = fit.pools[0].bytes_per_rank
        usable = int(centi * CENTI_GIB) // world  # what holds KV; the rest is rounding
        sizing = Sizing(
            pools=fit.pools,
            host_kv_tokens=usable // block_bytes * ctx.page_size_tokens,
            engine_args=["--kv-offloading-backend", "native",
                         "--kv-offloading-size", f"{centi / 100:.2f}"],
            errors=list(fit.errors),
            arithmetic=[*fit.arithmetic,
                        f"vLLM pins {centi / 100:.2f} GiB x 2^30 / {world} rank(s) = "
                        f"{usable / GB:.2f} GB per rank (GiB, engine total: not per rank)"
                        + (f"; pinned per KV tensor with power-of-two rounding: "
                           f"{per_rank / GB:.2f} GB ({ctx.version.label})"
                           if per_tensor else "")],
            warnings=_warnings(ctx),
        )
        if self.simple:
            # vLLM's own GiB -> bytes for --kv-offloading-size (config/vllm.py
            # _post_init_kv_transfer_config), so the pool is the one sized above
            cpu_bytes = int(float(f"{centi / 100:.2f}") * (1 << 30))
            sizing.engine_args = []
            sizing.engine_config[SIMPLE_CONNECTOR_KEY] = {
                "kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"cpu_bytes_to_use": cpu_bytes}}
            sizing.arithmetic.append(
                f"SimpleCPUOffloadConnector cpu_bytes_to_use = {centi / 100:.2f} x 2^30 = "
                f"{cpu_bytes:,} B for the engine, // {world} rank(s)")
        return sizing


    def _launcher(self, ctx: SizingContext, world: int, pools_of_total, per_tensor: bool,
                  block_bytes: int) -> Sizing:
        """--sizing launcher: the launcher's bytes, passed as the GiB flag that gives vLLM
        exactly those bytes (a power-of-two divisor makes bytes / 2^30 an exact float, and
        vLLM multiplies it back by 2^30: config/vllm.py:1174)."""
        launcher = ctx.launcher
        total = launcher.engine_total_bytes(world)
        flag = exact_gib(total)
        pools = pools_of_total(float(total), flag)
        sizing = Sizing(
            pools=pools,
            host_kv_tokens=total // world // block_bytes * ctx.page_size_tokens,
            engine_args=["--kv-offloading-backend", "native", "--kv-offloading-size", flag],
            arithmetic=[f"launcher: {launcher.spelled} = {total:,} B engine total -> "
                        f"--kv-offloading-size {flag} GiB, {total // world / GB:,.2f} GB per "
                        f"rank over {world} rank(s)"
                        + (f"; pinned per KV tensor: {pools[0].bytes_per_rank / GB:.2f} GB"
                           if per_tensor else "")],
            warnings=_warnings(ctx),
        )
        if self.simple:
            # the connector named as the launchers name it, with the launcher's own bytes
            # (the engine total, or per rank where the launcher gives it per rank)
            key, value = (("cpu_bytes_to_use_per_rank", total // world)
                          if launcher.spec.per == "rank" else ("cpu_bytes_to_use", total))
            sizing.engine_args = []
            sizing.engine_config[SIMPLE_CONNECTOR_KEY] = {
                "kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {key: value}}
        return sizing


def exact_gib(total_bytes: int) -> str:
    """A GiB value whose float x 2^30 is `total_bytes` exactly (repr round-trips)."""
    whole, rest = divmod(total_bytes, 1 << 30)
    return str(whole) if not rest else repr(total_bytes / (1 << 30))


def _warnings(ctx: SizingContext) -> list[str]:
    out = []
    if ctx.model.attention_kind != "gqa" and not ctx.topo.dp_attention and ctx.topo.tp > 1:
        out.append(
            "MLA-style KV is replicated per TP rank: unique offloaded tokens = per-rank bytes / "
            "bytes per token, 1/TP of what the engine total suggests"
        )
    layout = ctx.vllm_layout
    if layout is not None and layout.state_layers:
        # v1 offloading/scheduler.py (0.26) stores every group's non-null blocks under keys of
        # their own: a GDN group's state blocks (the last 2 + spec tokens a request keeps in
        # "align" mode) take CPU blocks from the same pool as the attention chunks
        out.append(
            f"hybrid KV groups: a CPU block holds one {layout.block_tokens:,}-token attention "
            f"chunk of {layout.group_size} layers or {layout.group_size} GDN states; the states "
            "stored beside the chunks share the pool, so host-kv-tokens is the attention-only "
            "upper bound (vllm#56871, #52735 with MTP: not loaded back on some builds)")
    elif ctx.model.linear_layers or ctx.model.sliding_layers or ctx.model.compressed:
        out.append(
            "hybrid KV groups: CPU offload capacity may be divided across KV cache groups and not "
            "loaded back on some builds (vllm#56871, #52735 with MTP)"
        )
    return out
