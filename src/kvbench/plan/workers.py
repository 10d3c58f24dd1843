"""Plans for the workers of a prefill/decode-disaggregated row: each prefill and decode server
planned on its own, placed on the row's nodes, and the row refused when a node's workers need
more GPUs or host memory than it has.

`plan_job` sizes a multi-node row by its prefill workers (the generator budgets host DRAM for
that role alone). `plan_workers` goes further: a worker row per role (the role's tp/ep/
dp-attn, `disagg-role`, `disagg-mtp-size`; settings rules match on `role`), planned with the
row's per-node budget; the decode keeps its KV on the GPU, as InferenceX's
benchmarks/multi_node/amd_utils/server_sglang.sh applies HiCache "to prefill only" (843c6254f).
Workers take ceil(gpus / gpus-per-node) nodes of their own, prefill first, unless the role's
`<ROLE>_NODES=` setting packs them onto fewer (they then share nodes in order)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvbench.plan.plan import Plan
from kvbench.plan.planner import plan_job
from kvbench.units import GB

if TYPE_CHECKING:
    from kvbench.matrix import Job

ROLES = ("prefill", "decode")
# Keys of a worker row: the worker's role and the row's speculative steps (InferenceX's
# DECODE_MTP_SIZE; server_sglang.sh passes speculative flags to both roles only when > 0).
ROLE_KEY = "disagg-role"
MTP_KEY = "disagg-mtp-size"
_MTP_SETTING = re.compile(r"^DECODE_MTP_SIZE=(\d+)$")


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    role: str
    index: int  # within its role
    nodes: tuple[int, ...]  # 0-based ranks of the row's allocation
    slot: int  # how many workers sit on its first node before it (its port offset)
    job: Job  # the worker row
    plan: Plan

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"


@dataclass(slots=True)
class NodeUse:
    gpus: int = 0
    host_bytes: int = 0
    workers: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorkersPlan:
    workers: tuple[WorkerPlan, ...]
    nodes: dict[int, NodeUse]
    gpus_per_node: int
    errors: tuple[str, ...]  # every worker's refusal, then every oversubscribed node's

    @property
    def within_budget(self) -> bool:
        return not self.errors


def mtp_size(job: Job) -> int:
    for setting in job.row["decode"].get("additional-settings") or []:
        if m := _MTP_SETTING.match(str(setting)):
            return int(m.group(1))
    return 0


def worker_job(job: Job, role: str) -> Job:
    """The single-node-shaped row of one `role` worker of a disaggregated row."""
    from kvbench.matrix import Job

    worker = job.row[role]
    row = {k: v for k, v in job.row.items() if k not in ROLES}
    steps = mtp_size(job)
    row |= {
        "tp": int(worker["tp"]), "ep": int(worker.get("ep") or 1),
        "dp-attn": bool(worker.get("dp-attn")), "pp": int(worker.get("pp") or 1),
        "pcp-size": int(worker.get("pcp-size") or 1), "dcp-size": int(worker.get("dcp-size") or 1),
        "conc": job.conc, ROLE_KEY: role, MTP_KEY: steps,
        # without DECODE_MTP_SIZE the launcher passes no speculative flags at all
        "spec-decoding": row.get("spec-decoding", "none") if steps else "none",
    }
    if role == "decode":
        row |= {"kv-offloading": "none", "kv-offload-backend": None}
    return Job(config_key=job.config_key, row=row, scenario=job.scenario)


def plan_workers(job: Job, runners: Any | None = None) -> WorkersPlan:
    gpn = gpus_per_node(job, runners)
    nodes: dict[int, NodeUse] = {}
    workers: list[WorkerPlan] = []
    errors: list[str] = []
    base = 0
    for role in ROLES:
        wjob = worker_job(job, role)
        wplan = plan_job(wjob, runners)
        gpus = int(wjob.row["tp"]) * int(wjob.row["pp"]) * int(wjob.row["pcp-size"])
        count = int(job.row[role].get("num-worker") or 1)
        layout = _layout(count, gpus, gpn, _role_nodes(job.row[role], role))
        for index, offsets in enumerate(layout):
            ranks = tuple(base + o for o in offsets)
            worker = WorkerPlan(role, index, ranks, len(nodes.get(ranks[0], NodeUse()).workers),
                                wjob, wplan)
            workers.append(worker)
            errors += [f"{worker.name}: {e}" for e in wplan.errors]
            for rank in ranks:
                use = nodes.setdefault(rank, NodeUse())
                use.gpus += -(-gpus // len(ranks))
                use.host_bytes += wplan.projected_host_bytes
                use.workers.append(worker.name)
        base += max((o for offsets in layout for o in offsets), default=-1) + 1
    errors += _oversubscribed(nodes, gpn, int(job.row.get("total-cpu-dram-gb") or 0))
    return WorkersPlan(tuple(workers), nodes, gpn, tuple(errors))


def gpus_per_node(job: Job, runners: Any | None) -> int:
    from kvbench.hardware import load_hardware

    facts = runners.node_facts().get(job.runner, {}) if runners is not None else {}
    return int(facts.get("gpus-per-node") or load_hardware(job.runner).gpus_per_node)


def _role_nodes(worker: dict[str, Any], role: str) -> int | None:
    """The row's `<ROLE>_NODES=` setting: the nodes all of a role's workers share
    (amd_utils/submit.sh: PREFILL_TP_SIZE = PREFILL_NODES * PREFILL_TP / PREFILL_WORKERS)."""
    pattern = re.compile(rf"^{role.upper()}_NODES=(\d+)$")
    for setting in worker.get("additional-settings") or []:
        if m := pattern.match(str(setting)):
            return int(m.group(1))
    return None


def _layout(count: int, gpus: int, gpn: int, role_nodes: int | None) -> list[list[int]]:
    """Node offsets of each of `count` workers of `gpus` GPUs: whole nodes of their own unless
    `<ROLE>_NODES=` packs the role onto fewer nodes, which the workers then share in order."""
    span = max(1, math.ceil(gpus / gpn))
    total = role_nodes if role_nodes is not None else span * count
    if total >= count:
        each = max(1, total // count)
        return [list(range(i * each, (i + 1) * each)) for i in range(count)]
    return [[i * total // count] for i in range(count)]


def _oversubscribed(nodes: dict[int, NodeUse], gpn: int, budget_gb: int) -> list[str]:
    """Each node's GPUs and projected host memory (its workers' plans) against one node's."""
    out = []
    for rank, use in sorted(nodes.items()):
        who = ", ".join(use.workers)
        if use.gpus > gpn:
            out.append(f"node {rank} ({who}): {use.gpus} GPUs > {gpn} per node")
        if budget_gb and use.host_bytes > budget_gb * GB:
            out.append(f"node {rank} ({who}): projected host {use.host_bytes / GB:,.0f} GB > "
                       f"{budget_gb:,} GB budget (row total-cpu-dram-gb, per node)")
    return out
