"""The allocation of an sglang-disagg row is the adapter's placement: as many nodes as its
workers' plans place them on (`plan_workers`, `<ROLE>_NODES=` packing included), as many
GPUs per node as the fullest node holds, a task per worker."""

from __future__ import annotations

from conftest import REPO
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.engines import get_adapter
from kvbench.matrix import Selection, select_jobs
from kvbench.plan.workers import plan_workers
from kvbench.recipe import load_runners
from kvbench.sweep import SlurmExecutor, build_specs
from kvbench.sweep.quickstart import quickstart_options

ROW = REPO / "tests" / "sweep" / "data" / "sglang-disagg-qwen3.yaml"
LOCAL_RUNNERS = REPO / "examples" / "runners.yaml"


def test_every_sglang_disagg_rows_allocation_is_its_placement(tmp_path):
    jobs = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                 frameworks=("sglang-disagg",)))
    assert jobs
    runners = load_runners(RUNNERS)
    specs = build_specs(jobs, quickstart_options(time_scale=1.0), runner_config=RUNNERS)
    for job, spec in zip(jobs, specs, strict=True):
        lines = SlurmExecutor().multinode_script(spec, tmp_path, tmp_path).splitlines()
        launch = get_adapter("sglang-disagg").build(job, None, port=30000, runners=runners)
        placed = plan_workers(job, runners)
        assert f"#SBATCH --nodes={max(launch.nodes, job.row.get('node-count') or 0)}" in lines
        assert f"#SBATCH --ntasks={len(launch.workers)}" in lines
        gres = max(u.gpus for u in placed.nodes.values())
        assert f"#SBATCH --gres=gpu:{gres}" in lines and "#SBATCH --exclusive" in lines
        # every worker's node is inside the allocation
        assert max(n for w in launch.workers for n in w.nodes) < launch.nodes


def test_a_role_packed_onto_one_node_gets_that_node_once(tmp_path):
    """Two TP-4 prefill workers on `PREFILL_NODES=1` share a node (ports one apart), the
    TP-8 decode gets the next: 2 nodes, 8 GPUs each, 3 tasks."""
    import yaml

    data = yaml.safe_load(ROW.read_text())
    space = next(iter(data.values()))["scenarios"]["agentic-coding"][0]["search-space"][0]
    space["prefill"].update({"num-worker": 2, "tp": 4, "additional-settings": ["PREFILL_NODES=1"]})
    space["decode"].update({"tp": 8})
    recipe = tmp_path / "packed.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    [job] = select_jobs(Selection(config_files=(recipe,), runner_config=LOCAL_RUNNERS))
    [spec] = build_specs([job], quickstart_options(time_scale=1.0),
                         runner_config=LOCAL_RUNNERS)
    lines = SlurmExecutor().multinode_script(spec, tmp_path, tmp_path).splitlines()
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks=3", "#SBATCH --gres=gpu:8"} <= set(lines)
    launch = get_adapter("sglang-disagg").build(job, None, port=30000,
                                                runners=load_runners(LOCAL_RUNNERS))
    assert [(w.role, w.nodes, w.url) for w in launch.workers] == [
        ("prefill", [0], "http://{node0}:30001"), ("prefill", [0], "http://{node0}:30002"),
        ("decode", [1], "http://{node1}:30001")]
