"""Known HiCache hazards a plan should carry (reference/kvoffload.md 7 and 9)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.plan.sizers.hicache_semantics import LAST_FA3_HICACHE_REWRITE_RELEASE

if TYPE_CHECKING:
    from kvbench.plan.sizers.base import SizingContext
    from kvbench.plan.sizers.hicache_semantics import HiCacheSemantics


def hicache_warnings(ctx: SizingContext, sem: HiCacheSemantics) -> list[str]:
    out = []
    kind = ctx.model.attention_kind
    if ctx.model.linear_layers:
        out.append(
            "hybrid linear-attention model: host hits on Mamba/GDN state are known to be "
            "unmatched or wrong (sglang#33713, #39830); check cached_tokens{host} and outputs"
        )
    if kind in ("mla", "dsa", "compressed") and not ctx.topo.dp_attention and ctx.topo.tp > 1:
        out.append(
            f"{kind.upper()} KV is replicated on all {ctx.topo.tp} TP ranks: unique host "
            "capacity is one rank's pool; DP attention would multiply it"
        )
    if ctx.has_draft and not sem.draft_packed:
        out.append(
            "speculative decoding: draft KV must be offloaded and restored with the target "
            "(sglang PR #30393); watch spec_accept_length after the cache fills"
        )
    release = ctx.version.release  # None: a nightly or unknown tag, which may still rewrite
    if ctx.gpu.hardware in ("h100", "h200") and (
            release is None or release <= LAST_FA3_HICACHE_REWRITE_RELEASE):
        out.append(
            "Hopper: kernel io with the default FA3 decode backend makes SGLang switch decode to "
            "flashinfer (or force direct io if FA3 is set explicitly); read /server_info"
        )
    if ctx.topo.dp_attention:
        out.append(
            "DP attention: each DP rank has its own radix tree and host pool; route sessions "
            "sticky (--dp-aware) or the hit rate drops by up to the DP size"
        )
    return out
