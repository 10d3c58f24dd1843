"""`kvbench simulate-jobs`: from a recipe row and its plan to the simulator's setup, for every
row kind: single-node TP, DP attention (one rank per attention group, behind the job's
router), multi-node aggregated workers, and prefill/decode disaggregation. A row the
simulator cannot model comes back with the reason, never silently dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
    """Dynamo routes a conversation to one worker (session affinity); a row with a router
    runs it with consistent hashing on the session key; else SGLang's DP controller's
    round robin (reference/inferencex.md, DP-attention + router pattern)."""
    if job.framework.startswith("dynamo"):
        return "sticky"
    return "consistent_hash" if job.row.get("router") else "round_robin"


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
    engine = EngineConfig(kv_manager=profile.kv_manager,
                          block_tokens=plan.page_size_tokens or int(profile.block_tokens.value),
                          context_tokens=model_context_tokens(job.model))
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


def nic_input(hw) -> dict:
    """What a disaggregated row's KV transfer runs at: the profile's NIC line rate per GPU
    and direction, its source, and the achievable fraction applied to it."""
    line = hw.kv_transfer_bytes_per_s
    return {"hardware": hw.name, "line-bytes-per-s": line.value,
            "link-fraction": hw.achievable_link_fraction,
            "bytes-per-s": hw.kv_transfer_bandwidth, "source": line.source}


def simulate_job(job, sessions, bounds_for, write_policy: str, sizing: str = "launcher"
                 ) -> dict:
    """One output entry: the job, its plan's tiers and, when it can be modelled, the
    resident and offload arms; otherwise `skipped` says why."""
    from kvbench.plan import plan_job
    from kvbench.sim.simulate import SimSetup, run_sessions

    entry: dict[str, Any] = {
        "id": job.short_id, "hw": "-",
        "exp-name": job.exp_name, "config-key": job.config_key, "conc": job.conc,
        "multinode": job.is_multinode, "engine-profile": engine_of(job.framework) or "sglang"}
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
    arms = {"resident": 0}
    if m.host_tokens:
        arms["offload"] = m.host_tokens
    bounds = bounds_for(job.conc)
    try:
        entry["arms"] = {
            arm: run_sessions(sessions, m.costs, SimSetup(
                m.gpu_tokens, host, write_policy,
                job.conc, m.engine, dp=m.ranks, router=m.router, disagg=m.disagg), bounds)
            for arm, host in arms.items()}
    except KvbenchError as e:
        entry["skipped"] = f"simulation failed: {e.message}"
    return entry


# -- several jobs at once: one process per core, each loading the trace once ------------------
_WORKER: dict[str, Any] = {}


def _init_worker(trace: list, bounds: dict, write_policy: str, sizing: str) -> None:
    from kvbench.workload import load_trace

    _WORKER.update(sessions=load_trace(trace), bounds=bounds, policy=write_policy,
                   sizing=sizing)


def _bounds_for(bounds: dict):
    from kvbench.workload.bounds import WorkloadBounds

    return lambda conc: WorkloadBounds(concurrency=conc, **bounds)


def _run_one(job) -> dict:
    return simulate_job(job, _WORKER["sessions"], _bounds_for(_WORKER["bounds"]),
                        _WORKER["policy"], _WORKER["sizing"])


def simulate_jobs(jobs: list, trace: list, bounds: dict, write_policy: str, workers: int,
                  progress: Callable[[Iterable, int], Iterable] = lambda it, _n: it,
                  sizing: str = "launcher") -> list[dict]:
    """Every job's entry, in order; `workers` > 1 spreads the jobs over processes.
    `progress(entries, total)` wraps the entries as they complete (a progress bar);
    `sizing`: the host pools' (plan/launcher_sizing.py: launcher or budget)."""
    if workers <= 1 or len(jobs) < 2:
        _init_worker(trace, bounds, write_policy, sizing)
        return list(progress((_run_one(j) for j in jobs), len(jobs)))
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, initializer=_init_worker,
                             initargs=(trace, bounds, write_policy, sizing)) as pool:
        return list(progress(pool.map(_run_one, jobs, chunksize=4), len(jobs)))


def default_workers() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)))
