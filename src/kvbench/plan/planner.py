"""`plan_job`: a matrix job in, a host-memory plan out (or a refusal that shows the arithmetic).

Order of work: topology from the row -> model profile -> per-rank KV pools -> GPU capacity
estimate -> the backend's sizer -> node footprint against the row's budget. Bad input (unknown
model, backend or framework) becomes a refused plan with a clear error, never an exception, so
planning a whole matrix always finishes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from kvbench.errors import KvbenchError, PlanError
from kvbench.hardware import load_hardware
from kvbench.models import KvPool, ModelProfile, load_model
from kvbench.plan.footprint import per_rank_bytes
from kvbench.plan.gpu import EngineFacts, GpuEstimate, engine_caps, estimate_gpu
from kvbench.plan.image import image_mods, recipe_patch_mods, resolved
from kvbench.plan.launcher_sizing import LauncherSize, check_mode, launcher_size
from kvbench.plan.plan import HostPool, Plan
from kvbench.plan.settings import RecipeSettings, recipe_settings
from kvbench.plan.sizers import SIZERS, SizingContext
from kvbench.plan.topology import JobLike, Topology, inferencex_row, topology_of
from kvbench.plan.version import image_version
from kvbench.plan.vllm_kv import vllm_kv_layout
from kvbench.recipe.layout import benchmark_folder
from kvbench.units import GB, GiB


def page_size_tokens(engine: str, model: ModelProfile) -> int:
    """Page the attention backend forces (reference/kvoffload.md 9 rule 9)."""
    kind = model.attention_kind
    if kind == "compressed":
        return 256
    if engine == "trtllm":
        return 32
    if kind in ("mla", "dsa") or engine == "sglang":
        return 64
    return 16


def _shard_pools(pools: list[KvPool], topo: Topology) -> list[KvPool]:
    """PP stages hold 1/pp of the layers; decode context parallelism shards tokens over dcp."""
    dcp = topo.dcp
    div = topo.pp * dcp
    if div == 1:
        return pools
    return [
        replace(p, bytes_per_token_per_rank=-(-p.bytes_per_token_per_rank // div),
                fixed_bytes_per_request_per_rank=-(-p.fixed_bytes_per_request_per_rank
                                                   // topo.pp),
                note=f"{p.note}; / pp {topo.pp} x dcp {dcp}")
        for p in pools
    ]


# A matrix names a handful of models and clusters hundreds of times: resolve each once.
_model = cache(load_model)
_hardware = cache(load_hardware)


# Host memory the pools may not take: the engine's processes (Python, CUDA context, tokenizer
# workers) and the page cache of the weights being loaded. The InferenceX HiCache launchers
# reserve 1 GB per rank (HICACHE_ALIGNMENT_RESERVE_GB=$TP); kvbench keeps that as the default.
DEFAULT_HOST_HEADROOM_GB_PER_RANK = 1.0


OVER_BUDGET = "projected host footprint exceeds the budget less the host headroom"
# CPU offload on vLLM 0.26 needs prefix caching: the SimpleCPUOffloadConnector turns itself off
# without it (distributed/kv_transfer/kv_connector/v1/simple_cpu_offload_connector.py:82-87), and
# a GDN hybrid's states then run in mamba cache mode "none", a state block of max_model_len
# tokens (model_executor/models/config.py:595-602), which shares no hash block with the attention
# block (v1/core/kv_cache_utils.py:661-676): the OffloadingConnector asserts at start
# (offloading/config.py:51-57)
VLLM_OFFLOAD_NEEDS_PREFIX_CACHING = (
    "--no-enable-prefix-caching with vLLM CPU offload: the SimpleCPUOffloadConnector disables "
    "itself ('Detected prefix caching disabled, disabling CPU offload', vllm 0.26 "
    "simple_cpu_offload_connector.py:82-87) and on a hybrid (GDN) model the OffloadingConnector "
    "asserts at start ('Hybrid models (e.g. Mamba+Attention) need --enable-prefix-caching to "
    "align block sizes', offloading/config.py:51-57); drop the flag (kvbench enables prefix "
    "caching)")


def _headroom_gb(host_headroom_gb: float | None, ranks: int) -> float:
    return (DEFAULT_HOST_HEADROOM_GB_PER_RANK * ranks if host_headroom_gb is None
            else host_headroom_gb)


def plan_job(job: JobLike, runners: Any | None = None, *,
             host_headroom_gb: float | None = None, trust_runner_dram: bool = False,
             sizing: str = "launcher", force: bool = False,
             engine_args: Sequence[str] = ()) -> Plan:
    """`host_headroom_gb`: host memory per node kept free of pools (default 1 GB per rank);
    `trust_runner_dram`: accept a runners.yaml that claims more DRAM than the hardware
    profile installs (otherwise the plan is refused). `sizing`: `launcher` (the default: the
    InferenceX launcher's own arithmetic for the row, plan/launcher_sizing.py, refused only
    where it oversubscribes the row's DRAM budget unless `force`; a row no launcher sizes is
    budget-sized, with a warning) or `budget` (the largest pools the row's DRAM budget holds
    less kvbench's host headroom). Either way the other sizing's bytes stand beside it.
    `engine_args`: the user's extra engine flags (--engine-arg); SGLang's device-pool caps
    among them size the GPU pools (and so a hybrid model's HiCache split) as the engine will."""
    row = job.row
    base: dict[str, Any] = {
        "exp_name": row.get("exp-name", job.config_key),
        "config_key": job.config_key,
        "framework": row.get("framework", ""),
        "backend": (row.get("kv-offload-backend") or {}).get("name"),
        "model": row.get("model", ""),
        "budget_gb": int(row.get("total-cpu-dram-gb", 0)),
    }
    try:
        check_mode(sizing, force)
        caps = engine_caps(engine_args, topology_of(job).engine)
        plan = _plan(job, runners, base, host_headroom_gb, trust_runner_dram, caps=caps)
        if plan.backend is None or (not plan.host_pools and plan.is_refused):
            # no host pool to size (a resident row), or refused before sizing (an unknown
            # runner claim, the wrong engine): no sizing ran
            return plan.model_copy(update={"sizing": None}) if not plan.host_pools else plan
        size = _launcher_size(job, plan)
        explicit = topology_of(job).size_gb_per_rank
        if sizing == "launcher" and size is not None and explicit is not None:
            # kvbench's own recipe extension names the size: the user's choice stands
            return plan.model_copy(update={"warnings": [
                *plan.warnings, f"kv-offload-backend.size-gb-per-rank {explicit:g} is the "
                f"row's own size: the launcher's {size.spelled} ({size.source}) is not used"]})
        if sizing == "launcher" and size is not None:
            return _launcher_plan(job, runners, plan, size, host_headroom_gb,
                                  trust_runner_dram, force, caps)
        if sizing == "launcher":
            why = _no_launcher(job, plan)
            return plan.model_copy(update={"warnings": [*plan.warnings, why]})
        if size is not None:  # the launcher's bytes beside the budget plan
            other = _launcher_plan(job, runners, plan, size, host_headroom_gb,
                                   trust_runner_dram, force=False, caps=caps)
            return plan.model_copy(update={"launcher_sizing": _summary(other, size)})
        return plan
    except KvbenchError as e:
        return _refused(base, [e.message + (f" ({e.hint})" if e.hint else "")], sizing=None)


def _refused(base: dict[str, Any], errors: list[str], **extra: Any) -> Plan:
    fields = {"hardware": "", "gpus": 0, "kv_dtype": "", "page_size_tokens": 0,
              "mem_fraction_static": 0.0, "gpu_kv_tokens": 0, **base, **extra}
    return Plan(**fields, within_budget=False, errors=errors)


def _node_facts(topo: Topology, runners: Any | None) -> dict[str, int]:
    """The runner's facts from runners.yaml (either layout: hardware: or clusters:)."""
    return runners.node_facts().get(topo.runner, {}) if runners is not None else {}


def _gpus_per_node(topo: Topology, runners: Any | None, default: int) -> int:
    return _node_facts(topo, runners).get("gpus-per-node", default)


def _runner_dram_error(topo: Topology, runners: Any | None, hardware: Any) -> str | None:
    mib = _node_facts(topo, runners).get("available-cpu-dram-mib")
    if mib is None:
        return None
    claimed = mib * 2**20
    installed = hardware.host_dram_bytes_per_node.value
    if claimed <= installed:
        return None
    where = (f"clusters.{topo.runner.removeprefix('cluster:')}" if runners.layout == "e2e"
             else f"hardware.{topo.runner}")
    return (f"runners.yaml {where}.available-cpu-dram-mib {mib:,} MiB = {claimed / GB:,.0f} GB "
            f"is more than the {hardware.name} profile installs ({installed / GB:,.0f} GB, "
            f"{hardware.host_dram_bytes_per_node.source}); fix runners.yaml or the profile, or "
            "pass --trust-runner-dram")


def _plan(job: JobLike, runners: Any | None, base: dict[str, Any],
          host_headroom_gb: float | None, trust_runner_dram: bool,
          launcher: LauncherSize | None = None, caps: dict[str, int] | None = None) -> Plan:
    topo = topology_of(job)
    model = _model(topo.model)
    _check_heads_split(topo, model)
    hardware = _hardware(topo.runner)
    gpus_per_node = _gpus_per_node(topo, runners, hardware.gpus_per_node)
    if not topo.is_multinode and max(topo.engine_gpus, topo.ep) > gpus_per_node:
        # the recipe validator holds single-node rows to the node; a job file read back is
        # held here (a planted tp 1024 would otherwise plan the node's share of it)
        raise PlanError(f"tp x pp x pcp = {topo.engine_gpus} (ep {topo.ep}) GPUs is more than "
                        f"the node's {gpus_per_node} (allowed: a single-node row within one "
                        "node)")
    ranks = topo.ranks_on_node(gpus_per_node)
    offload = topo.kv_offloading == "dram" and topo.backend is not None
    settings = _settings(job, topo, hardware.name, offload)
    kv_dtype = settings.kv_dtype or model.kv_dtype_for(topo.precision)
    pools = _shard_pools(model.kv_pools(topo.tp, topo.dp_attention, kv_dtype,
                                        state_dtype=settings.mamba_ssm_dtype), topo)
    vllm_caps = (caps or {}) if topo.engine == "vllm" else {}
    caps = caps if topo.engine == "sglang" else None
    # a page size among the engine args is the one the engine runs (gpu.engine_caps)
    page = (caps or vllm_caps).get("page_size") or settings.page_size_tokens or \
        page_size_tokens(topo.engine, model)
    layout = vllm_kv_layout(model, kv_dtype=kv_dtype, attn_tp=1 if topo.dp_attention else topo.tp,
                            block_flag=page, mtp=topo.spec_decoding == "mtp",
                            state_dtype=settings.mamba_ssm_dtype) \
        if topo.engine == "vllm" and topo.pp == 1 and topo.dcp == 1 else None
    if layout is not None:
        page = layout.block_tokens  # what vLLM runs, a hybrid's raised (plan/vllm_kv.py)
    facts = EngineFacts(
        release=image_version(topo.image).release,
        running_unset="max-running-requests" in settings.unset,
        tokenizer_workers=settings.tokenizer_workers,
        device_memory_bytes=int(hardware.device_memory_bytes.value)
        if hardware.device_memory_bytes else None,
        cuda=hardware.vendor == "nvidia")
    gpu = estimate_gpu(topo, model, pools, int(hardware.hbm_bytes.value), hardware.name,
                       hicache=offload and topo.backend == "hicache",
                       recipe_fraction=settings.mem_fraction,
                       weights_offload_bytes=(settings.weights_offload_gib or 0) * GiB,
                       caps=caps, page_tokens=page, facts=facts)
    layout_line = None
    memory = vllm_caps.get("kv_cache_memory_bytes")
    if layout is not None and (memory or layout.state_layers):
        # vLLM's own block arithmetic over the capped pool, or over the estimate for a hybrid
        max_len = vllm_caps.get("max_model_len") or model.native_context_tokens or 0
        pool = memory or gpu.pool_bytes
        if max_len:
            gpu = replace(gpu, kv_tokens=layout.capacity_tokens(layout.num_blocks(pool),
                                                                max_len))
            layout_line = layout.describe(pool, max_len, "--kv-cache-memory-bytes" if memory
                                          else "the estimated pool")
    common = dict(
        base,
        model=model.name,
        hardware=hardware.name,
        gpus=topo.engine_gpus,
        kv_dtype=kv_dtype,
        page_size_tokens=page,
        mem_fraction_static=gpu.mem_fraction,
        gpu_kv_tokens=gpu.kv_tokens,
        gpu_state_slots=gpu.state_slots if any(p.name == "mamba" for p in pools) else 0,
        ranks_on_node=ranks,
        engine_defaults=list(settings.unset),
        settings_sources=list(settings.sources),
        image_mods=_image_mods(job, topo, hardware.name, offload),
    )
    warnings = [*gpu.notes, *_row_warnings(topo, model)]
    gpn = _gpus_per_node(topo, runners, hardware.gpus_per_node)
    host_share = hardware.host_dram_bytes_per_node.value * ranks / gpn
    if topo.budget_gb * GB > host_share:
        warnings.append(f"budget {topo.budget_gb:,} GB exceeds this node share's installed DRAM "
                        f"({host_share / GB:,.0f} GB, {hardware.name} profile)")
    arithmetic = [_gpu_line(gpu, model, topo, settings.weights_offload_gib)]
    if layout_line:
        arithmetic.append(layout_line)
    if caps:
        arithmetic.append("engine caps (--engine-arg): " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(caps.items())) + f" -> {gpu.kv_tokens:,} KV tokens"
            + (f", {gpu.state_slots:,} state slots" if gpu.state_slots and any(
                p.name == "mamba" for p in pools) else ""))
    if gpu.kv_tokens <= 0 and not topo.is_multinode:
        # no token of KV fits beside the weights: the engine cannot serve one request (vLLM
        # 0.33.0 v1/core/kv_cache_planning.py:58 "No available memory for the cache blocks",
        # SGLang 0.5.23 srt/model_executor/pool_configurator.py:96 "Not enough memory").
        # A multi-node row keeps its warning: the estimate sees the prefill workers only and
        # none of their CONFIG_FILE settings (_row_warnings).
        return _refused(common, [
            f"no KV cache fits on the GPU ({gpu.kv_tokens:,} tokens): the weights and "
            "request states fill the memory the engine may use; more GPUs (tp/ep) or a "
            "lower concurrency"], warnings=warnings, arithmetic=arithmetic)
    if offload and vllm_caps.get("prefix_caching") == 0 and (
            topo.backend == "vllm-simple" or (layout is not None and layout.state_layers)):
        return _refused(common, [VLLM_OFFLOAD_NEEDS_PREFIX_CACHING], warnings=warnings,
                        arithmetic=arithmetic)
    weights_pools, weights_args = _weights_offload(settings, topo)
    if not offload:
        return Plan(**common, engine_args=weights_args, warnings=warnings,
                    arithmetic=arithmetic)
    if not trust_runner_dram and (claim := _runner_dram_error(topo, runners, hardware)):
        return _refused(common, [claim], warnings=warnings, arithmetic=arithmetic)
    host_headroom_gb = _headroom_gb(host_headroom_gb, ranks)
    if host_headroom_gb < 0:
        raise PlanError(f"host headroom {host_headroom_gb:g} GB is negative; allowed: >= 0")
    headroom = int(host_headroom_gb * GB)
    weights_bytes = sum(p.bytes_per_rank for p in weights_pools) * ranks
    sizer = SIZERS.get(topo.backend)
    if topo.engine not in sizer.engines:
        return _refused(common, [
            f"offload backend {topo.backend!r} runs on {', '.join(sizer.engines)}; framework "
            f"{topo.framework!r} serves with {topo.engine}"], warnings=warnings)
    ctx = SizingContext(topo=topo, model=model, kv_dtype=kv_dtype, pools=pools,
                        ranks_on_node=ranks,
                        budget_bytes=max(0, topo.budget_gb * GB - headroom - weights_bytes),
                        gpu=gpu,
                        page_size_tokens=common["page_size_tokens"],
                        version=image_version(topo.image),
                        hicache_options=_hicache_options(settings.hicache, topo),
                        launcher=launcher, vllm_layout=layout)
    sizing = sizer.size(ctx)
    if launcher is not None:
        sizing.arithmetic.insert(0, launcher.line)
    pools = [*sizing.pools, *weights_pools]
    per_rank = per_rank_bytes(pools, sizing.pin_policy)
    projected = per_rank * ranks
    budget = topo.budget_gb * GB
    usable = ctx.budget_bytes + weights_bytes
    errors = list(sizing.errors)
    if projected > usable and not errors:
        errors.append(OVER_BUDGET)
    node = f"node: {per_rank / GB:,.2f} GB x {ranks} rank(s) = {projected / GB:,.0f} GB "
    if launcher is None:
        node += (f"{'<=' if projected <= usable else '>'} {usable / GB:,.0f} GB usable of the "
                 f"{topo.budget_gb:,} GB budget (headroom {(budget - projected) / GB:,.2f} GB)")
    else:  # the launcher's size is judged against the budget; kvbench's headroom warns
        node += (f"{'<=' if projected <= budget else '>'} the {topo.budget_gb:,} GB budget "
                 f"({(budget - projected) / GB:,.2f} GB free; kvbench's host headroom "
                 f"{headroom / GB:,.2f} GB)")
    arithmetic += [
        f"budget: {topo.budget_gb:,} GB (row total-cpu-dram-gb) - host headroom "
        f"{headroom / GB:,.2f} GB (engine processes, weight page cache) "
        + (f"- weights in host memory {weights_bytes / GB:,.2f} GB "
           f"({weights_pools[0].note}) " if weights_pools else "")
        + f"over {ranks} rank(s) on the node = {ctx.per_rank_budget_bytes / GB:,.2f} GB per rank",
        *sizing.arithmetic,
        node,
    ]
    return Plan(
        **common,
        host_kv_tokens=sizing.host_kv_tokens,
        host_pools=pools,
        projected_host_bytes=projected,
        headroom_bytes=budget - projected,
        within_budget=projected <= usable and not errors,
        engine_args=[*weights_args, *sizing.engine_args],
        engine_env=sizing.engine_env,
        engine_config=sizing.engine_config,
        warnings=warnings + sizing.warnings,
        errors=errors,
        arithmetic=arithmetic,
        semantics=sizing.semantics,
    )


def _launcher_facts(job: JobLike, plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """What data/launcher_sizing.yaml rules match on, and the names their values use."""
    topo = topology_of(job)
    facts = {"engine": topo.engine, "model_prefix": job.row.get("model-prefix"),
             "hardware": plan.hardware, "precision": topo.precision, "offload": topo.backend,
             "dp_attn": topo.dp_attention, "tp": topo.tp, "conc": topo.conc,
             "spec_decoding": topo.spec_decoding}
    names = {"total_cpu_dram_gb": topo.budget_gb, "tp": topo.tp, "ep": topo.ep,
             "pcp": topo.pcp, "conc": topo.conc, "dp_attn": topo.dp_attention}
    return facts, names


def _launcher_size(job: JobLike, plan: Plan) -> LauncherSize | None:
    """The single-node launcher's size for the row; None for a row no launcher of the pinned
    commit sizes (a multi-node row's workers are sized by their srt-slurm recipe, the
    embedded engine has no launcher)."""
    topo = topology_of(job)
    if topo.is_multinode or job.row.get("disagg-role") or not inferencex_row(job.row):
        return None
    return launcher_size(*_launcher_facts(job, plan))


def _no_launcher(job: JobLike, plan: Plan) -> str:
    facts, _ = _launcher_facts(job, plan)
    return (f"no InferenceX launcher at 843c6254f sizes a {facts['engine']} "
            f"{facts['model_prefix']} {facts['hardware']} {facts['offload']} row "
            "(plan/data/launcher_sizing.yaml; multi-node rows are sized by their srt-slurm "
            "recipe): its host pool is kvbench's budget sizing")


def _launcher_plan(job: JobLike, runners: Any | None, budget: Plan, size: LauncherSize,
                   host_headroom_gb: float | None, trust_runner_dram: bool,
                   force: bool, caps: dict[str, int] | None = None) -> Plan:
    """The plan at the launcher's size, with the budget plan's size beside it. Refused only
    where the projected node footprint exceeds the row's DRAM budget (unless `force`, which
    keeps the verdict as warnings) or the engine would reject the size; kvbench's own host
    headroom is a warning."""
    base = {"exp_name": budget.exp_name, "config_key": budget.config_key,
            "framework": budget.framework, "backend": budget.backend, "model": budget.model,
            "budget_gb": budget.budget_gb}
    plan = _plan(job, runners, base, host_headroom_gb, trust_runner_dram, launcher=size,
                 caps=caps)
    budget_line = (f"kvbench budget sizing (--sizing budget): {_knob_text(budget)} -> "
                   f"{budget.projected_host_bytes / GB:,.0f} GB projected on the node "
                   f"({'fits' if budget.within_budget else 'refused'})")
    ranks = max(1, plan.ranks_on_node)
    budget_bytes = plan.budget_gb * GB
    over = plan.projected_host_bytes > budget_bytes
    errors = [e for e in plan.errors if e != OVER_BUDGET]
    warnings = list(plan.warnings)
    per_rank = plan.projected_host_bytes / ranks / GB
    if over:
        errors.append(
            f"launcher sizing oversubscribes: {size.spelled} ({size.source}) = "
            f"{per_rank:,.2f} GB/rank x {ranks} rank(s) = "
            f"{plan.projected_host_bytes / GB:,.0f} GB > the {plan.budget_gb:,} GB DRAM budget "
            f"(total-cpu-dram-gb); kvbench's budget sizing: {_knob_text(budget)} = "
            f"{budget.projected_host_bytes / GB:,.0f} GB")
    elif OVER_BUDGET in plan.errors:
        headroom = _headroom_gb(host_headroom_gb, ranks)
        warnings.append(
            f"launcher sizing leaves {(budget_bytes - plan.projected_host_bytes) / GB:,.2f} GB "
            f"of the {plan.budget_gb:,} GB budget free, less than kvbench's host headroom of "
            f"{headroom:g} GB (engine processes, weight page cache): {size.spelled} "
            f"({size.source}) = {per_rank:,.2f} GB/rank x {ranks} rank(s) = "
            f"{plan.projected_host_bytes / GB:,.0f} GB")
    if errors and force:
        warnings += [f"--force: {e}" for e in errors]
        errors = []
    elif errors:
        errors.append("the launcher's size is refused; pass --force to run it anyway")
    return plan.model_copy(update={
        "sizing": "launcher", "forced": force and over,
        "within_budget": not over,
        "headroom_bytes": budget_bytes - plan.projected_host_bytes,
        "errors": errors, "warnings": warnings,
        "arithmetic": [*plan.arithmetic, budget_line],
        "launcher": {"source": size.source, "knob": size.knob, "value": size.value,
                     "spelled": size.spelled, "formula": size.formula,
                     **({"measured": {"source": size.measured.source,
                                      "says": size.measured.says,
                                      "applies": size.measured.applies}}
                        if size.measured else {})},
        "budget_sizing": {"engine-args": list(budget.engine_args),
                          "engine-config": budget.engine_config,
                          "projected-host-bytes": budget.projected_host_bytes,
                          "within-budget": budget.within_budget},
    })


def _summary(plan: Plan, size: LauncherSize) -> dict[str, Any]:
    """The launcher plan's size, beside a budget plan."""
    return {"source": size.source, "spelled": size.spelled,
            "engine-args": list(plan.engine_args), "engine-config": plan.engine_config,
            "projected-host-bytes": plan.projected_host_bytes,
            "within-budget": plan.within_budget, "errors": list(plan.errors)}


def _knob_text(plan: Plan) -> str:
    """A plan's host-pool knob as a flag, for the comparison line."""
    args = plan.engine_args
    for flag in ("--hicache-size", "--hicache-ratio", "--kv-offloading-size"):
        if flag in args:
            return f"{flag} {args[args.index(flag) + 1]}"
    for name, pool in (("host_cache_size", "host_cache"), ("global_segment_size",
                                                          "mooncake_segment")):
        for p in plan.host_pools:
            if p.name == pool:
                return f"{name} {p.bytes_per_rank:,} B per rank"
    if "LMCACHE_MAX_LOCAL_CPU_SIZE" in plan.engine_env:
        return f"LMCACHE_MAX_LOCAL_CPU_SIZE={plan.engine_env['LMCACHE_MAX_LOCAL_CPU_SIZE']}"
    extra = (plan.engine_config.get("kv-transfer-config") or {}).get(
        "kv_connector_extra_config") or {}
    for key in ("cpu_bytes_to_use", "cpu_bytes_to_use_per_rank"):
        if key in extra:
            return f"{key} {extra[key]:,}"
    mp = plan.engine_config.get("lmcache-mp")
    if mp:
        return f"lmcache server --l1-size-gb {mp['l1_size_gb']}"
    return " ".join(a for a in args if not a.startswith("--enable"))


def _weights_offload(settings: RecipeSettings, topo: Topology
                     ) -> tuple[list[HostPool], list[str]]:
    """The host pool and flag of the weights a recipe keeps in host memory (vLLM
    --cpu-offload-gb, GiB per GPU), or none."""
    gib = settings.weights_offload_gib
    if not gib:
        return [], []
    if topo.engine != "vllm":
        raise PlanError(f"recipe settings give weights-offload-gib {gib} for {topo.engine}; "
                        "allowed: vllm rows only (--cpu-offload-gb)")
    pool = HostPool(name="weights_cpu_offload", bytes_per_rank=gib * GiB,
                    inside_configured_size=False,
                    note=f"--cpu-offload-gb {gib}: {gib} GiB of weights per rank in host memory")
    return [pool], ["--cpu-offload-gb", str(gib)]


def _settings(job: JobLike, topo: Topology, hardware: str, offload: bool) -> RecipeSettings:
    """The recipe's launcher settings; the embedded engine has none (it is no launcher)."""
    if not inferencex_row(job.row):
        return RecipeSettings()
    return recipe_settings({
        "engine": topo.engine, "model_prefix": job.row.get("model-prefix"),
        "hardware": hardware, "precision": topo.precision,
        "offload": topo.backend if offload else "none", "dp_attn": topo.dp_attention,
        # a disaggregated row's worker row names its role (plan/workers.py ROLE_KEY)
        "tp": topo.tp, "conc": topo.conc, "role": job.row.get("disagg-role"),
    })


def _image_mods(job: JobLike, topo: Topology, hardware: str, offload: bool
                ) -> list[dict[str, Any]]:
    """What the row's launcher changes in the image (plan/image.py), then the recipe's own
    `patches:` (a kvbench extension, kept readable). A multi-node row's workers get their
    srt-slurm recipe's (engines/srt_recipe.py); the embedded engine runs no launcher."""
    release = image_version(topo.image).release
    mods = [] if topo.is_multinode or not inferencex_row(job.row) else image_mods({
        "engine": topo.engine, "model_prefix": job.row.get("model-prefix"),
        "hardware": hardware, "precision": topo.precision,
        "offload": topo.backend if offload else "none", "dp_attn": topo.dp_attention,
        "tp": topo.tp, "conc": topo.conc, "spec_decoding": topo.spec_decoding,
        "role": job.row.get("disagg-role"),
        "image_version": ".".join(map(str, release)) if release else None})
    mods += [m for m in recipe_patch_mods(job.row.get("patches"), job.config_key)
             if all(m["id"] != have["id"] for have in mods)]
    config_file = getattr(job, "config_file", None)
    return resolved(mods, benchmark_folder(config_file) if config_file else None)


def _hicache_options(launcher: dict[str, str], topo: Topology) -> dict[str, str]:
    """The launcher's HiCache settings, with the recipe's own `write-policy` over them."""
    if topo.write_policy is None:
        return launcher
    return {**launcher, "write-policy": topo.write_policy}


def _gpu_line(gpu: GpuEstimate, model: ModelProfile, topo: Topology,
              weights_offload_gib: int | None = None) -> str:
    offloaded = f", less {weights_offload_gib} GiB in host memory" if weights_offload_gib else ""
    weights = (f"weights {gpu.weights_per_rank_bytes / GB:.1f} GB/rank ({model.name} "
               f"{topo.precision} / {topo.weight_shards}{offloaded})")
    if gpu.pre_load_bytes:  # SGLang: the fraction of what is free before the weights
        draft = gpu.loaded_weights_bytes - gpu.weights_per_rank_bytes
        return (
            f"GPU ({gpu.hardware}): {gpu.pre_load_bytes / GB:.1f} GB free before the weights "
            f"x {gpu.mem_fraction} - {weights}"
            + (f" - the MTP draft's own embedding and head {draft / GB:.1f} GB" if draft else "")
            + f" -> ~{gpu.kv_tokens:,} KV tokens per rank (estimate; "
            f"{gpu.running_requests} running requests)"
        )
    return (f"GPU ({gpu.hardware}): {gpu.hbm_bytes / GB:.0f} GB x {gpu.mem_fraction} - "
            f"{weights} -> ~{gpu.kv_tokens:,} KV tokens per rank (estimate)")


def _check_heads_split(topo: Topology, model: ModelProfile) -> None:
    """Attention heads split evenly over the attention TP group, or the engine refuses to
    start: vLLM 0.33.0 config/model.py:1559 (verify_with_parallel_config, "Total number of
    attention heads (...) must be divisible by tensor parallel size"), SGLang 0.5.23
    srt/models/llama.py:183 and qwen3.py:166 (`total_num_heads % attn_tp_size == 0`). With
    DP attention each rank runs attention whole (models/kv.py conventions)."""
    attn_tp = 1 if topo.dp_attention else topo.tp
    heads = model.num_attention_heads
    if heads % attn_tp:
        raise PlanError(f"tp {attn_tp} does not divide {model.name}'s {heads} attention heads: "
                        "the engine refuses to start (allowed: a tp dividing "
                        f"{heads}, or dp-attn)")


def _row_warnings(topo: Topology, model: ModelProfile) -> list[str]:
    out = []
    if topo.is_multinode:
        out.append("multi-node row: sized for the prefill workers only (the generator budgets "
                   "no host DRAM for decode workers); CONFIG_FILE settings are not read")
    if topo.spec_decoding == "mtp" and model.mtp_layers == 0:
        out.append("speculative decoding uses a separate draft model whose KV is not modelled")
    return out
