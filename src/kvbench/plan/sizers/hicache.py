"""SGLang HiCache: `--hicache-size` (decimal GB per rank) or `--hicache-ratio`.

Host pool math follows `pool_host/base.py` (reference/kvoffload.md 1.3): tokens =
size*1e9 // bytes_per_token, then rounded up by one whole page; a Mamba pool counts request
slots (page 1, +1 slot). Which pools the size covers depends on the image (hicache_semantics)."""

from __future__ import annotations

import math

from kvbench.plan.footprint import per_rank_bytes
from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Sizing, SizingContext, fit_knob
from kvbench.plan.sizers.hicache_semantics import HiCacheSemantics, hicache_semantics
from kvbench.plan.sizers.hicache_warnings import hicache_warnings
from kvbench.units import GB

# Where the recipe names none (plan/settings.py): SGLang's own defaults.
DEFAULT_OPTIONS = {"write-policy": "write_through", "io-backend": "kernel",
                   "mem-layout": "page_first"}


def aligned_tokens(tokens: int, page: int) -> int:
    """SGLang always adds one page: (tokens // page + 1) * page."""
    return (tokens // page + 1) * page


def _sidecar_tokens(host_tokens: int, device_tokens: int, page: int) -> int:
    """The draft's host pool: the KV host pool's slots as a ratio of the device pool, then the
    page SGLang always adds (mem_cache/kv_cache_builder.py:104-118 host_to_device_ratio =
    primary.size / pool.size with host_size 0 -> pool_host/base.py:124-127, sglang 0.5.17), in
    the same float arithmetic: 688,960 KV slots gave the draft 689,024 on the H200."""
    if device_tokens <= 0:
        return host_tokens
    return aligned_tokens(int(device_tokens * (host_tokens / device_tokens)), page)


class HiCacheSizer:
    name = "hicache"
    engines = ("sglang",)

    def size(self, ctx: SizingContext) -> Sizing:
        # The embedded engine has no image version and none of a real SGLang's kernel hazards.
        embedded = ctx.topo.framework == "sim"
        sem = (HiCacheSemantics("per-pool", False, "the embedded engine sizes each pool")
               if embedded else hicache_semantics(ctx.version))
        launcher = ctx.launcher
        if launcher is not None and launcher.knob == "hicache-ratio":
            sizing = self._ratio(ctx, sem, float(launcher.value))
        elif ctx.model.compressed is not None:
            sizing = self._ratio(ctx, sem)
        else:
            sizing = self._fixed(ctx, sem)
        sizing.semantics = sem.name
        sizing.pin_policy = sem.pin_policy
        sizing.warnings[:0] = [f"HiCache semantics {sem.name}: {sem.reason}"] if sem.is_guess \
            else []
        sizing.arithmetic.insert(0, f"HiCache semantics {sem.name} ({sem.reason})")
        if not embedded:
            sizing.warnings.extend(hicache_warnings(ctx, sem))
        opts = {**DEFAULT_OPTIONS, **ctx.hicache_options}
        sizing.engine_args = [
            "--enable-hierarchical-cache",
            *sizing.engine_args,
            "--hicache-write-policy", opts["write-policy"],
            "--hicache-io-backend", opts["io-backend"],
            "--hicache-mem-layout", opts["mem-layout"],
        ]
        return sizing

    # -- fixed size ------------------------------------------------------------------------
    def _pools(self, ctx: SizingContext, sem: HiCacheSemantics, size_gb: int) -> list[HostPool]:
        kv = ctx.pool("kv")
        assert kv is not None
        draft = ctx.pool("draft_kv") if ctx.has_draft else None
        mamba, swa = ctx.pool("mamba"), ctx.pool("swa")
        page = ctx.page_size_tokens
        anchor_bpt = kv.bytes_per_token_per_rank
        if sem.draft_packed and draft is not None:
            anchor_bpt += draft.bytes_per_token_per_rank  # packed tail layers (v0.5.18+)
        shares = self._shares(ctx, sem, anchor_bpt, size_gb)
        tokens = aligned_tokens(int(shares["kv"] * GB // anchor_bpt), page)
        pools = [HostPool(name="kv", bytes_per_rank=tokens * anchor_bpt,
                          inside_configured_size=True,
                          note=f"{tokens:,} tokens x {anchor_bpt:,} B" +
                          (" (draft layers packed)" if anchor_bpt != kv.bytes_per_token_per_rank
                           else ""),
                          units=tokens, unit_bytes=anchor_bpt,
                          configured_gb=shares["kv"])]
        if mamba is not None:
            state = mamba.fixed_bytes_per_request_per_rank
            slots = int(shares["mamba"] * GB // state) + 1
            pools.append(HostPool(name="mamba", bytes_per_rank=slots * state,
                                  inside_configured_size=True,
                                  note=f"{slots:,} request states x {state:,} B",
                                  units=slots, unit_bytes=state,
                                  configured_gb=shares["mamba"]))
        if swa is not None and ctx.model.sliding_window:
            bpt = swa.fixed_bytes_per_request_per_rank // ctx.model.sliding_window
            swa_tokens = aligned_tokens(int(shares["swa"] * GB // bpt), page)
            pools.append(HostPool(name="swa", bytes_per_rank=swa_tokens * bpt,
                                  inside_configured_size=True,
                                  note=f"{swa_tokens:,} sliding-window tokens x {bpt:,} B",
                                  units=swa_tokens, unit_bytes=bpt,
                                  configured_gb=shares["swa"]))
        if ctx.pool("indexer") is not None and ctx.model.indexer is not None:
            ix = ctx.model.indexer
            per_layer = ix.head_dim + ix.head_dim // ix.quant_block * 4
            layers = ctx.model.num_layers  # every KV layer, not only the indexer owners
            bpt = per_layer * layers
            pools.append(HostPool(name="indexer", bytes_per_rank=tokens * bpt,
                                  inside_configured_size=False,
                                  note=f"{tokens:,} tokens x {layers} layers x {per_layer} B, "
                                  "mirrors the KV pool outside --hicache-size",
                                  units=tokens, unit_bytes=bpt))
        if draft is not None and not sem.draft_packed:
            bpt = draft.bytes_per_token_per_rank
            dtokens = _sidecar_tokens(tokens, ctx.gpu.kv_tokens, page)
            pools.append(HostPool(name="draft_kv", bytes_per_rank=dtokens * bpt,
                                  inside_configured_size=False,
                                  note=f"{dtokens:,} tokens x {bpt:,} B sidecar draft pool "
                                  "outside --hicache-size", units=dtokens, unit_bytes=bpt))
        return pools

    def _shares(self, ctx: SizingContext, sem: HiCacheSemantics, anchor_bpt: int,
                size_gb: int) -> dict[str, float]:
        """GB of the configured size each pool is given, in SGLang's own expression order so
        the token counts match the engine's to the token."""
        hybrid = [n for n in ("mamba", "swa") if ctx.pool(n) is not None]
        if sem.name == "per-pool" or not hybrid:
            return {"kv": float(size_gb), "mamba": float(size_gb), "swa": float(size_gb)}
        # split: proportional to device-pool bytes (hybrid_pool_assembler._split_hicache_size:
        # hicache_size * pool_bytes / total_bytes)
        # the KV pool's buffers hold size + page rows (the padded page, sglang 0.5.17
        # mem_cache/memory_pool.py:2037), which get_kv_size_bytes counts
        device = {"kv": (ctx.gpu.kv_tokens + ctx.page_size_tokens) * anchor_bpt
                  if ctx.gpu.kv_tokens else 0}
        device.update({n: ctx.gpu.device_bytes.get(n, 0) for n in hybrid})
        total = sum(device.values())
        if total <= 0:
            share = size_gb / (1 + len(hybrid))  # no device estimate: split evenly
            return {"kv": share, "mamba": share, "swa": share}
        return {n: size_gb * device.get(n, 0) / total for n in ("kv", "mamba", "swa")}

    def _fixed(self, ctx: SizingContext, sem: HiCacheSemantics) -> Sizing:
        explicit = ctx.topo.size_gb_per_rank
        warnings = []
        if explicit is not None and explicit != int(explicit):
            warnings.append(f"--hicache-size takes whole GB: {explicit} GB used as {int(explicit)}")
        fit = fit_knob(
            ctx,
            lambda h: self._pools(ctx, sem, h),
            hi=max(1, ctx.per_rank_budget_bytes // GB),
            explicit=int(explicit) if explicit is not None else None,
            pin_policy=sem.pin_policy,
            describe=lambda h: f"--hicache-size {h} GB per rank",
            forced=int(ctx.launcher.value) if ctx.launcher is not None else None,
            zero_means=(
                "SGLang reads --hicache-size 0 as unset and sizes the host pool by "
                "--hicache-ratio (default 2.0), twice the device pool: ~2 x "
                f"{ctx.gpu.pool_bytes / GB:,.1f} GB = {2 * ctx.gpu.pool_bytes / GB:,.1f} GB per "
                "rank (device estimate), not an empty pool"),
        )
        size_gb = fit.value if fit.value is not None else int(explicit or 0)
        tokens = fit.pools[0].bytes_per_rank // max(1, ctx.pool("kv").bytes_per_token_per_rank)
        return Sizing(
            pools=fit.pools,
            host_kv_tokens=tokens,
            engine_args=["--hicache-size", str(size_gb)],
            warnings=warnings,
            errors=list(fit.errors),
            arithmetic=[*fit.arithmetic, _sum_line(fit.pools, sem.pin_policy)],
        )

    # -- ratio (DeepSeek-V4: --hicache-size is rejected) ------------------------------------
    def _device_pools(self, ctx: SizingContext) -> tuple[dict[str, int], list[str]]:
        """The device pools a ratio multiplies, per rank, as SGLang sizes them from the memory
        the fraction leaves after the weights (GpuEstimate): SGLang mirrors each device pool
        page for page, host pages = device pages x ratio (sglang 0.5.17 mem_cache/
        hybrid_cache/hybrid_pool_assembler.py:280-302, 0.5.23 :647-676 for DeepSeek-V4;
        HostKVCache for the others). For DeepSeek-V4 with MTP the target's pools give up the
        draft worker's share: bytes per full token x (T + 1) / T (0.5.17 model_executor/
        pool_configurator.py:670-677, 0.5.23 :1250-1257)."""
        gpu = ctx.gpu
        device = {name: b for name, b in gpu.device_bytes.items() if b}
        memory = (f"{gpu.pre_load_bytes / GB:.1f} GB free before the weights"
                  if gpu.pre_load_bytes else f"{gpu.hbm_bytes / GB:.0f} GB")
        lines = [f"device pools (estimate): {memory} x {gpu.mem_fraction} - weights "
                 f"{(gpu.loaded_weights_bytes or gpu.weights_per_rank_bytes) / GB:.1f} GB = "
                 f"{sum(device.values()) / GB:.2f} GB per rank"]
        if ctx.model.compressed is not None and ctx.topo.spec_decoding == "mtp":
            layers = ctx.model.num_layers
            device = {n: b * layers // (layers + 1) for n, b in device.items()}
            lines.append(f"less the MTP draft worker's share (SGLang DSV4PoolConfigurator: "
                         f"x {layers}/{layers + 1}) = {sum(device.values()) / GB:.2f} GB per rank")
        return device, lines

    def _ratio_pools(self, ctx: SizingContext, sem: HiCacheSemantics, device: dict[str, int],
                     ratio: float, scale: float) -> list[HostPool]:
        """The host pools of `ratio` x the device pools (x `scale`, a measurement over the
        estimate). A token-pool model gets the KV pool's token slots x ratio, and the
        sidecars mirror that token count as with a fixed size (_pools); DeepSeek-V4's pools
        are taken page for page."""
        how = "the launcher's measurement" if scale != 1.0 else "the device-pool estimate"
        kv = ctx.pool("kv")
        if ctx.model.compressed is None and kv is not None and ctx.gpu.kv_tokens:
            anchor = kv.bytes_per_token_per_rank
            draft = ctx.pool("draft_kv") if ctx.has_draft else None
            if sem.draft_packed and draft is not None:
                anchor += draft.bytes_per_token_per_rank
            tokens = int(ctx.gpu.kv_tokens * ratio * scale)
            return [p.model_copy(update={
                "configured_gb": None,
                "note": f"ratio {ratio:g} x {ctx.gpu.kv_tokens:,} device tokens ({how}): "
                        f"{p.note}"}) for p in self._pools(ctx, sem, tokens * anchor / GB)]
        return [
            HostPool(name=name, bytes_per_rank=int(b * ratio * scale),
                     inside_configured_size=True,
                     note=f"ratio {ratio:g} x this pool's device bytes ({how})")
            for name, b in device.items()
        ] or [HostPool(name="kv", bytes_per_rank=0, inside_configured_size=True,
                       note=f"ratio {ratio:g} x no device pool (estimate)")]

    def _ratio(self, ctx: SizingContext, sem: HiCacheSemantics,
               forced: float | None = None) -> Sizing:
        """Host pools = device pools x ratio. The device pools are kvbench's estimate of
        SGLang's arithmetic, or (--sizing launcher) what the launcher measured at this shape,
        shown beside the estimate. `forced`: the launcher's ratio, for any model."""
        device, notes = self._device_pools(ctx)
        device_total = sum(device.values())
        if forced is None:
            ratio = math.floor(ctx.per_rank_budget_bytes / max(1, device_total) * 10) / 10
            chosen = (f"ratio = floor10({ctx.per_rank_budget_bytes / GB:.2f} / "
                      f"{device_total / GB:.2f}) = {ratio}")
        else:
            ratio = forced
            chosen = f"launcher: --hicache-ratio {ratio:g}"
        notes.insert(0, "DeepSeek-V4 HiCache accepts only --hicache-ratio: host pools = "
                     "device pools x ratio" if ctx.model.compressed is not None else
                     "--hicache-ratio: host pools = device pools x ratio")
        notes.append(chosen)
        est = self._ratio_pools(ctx, sem, device, ratio, 1.0)
        est_total = sum(p.bytes_per_rank for p in est)
        scale, measured = 1.0, ctx.launcher.measured if ctx.launcher is not None else None
        if measured is not None:
            notes.append(measured.line)
            if measured.applies and est_total:
                if measured.host_bytes_on_node:
                    scale = measured.host_bytes_on_node / (ctx.ranks_on_node * est_total)
                elif measured.device_bytes_per_rank:
                    scale = measured.device_bytes_per_rank / device_total
                elif measured.host_kv_tokens and ctx.gpu.kv_tokens:
                    scale = measured.host_kv_tokens / (ratio * ctx.gpu.kv_tokens)
        warnings = ["host pools scale with the engine's real device pool: compare "
                    "max_total_num_tokens in the server log with the estimate"]
        if ctx.topo.size_gb_per_rank is not None and forced is None:
            warnings.append("kv-offload-backend.size-gb-per-rank ignored: this model is ratio-only")
        errors = []
        if ratio <= 0 or (sem.is_g1 and ratio <= 1):
            errors.append(f"the budget allows only --hicache-ratio {ratio}, and this SGLang "
                          "needs a ratio above 1 (G1 asserts host > device)" if sem.is_g1 else
                          f"the budget allows no host pool (--hicache-ratio {ratio})")
        pools = est if scale == 1.0 else self._ratio_pools(ctx, sem, device, ratio, scale)
        if scale != 1.0:
            notes.append(f"at the device-pool estimate: {ratio:g} x the device pools = "
                         f"{est_total / GB:.2f} GB per rank, "
                         f"{est_total * ctx.ranks_on_node / GB:,.0f} GB on the node; the "
                         f"verdict uses the measurement ({scale:.2f} x the estimate)")
        notes.append(_sum_line(pools, sem.pin_policy))
        return Sizing(pools=pools, host_kv_tokens=int(ctx.gpu.kv_tokens * ratio * scale),
                      engine_args=["--hicache-ratio", f"{ratio:g}"], errors=errors,
                      arithmetic=notes, warnings=warnings)


def _sum_line(pools: list[HostPool], pin_policy: str) -> str:
    parts = " + ".join(
        f"{p.bytes_per_rank / GB:.2f} ({p.name}{'' if p.inside_configured_size else ', outside'})"
        for p in pools
    )
    total = per_rank_bytes(pools, pin_policy)
    pin = "" if pin_policy == "exact" else f" incl. {pin_policy} pinning"
    return f"per rank: {parts} = {total / GB:.2f} GB{pin}"
