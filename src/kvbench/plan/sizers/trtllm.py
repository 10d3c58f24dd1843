"""TensorRT-LLM host block tier: `kv_cache_config.host_cache_size` in bytes per rank."""

from __future__ import annotations

from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Fit, Sizing, SizingContext, fit_knob
from kvbench.units import MB


class TrtllmHostCacheSizer:
    name = "native"
    engines = ("trtllm",)

    def size(self, ctx: SizingContext) -> Sizing:
        def pools_of_bytes(size: int) -> list[HostPool]:
            return [HostPool(name="host_cache", bytes_per_rank=size,
                             inside_configured_size=True, note="host_cache_size (bytes per rank)")]

        if ctx.launcher is not None:  # --sizing launcher: the launcher's bytes, as is
            size = ctx.launcher.bytes_per_rank(1)
            fit = Fit(size, pools_of_bytes(size), [],
                      [f"launcher: host_cache_size {size:,} B per rank"])
        else:
            explicit = ctx.explicit_knob(MB)
            fit = fit_knob(ctx, lambda mb: pools_of_bytes(mb * MB),
                           hi=ctx.per_rank_budget_bytes // MB, explicit=explicit,
                           pin_policy="exact",
                           describe=lambda mb: f"host_cache_size {mb * MB:,} B per rank")
        size = fit.pools[0].bytes_per_rank
        return Sizing(
            pools=fit.pools,
            host_kv_tokens=size // max(1, ctx.kv_bytes_per_token),
            engine_config={"kv_cache_config": {
                "host_cache_size": size,
                "enable_block_reuse": True,
                "tokens_per_block": ctx.page_size_tokens,
            }},
            errors=list(fit.errors),
            arithmetic=list(fit.arithmetic),
        )
