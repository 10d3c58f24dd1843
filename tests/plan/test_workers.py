"""`plan_workers`: every worker of a disaggregated row planned on its own and placed on the
row's nodes; a node whose workers need more than it has refuses the row (real rows)."""

from __future__ import annotations

from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.matrix import Job, Selection, select_jobs
from kvbench.plan.workers import plan_workers
from kvbench.recipe import load_runners
from kvbench.units import GB


def _row(exp_name: str) -> Job:
    return next(j for j in select_jobs(Selection(
        config_files=CONFIGS, runner_config=RUNNERS, frameworks=("sglang-disagg",)))
        if j.exp_name == exp_name)


def test_prefill_offloads_within_its_node_budget_and_decode_keeps_kv_on_the_gpu():
    planned = plan_workers(_row("dsv4_p1x8ep8dpa_d1x8ep8dpa_conc96_kvdram-hicache"),
                           load_runners(RUNNERS))
    prefill, decode = planned.workers
    assert (prefill.role, prefill.nodes, decode.role, decode.nodes) == (
        "prefill", (0,), "decode", (1,))
    assert planned.within_budget and planned.gpus_per_node == 8
    assert prefill.plan.backend == "hicache" and prefill.plan.host_pools
    assert prefill.plan.projected_host_bytes <= 2399 * GB
    # no single-node launcher sizes a disaggregated worker: the budget sizing,
    # floor10(per-rank budget / the device-pool estimate; SGLang's pools come from the memory
    # free after its CUDA context, plan/gpu.py SGLANG_PRE_LOAD_RESERVE_BYTES)
    assert prefill.plan.sizing == "budget"
    assert prefill.plan.engine_args[prefill.plan.engine_args.index("--hicache-ratio") + 1] \
        == "2.3"
    assert decode.plan.backend is None and not decode.plan.host_pools
    # each role's settings rule (plan/data/settings.yaml, role: [prefill, decode])
    assert {w.plan.mem_fraction_static for w in planned.workers} == {0.85}
    assert {w.plan.page_size_tokens for w in planned.workers} == {256}
    assert planned.nodes[0].gpus == planned.nodes[1].gpus == 8


def test_two_prefill_workers_on_one_node_are_refused_with_the_node_arithmetic():
    job = _row("dsv4_p1x8_d1x8_conc8_kvdram-hicache")
    packed = Job(config_key=job.config_key, scenario=job.scenario, row={
        **job.row, "prefill": {**job.row["prefill"], "num-worker": 2}})  # PREFILL_NODES=1
    planned = plan_workers(packed)
    assert [(w.name, w.nodes, w.slot) for w in planned.workers] == [
        ("prefill 0", (0,), 0), ("prefill 1", (0,), 1), ("decode 0", (1,), 0)]
    assert not planned.within_budget
    assert planned.errors[0] == "node 0 (prefill 0, prefill 1): 16 GPUs > 8 per node"
    host = planned.nodes[0].host_bytes
    assert host == 2 * planned.workers[0].plan.projected_host_bytes > 2399 * GB
    assert planned.errors[1] == (f"node 0 (prefill 0, prefill 1): projected host "
                                 f"{host / GB:,.0f} GB > 2,399 GB budget (row "
                                 "total-cpu-dram-gb, per node)")
