"""LMCache local CPU tier: `max_local_cpu_size` per worker (rank). The docs call it GB; the
allocator multiplies by 1024**3, so the planner treats the number as GiB (the larger reading)."""

from __future__ import annotations

import json

from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Sizing, SizingContext, fit_knob
from kvbench.units import GB, GiB

TENTH_GIB = GiB / 10
CHUNK_TOKENS = 256


class LmCacheSizer:
    name = "lmcache"
    engines = ("vllm", "atom", "sglang")

    def size(self, ctx: SizingContext) -> Sizing:
        def pools_of(tenths: int) -> list[HostPool]:
            return [HostPool(name="lmcache_cpu", bytes_per_rank=int(tenths * TENTH_GIB),
                             inside_configured_size=True,
                             note=f"max_local_cpu_size {tenths / 10:.1f} per worker (x 1024^3)")]

        explicit = ctx.explicit_knob(TENTH_GIB)
        fit = fit_knob(ctx, pools_of, hi=int(ctx.per_rank_budget_bytes // TENTH_GIB) + 1,
                       explicit=explicit, pin_policy="exact",
                       describe=lambda t: f"LMCACHE_MAX_LOCAL_CPU_SIZE {t / 10:.1f} "
                       f"({t * TENTH_GIB / GB:.2f} GB) per rank")
        tenths = fit.value if fit.value is not None else (explicit or 0)
        size = f"{tenths / 10:.1f}"
        env = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": size,
               "LMCACHE_CHUNK_SIZE": str(CHUNK_TOKENS)}
        args: list[str] = []
        if ctx.topo.engine == "vllm":
            args = ["--kv-transfer-config",
                    json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]
        elif ctx.topo.engine == "sglang":
            args = ["--enable-lmcache"]
        per_rank = fit.pools[0].bytes_per_rank
        return Sizing(
            pools=fit.pools,
            host_kv_tokens=per_rank // max(1, ctx.kv_bytes_per_token),
            engine_args=args,
            engine_env=env,
            errors=list(fit.errors),
            arithmetic=[*fit.arithmetic, f"one LMCache engine per rank: {per_rank / GB:.2f} GB "
                        f"x {ctx.ranks_on_node} ranks"],
            warnings=["LMCache pins its buffer itself; builds that allocate through torch "
                      "pin_memory may round it up to a power of two (reference/kvoffload.md 1.5)"],
        )
