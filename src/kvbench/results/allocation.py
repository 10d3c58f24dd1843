"""What an SGLang server allocated, read from its log, beside the plan of the same job.

The planner projects every pool a job's engine allocates: the device KV pool and a hybrid
model's state slots (`plan.json` gpu-kv-tokens, gpu-state-slots) and each host pool of HiCache
(host-pools: the target KV, the Mamba/GDN states, the MTP draft's sidecar). SGLang logs each
of them once at start-up; `engine_allocation` reads those lines, `plan_vs_allocated` sets them
beside the plan, pool by pool, with the difference. Log formats are SGLang 0.5.17's:

- scheduler: `max_total_num_tokens=N, ..., max_running_requests=R, ...`
  (srt/managers/scheduler.py:1068-1076)
- device KV: `KV Cache is allocated. dtype: D, #tokens: N, K size: X GB, V size: Y GB`, or
  `..., KV size: X GB` for an MLA pool's one latent buffer (MLATokenToKVPool), in GiB
  (srt/mem_cache/memory_pool.py:1655-1681, GB = 1024**3 at :103; the target's pool first, an
  MTP draft's after it: MLATokenToKVPool logs at :3956-3958)
- device states: `Mamba Cache is allocated. max_mamba_cache_size: S, conv_state size: XGB,
  ssm_state size: YGB [intermediate_ssm_state_cache size: ZGB intermediate_conv_window_cache
  size: WGB]` (memory_pool.py:788-814)
- host KV: `Allocating kv|draft hierarchical KV host pool: N tokens, X GB host memory.`
  (srt/mem_cache/pool_host/base.py:153-158; MHA and MLA host pools alike, pool_host/mla.py:
  54-83, the draft's from mem_cache/kv_cache_builder.py:104-121)
- host states: `Allocating X GB host memory for hierarchical Mamba cache (layout=L).`
  (srt/mem_cache/memory_pool_host.py:134-138; SGLang prints no slot count, so the state pool
  is compared in bytes at the log's 10 MB resolution)

`vllm_allocation` reads a vLLM 0.26 server log (file:line in the vllm-0.26.0 wheel):

- device KV: `GPU KV cache size: N tokens` and `Maximum concurrency for L tokens per request:
  C x` (v1/core/kv_cache_utils.py:2177-2182; N = C x L, for a hybrid model over its shared
  block pool, plan/vllm_kv.py)
- native CPU offload: `Allocating N CPU tensors...` (v1/kv_offload/cpu/gpu_worker.py:480, one
  pinned tensor per KV cache tensor; the block count is not logged, the pool shows in the
  EngineCore's RSS) and `KV offloading: EAGLE/MTP draft attention groups [..] detected`
  (distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:194-199)
- simple CPU offload: `SimpleCPUOffloadWorker: T unique GPU KV tensors, allocating B CPU blocks
  (X GB)` (v1/simple_kv_offload/worker.py:148-154; X in GiB, B x bytes per block / 1024**3)"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_SCHED = re.compile(r"max_total_num_tokens=(\d+),.*?max_running_requests=(\d+)")
_KV = re.compile(r"KV Cache is allocated\. dtype: (\S+), #tokens: (\d+), "
                 r"(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)")
_MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), "
                    r"conv_state size: ([\d.]+)GB, ssm_state size: ([\d.]+)GB"
                    r"(?: intermediate_ssm_state_cache size: ([\d.]+)GB)?"
                    r"(?: intermediate_conv_window_cache size: ([\d.]+)GB)?")
_HOST_KV = re.compile(r"Allocating (\w+) hierarchical KV host pool: (\d+) tokens, "
                      r"([\d.]+) GB host memory")
_HOST_MAMBA = re.compile(r"Allocating ([\d.]+) GB host memory for hierarchical Mamba cache")
_VLLM_KV = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_VLLM_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_VLLM_CPU_TENSORS = re.compile(r"Allocating (\d+) CPU tensors\.\.\.")
_VLLM_EAGLE_GROUPS = re.compile(r"KV offloading: EAGLE/MTP draft attention groups \[([\d, ]*)\]")
_VLLM_SIMPLE = re.compile(r"SimpleCPUOffloadWorker: (\d+) unique GPU KV tensors, allocating "
                          r"(\d+) CPU blocks \(([\d.]+) GB\)")
GB = 1e9  # SGLang prints decimal GB (x / 1e9) for the host pools and GiB-free GB on device
GIB = 1 << 30  # and GiB for the device KV pools (memory_pool.py:103)
_LOG_GB = 0.005  # the host pools' GB are printed with two decimals
_LOG_KV_GIB = 0.01  # the device K and V sizes, two decimals each


@dataclass(slots=True)
class EngineAllocation:
    """Pools SGLang logged at start-up (None: the line was not in the log)."""

    device_kv_tokens: int | None = None
    max_running_requests: int | None = None
    # every `KV Cache is allocated` line: (tokens, K + V GB as printed), target first
    device_kv: list[tuple[int, float]] = field(default_factory=list)
    state_slots: int | None = None
    state_device_gb: dict[str, float] = field(default_factory=dict)
    # host pools: name -> (tokens or None, GB as printed)
    host: dict[str, tuple[int | None, float]] = field(default_factory=dict)
    # vLLM: its max concurrency at max_model_len, the CPU offload's blocks and tensors, the
    # native connector's draft groups
    max_concurrency: float | None = None
    max_model_len: int | None = None
    cpu_blocks: int | None = None
    cpu_tensors: int | None = None
    draft_groups: int | None = None


def engine_allocation(log_text: str) -> EngineAllocation:
    out = EngineAllocation()
    for line in log_text.splitlines():
        if m := _SCHED.search(line):
            out.device_kv_tokens, out.max_running_requests = int(m[1]), int(m[2])
        elif m := _KV.search(line):
            gib = float(m[5]) if m[5] is not None else float(m[3]) + float(m[4])
            out.device_kv.append((int(m[2]), gib))
        elif m := _MAMBA.search(line):
            out.state_slots = int(m[1])
            out.state_device_gb = {k: float(v) for k, v in zip(
                ("conv", "ssm", "intermediate_ssm", "intermediate_conv_window"),
                m.groups()[1:], strict=True) if v is not None}
        elif m := _HOST_KV.search(line):
            out.host["draft_kv" if m[1] == "draft" else m[1]] = (int(m[2]), float(m[3]))
        elif m := _HOST_MAMBA.search(line):
            out.host["mamba"] = (None, float(m[1]))
    return out


def vllm_allocation(log_text: str) -> EngineAllocation:
    """The pools a vLLM 0.26 server logged (formats in the module docstring)."""
    out = EngineAllocation()
    for line in log_text.splitlines():
        if m := _VLLM_KV.search(line):
            out.device_kv_tokens = int(m[1].replace(",", ""))
        elif m := _VLLM_CONCURRENCY.search(line):
            out.max_model_len, out.max_concurrency = int(m[1].replace(",", "")), float(m[2])
        elif m := _VLLM_CPU_TENSORS.search(line):
            out.cpu_tensors = int(m[1])
        elif m := _VLLM_EAGLE_GROUPS.search(line):
            out.draft_groups = len([g for g in m[1].split(",") if g.strip()])
        elif m := _VLLM_SIMPLE.search(line):
            out.cpu_blocks = int(m[2])
            out.host["kv_offload"] = (None, float(m[3]) * GIB / GB)
    return out


@dataclass(frozen=True, slots=True)
class PoolRow:
    pool: str
    unit: str
    planned: float
    allocated: float
    tolerance: float = 0.0  # the log's own rounding, in the row's unit

    @property
    def diff(self) -> float:
        return self.allocated - self.planned

    @property
    def diff_pct(self) -> float | None:
        return 100.0 * self.diff / self.planned if self.planned else None

    @property
    def within(self) -> float:
        """|difference| beyond the log's rounding, as a fraction of the plan."""
        excess = max(0.0, abs(self.diff) - self.tolerance)
        return excess / self.planned if self.planned else float(excess > 0)


def plan_vs_allocated(plan: dict[str, Any], alloc: EngineAllocation) -> list[PoolRow]:
    """One row per pool both sides know: device KV tokens and state slots, then each host
    pool (tokens where SGLang prints them, else decimal GB)."""
    rows: list[PoolRow] = []
    if alloc.device_kv_tokens is not None and plan.get("gpu-kv-tokens"):
        rows.append(PoolRow("device kv", "tokens", plan["gpu-kv-tokens"],
                            alloc.device_kv_tokens))
    rows += _device_kv_rows(plan, alloc)
    page = plan.get("page-size-tokens") or 0
    cpu_blocks = (plan.get("host-kv-tokens") or 0) // page if page else 0  # vLLM's planned
    if alloc.cpu_blocks is not None and cpu_blocks:
        rows.append(PoolRow("host kv_offload", "blocks", cpu_blocks, alloc.cpu_blocks))
    if alloc.state_slots is not None and plan.get("gpu-state-slots"):
        rows.append(PoolRow("device mamba", "slots", plan["gpu-state-slots"], alloc.state_slots))
    for pool in plan.get("host-pools", []):
        got = alloc.host.get(pool["name"])
        if got is None:
            continue
        tokens, gb = got
        if tokens is not None and pool.get("units"):
            rows.append(PoolRow(f"host {pool['name']}", "tokens", pool["units"], tokens))
        elif alloc.cpu_blocks is not None:  # vLLM: what holds whole blocks, one short at most
            configured = (pool.get("configured-gb") or 0) * GB or pool["bytes-per-rank"]
            block_gb = configured / cpu_blocks / GB if cpu_blocks else 0.0
            rows.append(PoolRow(f"host {pool['name']} size", "GB", configured / GB, gb,
                                tolerance=_LOG_GB * GIB / GB + block_gb))
        else:
            rows.append(PoolRow(f"host {pool['name']}", "GB", pool["bytes-per-rank"] / GB, gb,
                                tolerance=_LOG_GB))
    return rows


def _device_kv_rows(plan: dict[str, Any], alloc: EngineAllocation) -> list[PoolRow]:
    """The device KV pools one by one: the MTP draft's token count (SGLang 0.5.17 gives a
    path-less draft the target's, plan/gpu.py LAST_DRAFT_OUTSIDE_BUDGET_RELEASE), and each
    pool's GiB against its tokens plus the padded page times the plan's bytes per token
    (`unit-bytes` of the host pool of the same name: a HiCache plan), which checks the
    per-token shape (an MLA latent, K and V heads) apart from the token count."""
    rows: list[PoolRow] = []
    unit = {p["name"]: p.get("unit-bytes") for p in plan.get("host-pools", [])}
    page = plan.get("page-size-tokens") or 1
    for i, (tokens, gib) in enumerate(alloc.device_kv[:2]):
        name = "kv" if i == 0 else "draft_kv"
        if i and plan.get("gpu-kv-tokens"):
            rows.append(PoolRow(f"device {name}", "tokens", plan["gpu-kv-tokens"], tokens))
        if unit.get(name):
            planned_gib = (tokens + page) * unit[name] / GIB
            rows.append(PoolRow(f"device {name} size", "GiB", planned_gib, gib,
                                tolerance=_LOG_KV_GIB))
    return rows


def format_rows(rows: list[PoolRow]) -> list[str]:
    out = [f"{'pool':<20} {'unit':<7} {'planned':>16} {'allocated':>16} {'diff':>14} "
           f"{'diff %':>8}"]
    for r in rows:
        pct = "" if r.diff_pct is None else f"{r.diff_pct:+.2f}"
        fmt = (lambda v: f"{v:,.0f}") if r.unit in ("tokens", "slots", "blocks") else (
            lambda v: f"{v:,.2f}")
        out.append(f"{r.pool:<20} {r.unit:<7} {fmt(r.planned):>16} {fmt(r.allocated):>16} "
                   f"{fmt(r.diff):>14} {pct:>8}")
    return out


SCHEDULER_COMM = "sglang::schedul"  # the scheduler's process name as /proc truncates it
VLLM_ENGINE_COMM = "VLLM::EngineCor"  # vLLM's engine core, which pins the CPU offload pool


def peak_rss_bytes(samples: list[dict[str, Any]], comm: str = SCHEDULER_COMM) -> int | None:
    """The largest VmRSS of the processes named `comm` in a host-memory sampler's records
    (benchmarks/gpu/vllm/memory.py: one JSON object per sample, `procs` with VmRSS in KiB)."""
    peaks = [p["VmRSS"] for s in samples for p in s.get("procs", [])
             if p.get("comm") == comm and p.get("VmRSS") is not None]
    return max(peaks) * 1024 if peaks else None


def rss_growth_row(plan: dict[str, Any], offload: list[dict[str, Any]],
                   resident: list[dict[str, Any]], comm: str = SCHEDULER_COMM) -> PoolRow | None:
    """The scheduler's (`comm`'s) peak RSS with the host pools less the resident arm's, against
    the plan's projected host footprint (the pinned pools), in decimal GB."""
    with_pools, without = peak_rss_bytes(offload, comm), peak_rss_bytes(resident, comm)
    if with_pools is None or without is None or not plan.get("projected-host-bytes"):
        return None
    return PoolRow("scheduler RSS" if comm == SCHEDULER_COMM else f"{comm} RSS", "GB",
                   plan["projected-host-bytes"] / GB, (with_pools - without) / GB)
