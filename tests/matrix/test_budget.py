"""The DRAM budget, checked against the reference's computed table (inferencex.md §2.3)."""

from __future__ import annotations

import pytest

from kvbench.errors import MatrixError
from kvbench.matrix import MAX_AVAILABLE_CPU_DRAM_MIB, dram_budget_gb
from kvbench.matrix.budget import agentic_budget_gb, replica_gpus_on_node
from kvbench.recipe import Runners

B300, B200, H100, H200, MI300X, GB200 = 2_964_436, 3_095_781, 2_063_837, 1_471_356, \
    2_321_924, 860_160


@pytest.mark.parametrize("mib,gpus_per_node,expected", [
    (B300, 8, [299, 599, 1199, 2399]),
    (B200, 8, [299, 599, 1199, 2399]),
    (H100, 8, [216, 432, 865, 1731]),
    (H200, 8, [154, 308, 617, 1234]),
    (MI300X, 8, [243, 486, 973, 1947]),
    (GB200, 4, [180, 360, 721]),
])
def test_budget_table_at_080(mib, gpus_per_node, expected):
    got = [dram_budget_gb(mib, 0.80, gpus, gpus_per_node) for gpus in (1, 2, 4, 8)
           if gpus <= gpus_per_node]
    assert got == expected


def test_cap_applies_before_utilization():
    # b300 and b200 report more than the 3 TB cap, so both give the capped figure.
    assert MAX_AVAILABLE_CPU_DRAM_MIB == 2_861_022
    assert dram_budget_gb(B300, 1.0, 8, 8) == dram_budget_gb(10**9, 1.0, 8, 8) == 2999


@pytest.mark.parametrize("util,thousandths", [(0.683, 683), (0.086, 86), (0.14, 140)])
def test_back_solved_utilizations_floor_exactly(util, thousandths):
    # Utilizations in the catalog are back-solved decimals; the budget is their exact floor.
    exact = 2_861_022 * 1_048_576 * thousandths // 1000 // 10**9
    assert dram_budget_gb(B300, util, 8, 8) == exact


@pytest.mark.parametrize("worker,expected", [
    ({"tp": 4}, 4), ({"tp": 8}, 8), ({"tp": 16}, 8), ({"tp": 4, "pp": 2}, 8),
    ({"tp": 2, "pcp-size": 2}, 4),
])
def test_replica_share_of_a_node(worker, expected):
    assert replica_gpus_on_node(worker, 8) == expected


@pytest.mark.parametrize("worker,message", [
    ({"tp": 12}, "spans several nodes but is not a multiple of gpus-per-node=8"),
    ({"tp": 3}, "does not divide gpus-per-node=8 evenly"),
])
def test_misaligned_replicas_are_refused(worker, message):
    with pytest.raises(MatrixError, match=message):
        replica_gpus_on_node(worker, 8)


RUNNERS = Runners.model_validate({
    "labels": {"cluster:b300-nv": ["b300-nv_00"]},
    "hardware": {"cluster:b300-nv": {"available-cpu-dram-mib": B300, "gpus-per-node": 8}},
})


def test_row_budget_only_for_dram():
    block = {"dram-utilization": 0.8}
    assert agentic_budget_gb(block, {"tp": 4, "kv-offloading": "none"}, "cluster:b300-nv",
                             RUNNERS) == 0
    assert agentic_budget_gb(block, {"tp": 4, "kv-offloading": "dram"}, "cluster:b300-nv",
                             RUNNERS) == 1199


def test_multinode_budget_uses_prefill_only():
    block = {"dram-utilization": 0.8}
    row = {"kv-offloading": "dram", "prefill": {"tp": 4}, "decode": {"tp": 16}}
    assert agentic_budget_gb(block, row, "cluster:b300-nv", RUNNERS) == 1199


def test_tp_beyond_node_is_refused():
    with pytest.raises(MatrixError, match="needs 16 GPUs but runner 'cluster:b300-nv' has "
                                          "gpus-per-node=8"):
        agentic_budget_gb({"dram-utilization": 0.8}, {"tp": 8, "pp": 2, "kv-offloading": "dram"},
                          "cluster:b300-nv", RUNNERS)


def test_unknown_hardware_lists_known_keys():
    from kvbench.errors import RecipeError

    with pytest.raises(RecipeError, match="known: cluster:b300-nv"):
        agentic_budget_gb({"dram-utilization": 0.8}, {"tp": 8, "kv-offloading": "dram"},
                          "cluster:h100-dgxc", RUNNERS)
