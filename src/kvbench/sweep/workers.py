"""The workers of a multi-node (prefill/decode) row: one single-node row per worker, sized by
its own plan, and where each runs.

A worker row is the job row with the worker's parallelism (tp, pp, pcp-size, dcp-size, ep,
dp-attn) in place of `prefill`/`decode`, so the planner and the engine adapters treat it as
the one-server row it is. The row's host budget is spent where the reference spends it, on
the prefill role: prefill workers keep the row's offload backend, decode workers serve from
GPU memory (`kv-offloading: none`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = ("prefill", "decode")
_WORKER_FIELDS = ("tp", "pp", "pcp-size", "dcp-size", "ep", "dp-attn")


@dataclass(frozen=True, slots=True)
class Worker:
    role: str
    index: int  # within its role
    row: dict[str, Any]  # single-node row of this worker
    env: dict[str, str]  # the worker's additional-settings (KEY=VALUE)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def gpus(self) -> int:
        return int(self.row["tp"]) * int(self.row["pp"]) * int(self.row["pcp-size"])


def worker_row(row: dict[str, Any], role: str, index: int) -> dict[str, Any]:
    spec = row[role]
    out = {k: v for k, v in row.items() if k not in ROLES and k != "disagg"}
    out.update({k: spec.get(k, 1 if k != "dp-attn" else False) for k in _WORKER_FIELDS})
    out["ep"] = spec.get("ep") or 1
    out["conc"] = row["conc"][0] if isinstance(row.get("conc"), list) else row.get("conc")
    out["exp-name"] = f"{row.get('exp-name', 'job')}-{role}{index}"
    if role == "decode":
        out["kv-offloading"] = "none"
        out.pop("kv-offload-backend", None)
    return out


def workers_of(row: dict[str, Any]) -> list[Worker]:
    """Every prefill worker, then every decode worker, of a multi-node row."""
    out = []
    for role in ROLES:
        spec = row[role]
        env = dict(s.split("=", 1) for s in spec.get("additional-settings") or [])
        for i in range(int(spec.get("num-worker", 1))):
            out.append(Worker(role, i, worker_row(row, role, i), env))
    return out


def nodes_needed(workers: list[Worker], gpus_per_node: int, cpu_only: bool,
                 spread: bool = False) -> int:
    """Each GPU worker gets whole nodes of its own (ceil(gpus / gpus per node)); CPU-only
    workers (the embedded engine) share one node unless spread one per node."""
    if cpu_only:
        return len(workers) if spread else 1
    return sum(-(-w.gpus // gpus_per_node) for w in workers)


def placement(workers: list[Worker], nodes: list[str], gpus_per_node: int,
              cpu_only: bool) -> dict[str, str]:
    """Worker name -> the node it runs on (its first node when it spans several). CPU-only
    workers go one per node when the allocation has a node for each, else all on the first."""
    if cpu_only:
        spread = len(nodes) >= len(workers)
        return {w.name: nodes[i if spread else 0] for i, w in enumerate(workers)}
    out, at = {}, 0
    for w in workers:
        out[w.name] = nodes[min(at, len(nodes) - 1)]
        at += -(-w.gpus // gpus_per_node)
    return out
