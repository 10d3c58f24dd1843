"""vLLM CPU offload: `--kv-offloading-size` in GiB (2^30) for the whole engine, summed over its
TP x PP ranks (vllm/config/cache.py); each DP engine gets its own full amount. Each worker pins
cpu_bytes_to_use / world_size. `vllm-simple` selects SimpleCPUOffloadConnector with the same size
through VLLM_USE_SIMPLE_KV_OFFLOAD=1 (reference/kvoffload.md 4.1)."""

from __future__ import annotations

import math

from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Sizing, SizingContext, fit_knob
from kvbench.units import GB, GiB

CENTI_GIB = GiB / 100  # the flag is written with two decimals


class VllmOffloadSizer:
    engines = ("vllm",)

    def __init__(self, name: str, simple: bool) -> None:
        self.name = name
        self.simple = simple

    def size(self, ctx: SizingContext) -> Sizing:
        # One engine per DP rank under DP attention (world 1); otherwise one engine over TP x PP.
        world = 1 if ctx.topo.dp_attention else ctx.topo.tp * ctx.topo.pp

        def pools_of(centi: int) -> list[HostPool]:
            # vLLM parses the flag as a float and pins cpu_bytes_to_use = size * 2^30 over
            # the engine's ranks (config/vllm.py _post_init_kv_transfer_config): round up
            per_rank = math.ceil(float(f"{centi / 100:.2f}") * (1 << 30) / world)
            return [HostPool(name="kv_offload", bytes_per_rank=per_rank,
                             inside_configured_size=True,
                             note=f"{centi / 100:.2f} GiB engine total / {world} rank(s)")]

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
        sizing = Sizing(
            pools=fit.pools,
            host_kv_tokens=per_rank // max(1, ctx.kv_bytes_per_token),
            engine_args=["--kv-offloading-backend", "native",
                         "--kv-offloading-size", f"{centi / 100:.2f}"],
            errors=list(fit.errors),
            arithmetic=[*fit.arithmetic,
                        f"vLLM pins {centi / 100:.2f} GiB x 2^30 / {world} rank(s) = "
                        f"{per_rank / GB:.2f} GB per rank (GiB, engine total: not per rank)"],
            warnings=_warnings(ctx),
        )
        if self.simple:
            sizing.engine_env["VLLM_USE_SIMPLE_KV_OFFLOAD"] = "1"
            sizing.warnings.append(
                "some vLLM builds configure SimpleCPUOffloadConnector through "
                "kv_connector_extra_config.cpu_bytes_to_use_per_rank instead; the size here is "
                "the engine total"
            )
        return sizing


def _warnings(ctx: SizingContext) -> list[str]:
    out = []
    if ctx.model.attention_kind != "gqa" and not ctx.topo.dp_attention and ctx.topo.tp > 1:
        out.append(
            "MLA-style KV is replicated per TP rank: unique offloaded tokens = per-rank bytes / "
            "bytes per token, 1/TP of what the engine total suggests"
        )
    if ctx.model.linear_layers or ctx.model.sliding_layers or ctx.model.compressed:
        out.append(
            "hybrid KV groups: CPU offload capacity may be divided across KV cache groups and not "
            "loaded back on some builds (vllm#56871, #52735 with MTP)"
        )
    return out
