"""The host-DRAM budget of one agentic server: the node's capped DRAM times the block's
utilization times the share of the node's GPUs the server uses."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kvbench.errors import MatrixError

if TYPE_CHECKING:
    from kvbench.recipe.facts import RunnerFacts

BYTES_PER_MIB = 1024 * 1024
BYTES_PER_GB = 1_000_000_000
# The reference caps the usable host memory at 3 TB (decimal), expressed in MiB.
MAX_AVAILABLE_CPU_DRAM_MIB = 2_861_022


def dram_budget_gb(available_mib: int, utilization: float, gpus: int, gpus_per_node: int) -> int:
    """floor(min(available, cap) MiB * utilization * gpus / gpus_per_node) in decimal GB.

    Decimal arithmetic on str(utilization), in the reference's order, so the integer equals
    the reference generator's by construction. TP4 on an 8-GPU node with 2,964,436 MiB at
    0.80 gives 1199."""
    available = min(available_mib, MAX_AVAILABLE_CPU_DRAM_MIB)
    proportional = (
        Decimal(available) * BYTES_PER_MIB * Decimal(str(utilization)) * gpus / gpus_per_node
    )
    return int(proportional / BYTES_PER_GB)


def replica_gpus_on_node(worker: dict[str, Any], gpus_per_node: int) -> int:
    """GPUs one worker replica occupies on one node. A replica larger than a node must fill
    whole nodes; a smaller one must tile the node evenly."""
    gpus = worker["tp"] * worker.get("pp", 1) * worker.get("pcp-size", 1)
    if gpus > gpus_per_node:
        if gpus % gpus_per_node:
            raise MatrixError(
                f"worker tp*pp*pcp-size={gpus} spans several nodes but is not a multiple of "
                f"gpus-per-node={gpus_per_node}"
            )
        return gpus_per_node
    if gpus_per_node % gpus:
        raise MatrixError(
            f"worker tp*pp*pcp-size={gpus} does not divide gpus-per-node={gpus_per_node} evenly"
        )
    return gpus


def row_gpus(row: dict[str, Any]) -> int:
    """GPUs of a single-node row: tp * pp * pcp-size."""
    return row["tp"] * row.get("pp", 1) * row.get("pcp-size", 1)


def check_fits_node(row: dict[str, Any], runner: str, per_node: int) -> None:
    """A single-node row's GPUs (tp*pp*pcp-size) and expert parallelism fit on one node."""
    gpus = row_gpus(row)
    if gpus > per_node:
        raise MatrixError(
            f"tp={row['tp']} with pp={row.get('pp', 1)} and pcp-size={row.get('pcp-size', 1)} "
            f"needs {gpus} GPUs but runner {runner!r} has gpus-per-node={per_node}")
    ep = row.get("ep") or 1
    if ep > per_node:
        raise MatrixError(f"ep={ep} spreads experts over more GPUs than runner {runner!r} has "
                          f"on its one node (gpus-per-node={per_node})")


def agentic_budget_gb(block: dict[str, Any], row: dict[str, Any], runner: str,
                      runners: RunnerFacts) -> int:
    """`total-cpu-dram-gb` of an agentic row (raw YAML dicts); 0 unless it offloads to DRAM.
    Multi-node rows are budgeted by their aggregated `worker`, else their prefill worker:
    only prefill offloads today."""
    # single-node rows fit their node whether or not they offload (resident rows too)
    if "prefill" not in row and "worker" not in row and (
            per_node := runners.gpus_per_node(runner)) is not None:
        check_fits_node(row, runner, per_node)
    if row.get("kv-offloading", "none") != "dram":
        return 0
    hardware = runners.hardware_for(runner)
    per_node = hardware.gpus_per_node
    if "worker" in row:
        gpus = replica_gpus_on_node(row["worker"], per_node)
    elif "prefill" in row:
        gpus = replica_gpus_on_node(row["prefill"], per_node)
    else:
        gpus = row_gpus(row)
        check_fits_node(row, runner, per_node)
    return dram_budget_gb(
        hardware.available_cpu_dram_mib, block["dram-utilization"], gpus, per_node
    )
