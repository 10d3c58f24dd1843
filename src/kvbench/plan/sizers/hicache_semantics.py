"""Which SGLang HiCache host-pool semantics an image runs (reference/kvoffload.md 0, 1.6).

`per-pool`: `--hicache-size` is applied in full to every hybrid host pool (KV and Mamba, or full
and SWA), so N GB becomes 2N per rank; DSA indexer and speculative draft pools are sidecars sized
to the KV pool's token count outside the size, the indexer over every layer. The InferenceX
v0.5.16 launchers were written against this (Qwen3.5: KV + Mamba + 1/15 NEXTN; GLM-5.2: 270 +
61.88 indexer + 3.46 draft per rank).
`split`: the size is split across hybrid pools in proportion to their device bytes (PRs #32373,
#29034 fix). The DSA indexer host pool still sits outside the size and covers every layer of
the KV pool (`pool_host/dsa.py` allocates `layer_num` indexer buffers, not only the layers that
own an indexer: GLM-5.2 78, not 21). The NextN/MTP draft pool stays a sidecar outside the size
until v0.5.18, which packs the draft layers as tail layers of the KV pool, inside the size
(`hybrid_pool_assembler.with_packed_draft_layer_mapping`). Nightly tags count as sidecar (the
larger footprint) because the packing commit's nightly date is not known here.

The boundary between the two is an assumption (the fixes landed in mid/late 2026): releases up to
v0.5.16 and nightlies before 2026-08-01 are `per-pool`, later ones `split`. An unknown tag gets
`per-pool`, the larger footprint for a given size, so a wrong guess under-fills, never over-fills.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from kvbench.plan.version import ImageVersion

SEMANTICS = ("per-pool", "split")
LAST_PER_POOL_RELEASE = (0, 5, 16)
FIRST_SPLIT_NIGHTLY = date(2026, 8, 1)
# G1 (before PR #28614): asserts host > device in ratio mode.
FIRST_G2_RELEASE = (0, 5, 14)
# Draft layers packed into the KV host pool (inside --hicache-size) from this release.
FIRST_PACKED_DRAFT_RELEASE = (0, 5, 18)
# The last release whose ServerArgs rewrites HiCache + an FA3 decode backend (decode to
# flashinfer/triton, or io to direct when FA3 decode is explicit: "FlashAttention3 decode backend
# is not compatible with hierarchical cache"): in the wheels of 0.5.6, 0.5.9, 0.5.12, 0.5.13;
# gone from 0.5.14, 0.5.17 and 0.5.23 (read 2026-12-01).
LAST_FA3_HICACHE_REWRITE_RELEASE = (0, 5, 13)


@dataclass(frozen=True, slots=True)
class HiCacheSemantics:
    name: str
    is_g1: bool
    reason: str
    is_guess: bool = False

    draft_packed: bool = False

    @property
    def pin_policy(self) -> str:
        # Every release the recipes name (v0.5.12 included) allocates the host pool with
        # torch.empty and pins it with cudaHostRegister: the exact size, no power-of-two
        # rounding of torch's caching host allocator (pin_memory=True is not used).
        return "exact"


def hicache_semantics(version: ImageVersion, override: str | None = None) -> HiCacheSemantics:
    g1 = version.release is not None and version.release < FIRST_G2_RELEASE
    if override is not None:
        return HiCacheSemantics(override, g1, f"set explicitly ({override})")
    if version.release is not None:
        if version.release <= LAST_PER_POOL_RELEASE:
            return HiCacheSemantics(
                "per-pool", g1, f"{version.label}, up to v0.5.16: size applied to each pool"
            )
        packed = version.release >= FIRST_PACKED_DRAFT_RELEASE
        return HiCacheSemantics(
            "split", False, f"{version.label}, from v0.5.17: proportional split; draft pool "
            + ("packed into the KV pool (v0.5.18+)" if packed else "a sidecar (before v0.5.18)"),
            draft_packed=packed,
        )
    if version.nightly is not None:
        if version.nightly < FIRST_SPLIT_NIGHTLY:
            return HiCacheSemantics(
                "per-pool", False, f"{version.label} before 2026-08-01: size applied to each pool"
            )
        return HiCacheSemantics("split", False, f"{version.label}: proportional split; draft "
                                "pool counted as a sidecar (the larger footprint)")
    return HiCacheSemantics(
        "per-pool", False, f"{version.image!r} has no readable version: assuming per-pool "
        "(the larger footprint)", is_guess=True
    )
