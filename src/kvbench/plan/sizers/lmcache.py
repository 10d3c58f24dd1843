"""LMCache local CPU tier: `max_local_cpu_size` per worker (rank). The docs call it GB; the
allocator multiplies by 1024**3, so the planner treats the number as GiB (the larger reading).

From LMCache 0.5 on vLLM the InferenceX launchers run LMCache as multiprocess servers, one per
rank (`lmcache server --l1-size-gb N`, N x 2^30 bytes of L1 each, lmcache/v1/distributed/
config.py), reached through vLLM's LMCacheMPConnector (minimaxm3_fp8_mi300x_mtp.sh). The plan
then names the servers' size under `lmcache-mp`; the engine adapter starts them."""

from __future__ import annotations

import json

from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Sizing, SizingContext, fit_knob
from kvbench.units import GB, GiB

TENTH_GIB = GiB / 10
CHUNK_TOKENS = 256
MP_KEY = "lmcache-mp"  # the plan's server settings (engines/lmcache.py starts the servers)
MP_FIRST_VERSION = (0, 5)
L1_INIT_GIB = 10  # the launchers' --l1-init-size-gb


def runs_as_servers(ctx: SizingContext) -> bool:
    """LMCache 0.5+ under vLLM runs as MP servers (the seed launchers); older in-process."""
    if ctx.topo.engine != "vllm" or not ctx.topo.backend_version:
        return False
    try:
        version = tuple(int(p) for p in ctx.topo.backend_version.split(".")[:2])
    except ValueError:
        return False
    return version >= MP_FIRST_VERSION


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
                       f"({t * TENTH_GIB / GB:.2f} GB) per rank",
                       forced=(round(ctx.launcher.value * 10) if ctx.launcher is not None
                               else None))
        tenths = fit.value if fit.value is not None else (explicit or 0)
        size = f"{tenths / 10:.1f}"
        if runs_as_servers(ctx):
            return self._servers(ctx, fit, size)
        env = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": size,
               "LMCACHE_CHUNK_SIZE": str(CHUNK_TOKENS)}
        args: list[str] = []
        if ctx.topo.engine == "vllm":
            args = ["--kv-transfer-config",
                    json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]
        elif ctx.topo.engine == "sglang":
            args = ["--enable-lmcache"]
        elif ctx.topo.engine == "atom":
            # ATOM's in-process LMCache connector (glm5.2_fp4_mi355x_atom_mtp.sh,
            # kimik3_fp4_mi355x_atom_mtp.sh at InferenceX 843c6254f)
            args = ["--kv-transfer-config",
                    json.dumps({"kv_connector": "lmcache_offload", "kv_role": "offload"},
                               separators=(",", ":"))]
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

    def _servers(self, ctx: SizingContext, fit, size: str) -> Sizing:
        per_rank = fit.pools[0].bytes_per_rank
        pools = [p.model_copy(update={"name": "lmcache_l1",
                                      "note": f"lmcache server --l1-size-gb {size} (x 2^30)"})
                 for p in fit.pools]
        init = min(float(size), L1_INIT_GIB)
        return Sizing(
            pools=pools,
            host_kv_tokens=per_rank // max(1, ctx.kv_bytes_per_token),
            engine_config={MP_KEY: {"servers": ctx.ranks_on_node, "l1_size_gb": size,
                                    "l1_init_size_gb": f"{init:g}",
                                    "chunk_size": CHUNK_TOKENS}},
            errors=list(fit.errors),
            arithmetic=[*fit.arithmetic, f"{ctx.ranks_on_node} LMCache server(s), one per rank, "
                        f"{per_rank / GB:.2f} GB of L1 each"],
        )
