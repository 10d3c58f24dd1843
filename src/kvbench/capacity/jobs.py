"""Recipe rows through the simulator (`kvbench simulate-jobs`, `plan --predict`, the rows of
`capacity`): from a row and its plan to the simulator's setup, for every row kind:
single-node TP, DP attention (one rank per attention group, behind the job's router),
multi-node aggregated workers, and prefill/decode disaggregation; each row replays its
workload (the AgentX-shaped corpus sized to it unless a trace is given) by AgentX's bounds.
A row the simulator cannot model comes back with the reason, never silently dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from itertools import pairwise
from typing import Any

from kvbench.errors import KvbenchError

TRT_NOTE = "no TensorRT-LLM engine profile: sglang's step costs and radix cache stand in"


@dataclass(frozen=True, slots=True)
class JobModel:
    costs: Any
    ranks: int
    router: str
    gpu_tokens: int
    host_tokens: int
    engine: Any  # EngineConfig
    disagg: Any = None  # DisaggSetup
    notes: tuple[str, ...] = ()
    nic: dict | None = None  # the disaggregation model's network input, with its source


def engine_of(framework: str) -> str | None:
    """The engine profile a framework runs on (`dynamo-vllm` -> vllm), else None."""
    from kvbench.sim.engine_profile import engine_profile_for

    return engine_profile_for(framework)


def router_of(job) -> str:
    """Dynamo routes a conversation to one worker (session affinity): by its KV-aware cost
    where the row's srt-slurm recipe runs the frontend with `router-mode: kv`, else to the
    least loaded; a row with a router runs it with consistent hashing on the session key;
    else SGLang's DP controller's round robin (reference/inferencex.md, DP-attention + router
    pattern)."""
    if job.framework.startswith("dynamo"):
        return "kv" if frontend_router_mode(job) == "kv" else "sticky"
    return "consistent_hash" if job.row.get("router") else "round_robin"


def frontend_router_mode(job) -> str | None:
    """The Dynamo frontend's --router-mode in the row's srt-slurm recipe (None: not named)."""
    from kvbench.engines.srt_recipe import config_file_of, recipe_of

    config_file = config_file_of(job.row) if job.is_multinode else None
    if config_file is None:
        return None
    try:
        args = (recipe_of(job, config_file).frontend.get("args") or {})
    except KvbenchError:
        return None
    mode = args.get("router-mode")
    return None if mode is None else str(mode)


def _ranks(worker: dict) -> int:
    """Attention ranks of a worker: one per GPU under DP attention, else one TP group."""
    return int(worker["tp"]) if worker.get("dp-attn") else 1


def model_job(job, plan) -> JobModel:
    """The simulator setup of a planned job; raises KvbenchError (the reason) if it cannot
    be modelled."""
    from kvbench.sim.engine_config import EngineConfig
    from kvbench.sim.engine_profile import load_engine_profile
    from kvbench.sim.simulate import DisaggSetup
    from kvbench.sim.sizing import gpu_tier_tokens, model_context_tokens, resolve_costs

    name = engine_of(job.framework)
    notes = [TRT_NOTE] if name is None and "trt" in job.framework else []
    profile = load_engine_profile(name)
    lazy = profile.kv_manager == "vllm_blocks" and plan.host_kv_tokens > 0 and lazy_offload(
        job, plan)
    if lazy:
        notes.append("SimpleCPUOffloadConnector lazy_offload: blocks stored as they near "
                     "eviction")
    engine = EngineConfig(kv_manager=profile.kv_manager,
                          block_tokens=plan.page_size_tokens or int(profile.block_tokens.value),
                          context_tokens=model_context_tokens(job.model), lazy_offload=lazy)
    row = job.row
    prefill = row["prefill"] if job.is_multinode else row
    costs = resolve_costs(job.model, plan.hardware, int(prefill["tp"]), job.precision,
                          kv_dtype=plan.kv_dtype, dp_attention=bool(prefill.get("dp-attn")),
                          engine=name)
    workers = int(prefill.get("num-worker", 1)) if job.is_multinode else 1
    ranks = workers * _ranks(prefill)
    disagg = nic = None
    decode = row.get("decode") if job.is_multinode else None
    if decode and int(decode.get("num-worker", 0)) > 0:
        from kvbench.hardware import load_hardware

        hw = load_hardware(plan.hardware)
        bw = hw.kv_transfer_bandwidth
        if bw is None:
            raise KvbenchError(f"hardware profile {hw.name} states no kv_transfer_bytes_per_s "
                               "(the prefill -> decode network)")
        dcosts = resolve_costs(job.model, plan.hardware, int(decode["tp"]), job.precision,
                               kv_dtype=plan.kv_dtype,
                               dp_attention=bool(decode.get("dp-attn")), engine=name)
        disagg = DisaggSetup(
            decode_ranks=int(decode["num-worker"]) * _ranks(decode),
            decode_gpu_tokens=gpu_tier_tokens(dcosts, hw, plan.mem_fraction_static or 0.88),
            decode_costs=dcosts, transfer_bytes_per_token=costs.kv_bytes_per_token_per_rank,
            transfer_bytes_per_s=bw)
        nic = nic_input(hw)
    elif decode is not None:
        notes.append("aggregated multi-node: prefill workers serve whole requests")
    return JobModel(costs, ranks, router_of(job), plan.gpu_kv_tokens, plan.host_kv_tokens,
                    engine, disagg, tuple(notes), nic)


def lazy_offload(job, plan) -> bool:
    """Whether the row's vLLM server runs SimpleCPUOffloadConnector with lazy_offload: its
    --kv-transfer-config as the engine adapter builds it (the launchers set it per key:
    engines/data/vllm.yaml)."""
    import json

    from kvbench.engines import get_adapter

    try:
        argv = get_adapter(job.framework).build(job, plan, port=1).argv
    except KvbenchError:
        return False
    for flag, value in pairwise(argv):
        if flag == "--kv-transfer-config":
            try:
                extra = json.loads(value).get("kv_connector_extra_config") or {}
            except (ValueError, AttributeError):
                return False
            return str(extra.get("lazy_offload")).lower() == "true"
    return False


def nic_input(hw) -> dict:
    """What a disaggregated row's KV transfer runs at: the profile's NIC line rate per GPU
    and direction, its source, and the achievable fraction applied to it."""
    line = hw.kv_transfer_bytes_per_s
    return {"hardware": hw.name, "line-bytes-per-s": line.value,
            "link-fraction": hw.achievable_link_fraction,
            "bytes-per-s": hw.kv_transfer_bandwidth, "source": line.source}


def model_prefix(job) -> str:
    """The row's model family as InferenceX names it (its launchers' MODEL_PREFIX)."""
    return str(job.row.get("model-prefix") or job.exp_name.split("_")[0])


BOUNDS_MODES = ("agentx", "once")


def row_bounds(concurrency: int, given: dict | None = None, mode: str = "agentx"):
    """The workload bounds a row replays at this concurrency, `given` (WorkloadBounds fields)
    winning. `agentx`: as an AgentX point (replay/profile.py AGENTX_V1: its duration, warm-up
    requests per lane, lanes starting at a sampled turn in 25-75% of a session, the idle-gap
    cap; lanes recycle sessions, each tree behind the harness's cache-bust marker, so a
    recycled pass shares only what precedes it). `once`: each session played once
    from its first turn, no warm-up (lanes end when the sessions run out)."""
    from kvbench.errors import WorkloadError
    from kvbench.replay.profile import AGENTX_V1, chat_prompts, replay_settings
    from kvbench.workload.bounds import WorkloadBounds

    if mode not in BOUNDS_MODES:
        raise WorkloadError(f"--bounds {mode!r}; allowed: {', '.join(BOUNDS_MODES)}")
    given = {k: v for k, v in (given or {}).items() if v is not None}
    names = {f.name for f in fields(WorkloadBounds)}
    settings = replay_settings(AGENTX_V1, concurrency, given) if mode == "agentx" else {}
    if settings.get("think_time_cap_s", 0.0) is None:
        # the harness caps a tree's idle time (nothing of it in flight) at 300 s; the lanes
        # cap each gap there, which is the same wherever no subagent runs beside it
        settings["think_time_cap_s"] = AGENTX_V1.tree_idle_cap_s
    # the idle caps themselves are `kvbench simulate --profile agentx`'s (sim/lanes.py); the
    # jobs' forecasts keep the per-gap cap above until they are measured against it
    names -= {"tree_idle_cap_s", "system_idle_cap_s"}
    if mode == "agentx":
        # the harness's cache-bust marker per session tree, as the replay of the row sends
        # it (on the chat endpoint, `kvbench run`'s default)
        settings["tree_markers"] = chat_prompts(AGENTX_V1.name, chat=True)[1]
    return WorkloadBounds(**{k: v for k, v in {**settings, **given}.items() if k in names
                             and k != "concurrency"}, concurrency=concurrency)


def simulate_job(job, source, bounds_for, write_policy: str, sizing: str = "launcher"
                 ) -> dict:
    """One output entry: the job, its plan's tiers and, when it can be modelled, the
    resident and offload arms on the row's workload (`source`, a WorkloadSource);
    otherwise `skipped` says why. `sizing`: the host pools' (plan/launcher_sizing.py:
    launcher or budget)."""
    from kvbench.plan import plan_job
    from kvbench.sim.simulate import SimSetup, run_sessions

    entry: dict[str, Any] = {
        "id": job.short_id, "hw": "-",
        "exp-name": job.exp_name, "config-key": job.config_key, "conc": job.conc,
        "multinode": job.is_multinode, "engine-profile": engine_of(job.framework) or "sglang",
        "kv-offloading": job.kv_offloading}
    try:
        plan = plan_job(job, sizing=sizing)
    except KvbenchError as e:
        entry["skipped"] = f"plan failed: {e.message}"
        return entry
    entry.update({"hw": plan.hardware, "backend": plan.backend, "sizing": plan.sizing,
                  "gpu-kv-tokens": plan.gpu_kv_tokens,
                  "host-kv-tokens": plan.host_kv_tokens, "errors": list(plan.errors)})
    if plan.errors or not plan.within_budget:
        entry["skipped"] = "plan refused: " + ("; ".join(plan.errors) or "over the DRAM budget")
        return entry
    if plan.gpu_kv_tokens <= 0:
        entry["skipped"] = ("cannot model: the plan leaves 0 GPU KV tokens per rank (weights "
                            "fill the GPU, or the planner does not size this topology)")
        return entry
    try:
        m = model_job(job, plan)
    except KvbenchError as e:
        entry["skipped"] = f"cannot model: {e.message}"
        return entry
    entry.update({"ranks": m.ranks, "router": m.router, "notes": list(m.notes),
                  "decode-ranks": m.disagg.decode_ranks if m.disagg else 0})
    if m.nic is not None:
        entry["kv-transfer"] = m.nic
    prefix = model_prefix(job)
    try:
        sessions = source.sessions_for(prefix, job.conc)
        bounds = bounds_for(job.conc)
        entry["workload"] = {"sessions": len(sessions), "duration-s": bounds.duration_s,
                             "kind": source.kind}
        entry["warnings"] = fill_warnings(job.exp_name, sessions, bounds,
                                          m.gpu_tokens * m.ranks if m.host_tokens else None)

        def arm(host: int) -> dict:
            setup = SimSetup(m.gpu_tokens, host, write_policy, job.conc, m.engine, dp=m.ranks,
                             router=m.router, disagg=m.disagg)
            return _memo((prefix, source, bounds, m.costs, setup),
                         lambda: run_sessions(sessions, m.costs, setup, bounds))

        entry["arms"] = {"resident": arm(0)}
        if m.host_tokens:
            resident = entry["arms"]["resident"]
            if resident["cache"]["device_evicted_tokens"] == 0:
                entry["arms"]["offload"] = same_as_resident(resident, m.host_tokens)
            else:
                entry["arms"]["offload"] = arm(m.host_tokens)
    except KvbenchError as e:
        entry["skipped"] = f"simulation failed: {e.message}"
    return entry


NEVER_EVICTED = ("the resident arm evicted nothing from the GPU pool: a host tier is never "
                 "read, so the offload arm's requests run exactly as the resident arm's (not "
                 "simulated again)")


def same_as_resident(resident: dict, host_tokens: int) -> dict:
    """The offload arm of a run whose resident arm never evicted: the same requests, the
    same times (a host tier only adds hits on what the GPU pool evicted; its write-through
    copies are asynchronous), said so."""
    import copy

    out = copy.deepcopy(resident)
    out["setup"]["host_tokens"] = host_tokens
    out["same_as_resident"] = NEVER_EVICTED
    return out


_MEMO: dict[str, dict] = {}


def _memo(key: tuple, run: Callable[[], dict]) -> dict:
    """A simulation run once per process: a row's resident arm is its GPU-resident twin's
    (the same setup, concurrency and workload), so twins simulated in one process share it."""
    k = repr(key)
    if k not in _MEMO:
        if len(_MEMO) > 64:
            _MEMO.clear()
        _MEMO[k] = run()
    return _MEMO[k]


def fill_warnings(label: str, sessions: list, bounds, pool_tokens: int | None) -> dict:
    """Whether the workload fills the row's lanes and (rows with a host tier) its GPU pools:
    {"lanes": line or None, "pool": line or None}."""
    from kvbench.workload.working_set import lanes_warning, pool_warning

    return {"lanes": lanes_warning(label, len(sessions), bounds.concurrency, bounds.recycle),
            "pool": None if pool_tokens is None else pool_warning(
                label, sessions, bounds.concurrency, pool_tokens)}


# -- several jobs at once: one process per core, each building the workload once -------------
_WORKER: dict[str, Any] = {}


def _init_worker(source, bounds: dict, mode: str, write_policy: str,
                 sizing: str = "launcher") -> None:
    _WORKER.update(source=source, bounds=bounds, mode=mode, policy=write_policy,
                   sizing=sizing)


def _run_group(group: list[tuple[int, Any]]) -> list[tuple[int, dict]]:
    given, mode = _WORKER["bounds"], _WORKER["mode"]
    return [(i, simulate_job(job, _WORKER["source"], lambda c: row_bounds(c, given, mode),
                             _WORKER["policy"], _WORKER["sizing"])) for i, job in group]


def twin_key(job: Any) -> tuple:
    """What a row and its GPU-resident twin share (all but the host tier)."""
    row = {k: v for k, v in job.row.items() if k not in (
        "kv-offloading", "kv-offload-backend", "total-cpu-dram-gb", "exp-name")}
    return job.config_key, repr(sorted((k, repr(v)) for k, v in row.items()))


def _groups(jobs: list) -> list[list[tuple[int, Any]]]:
    """Jobs by twin (a row and its GPU-resident twin run in one process, which simulates
    their shared resident arm once), the heaviest first (the most lanes), so that the last
    to finish are short."""
    groups: dict[tuple, list[tuple[int, Any]]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(twin_key(job), []).append((i, job))
    return sorted(groups.values(), key=lambda g: -sum(j.conc for _, j in g))


def simulate_jobs(jobs: list, source, bounds: dict, write_policy: str, workers: int,
                  progress: Callable[[Iterable, int], Iterable] = lambda it, _n: it,
                  mode: str = "agentx", sizing: str = "launcher") -> list[dict]:
    """Every job's entry, in the jobs' order; `bounds` (WorkloadBounds fields) and `mode`
    as `row_bounds` takes them; `workers` > 1 spreads the jobs over processes.
    `progress(entries, total)` wraps the entries as they complete (a progress display);
    `sizing`: the host pools' (launcher or budget)."""
    groups = _groups(jobs)
    out: dict[int, dict] = {}

    def completed(results: Iterable[list[tuple[int, dict]]]) -> Iterable[dict]:
        for group in results:
            for i, entry in group:
                out[i] = entry
                yield entry

    if workers <= 1 or len(groups) < 2:
        _init_worker(source, bounds, mode, write_policy, sizing)
        for _ in progress(completed(_run_group(g) for g in groups), len(jobs)):
            pass
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(workers, initializer=_init_worker,
                                 initargs=(source, bounds, mode, write_policy, sizing)
                                 ) as pool:
            futures = [pool.submit(_run_group, g) for g in groups]
            for _ in progress(completed(f.result() for f in as_completed(futures)),
                              len(jobs)):
                pass
    return [out[i] for i in range(len(jobs))]


def default_workers() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)))
