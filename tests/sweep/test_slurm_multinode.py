"""A prefill/decode row on the real local Slurm (tests/fixtures/slurm.py): one allocation,
each worker an srun step running the embedded engine, sglang-router in PD mode in front,
a result at the end; on one node (every worker there) and on two slurmds on localhost (a
worker per node, engine patches applied on each worker's node)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import REPO

from kvbench.files import read_json
from kvbench.matrix import Selection, select_jobs
from kvbench.sweep import SlurmExecutor, build_specs, run_local
from kvbench.sweep.quickstart import quickstart_options

pytestmark = pytest.mark.slow

RECIPE = REPO / "examples" / "disagg.yaml"
RUNNERS = REPO / "examples" / "runners.yaml"


def disagg_specs(recipe: Path = RECIPE):
    options = quickstart_options(time_scale=100.0).model_copy(update={"max_requests": 6})
    jobs = select_jobs(Selection(config_files=(recipe,), runner_config=RUNNERS))
    assert [j.exp_name for j in jobs] == ["qwen3-8b_p1x1_d1x1_conc2_kvdram-hicache"]
    return build_specs(jobs, options, runner_config=RUNNERS)


def check_result(job_dir: Path) -> dict:
    result = read_json(job_dir / "result.json")
    assert result["status"] == "ok", result.get("failure")
    assert result["is_multinode"] and result["num_gpus"] == 2
    assert result["num_requests_successful"] == 6
    workers = read_json(job_dir / "workers.json")
    assert [w["name"] for w in workers] == ["prefill-0", "decode-0"]
    plan = read_json(job_dir / "plan.json")
    by_worker = {w["worker"]: w["plan"] for w in plan["workers"]}
    # the prefill worker holds the row's HiCache arm, the decode worker serves from HBM
    assert by_worker["prefill-0"]["host-kv-tokens"] > 0
    assert by_worker["decode-0"]["host-kv-tokens"] == 0
    prefill_argv = workers[0]["argv"]
    assert "--host-cache-gb" in prefill_argv and "--host-cache-gb" not in workers[1]["argv"]
    for name in ("prefill-0", "decode-0"):
        assert read_json(job_dir / "workers" / name / "command.json")["argv"] == \
            next(w["argv"] for w in workers if w["name"] == name)
    # teardown: no worker answers any more once the job has its result
    for w in workers:
        url = urlsplit(w["url"])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((url.hostname, url.port), timeout=2).close()
    router = read_json(job_dir / "router" / "command.json")
    assert router["argv"][router["argv"].index("--prefill") + 1] == workers[0]["url"]
    assert router["argv"][router["argv"].index("--decode") + 1] == workers[1]["url"]
    return workers


def slurm_env(cluster, *paths: Path) -> dict[str, str]:
    return {"SLURM_CONF": str(cluster.conf),
            "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO / "src"),
                                           os.environ.get("PYTHONPATH", "")])}


def test_two_worker_row_runs_on_slurm_and_writes_a_result(slurm_cluster, tmp_path):
    env = slurm_env(slurm_cluster)
    ex = SlurmExecutor(env=env, poll_interval_s=0.5, timeout_s=240)
    specs = disagg_specs()
    [outcome] = ex.run(specs, tmp_path)
    allocation = next((tmp_path / ".kvbench" / "slurm").iterdir())
    log = (allocation / "task.log").read_text() if (allocation / "task.log").exists() else ""
    assert outcome.status == "ok", (outcome, log, slurm_cluster.logs())
    assert len(ex.submitted) == 1
    script = (allocation / "allocation.sbatch").read_text().splitlines()
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks=2" in script
    workers = check_result(tmp_path / specs[0].dir_name)
    # each worker ran as an srun step on the allocation's node
    for w in workers:
        assert w["argv"][:2] == ["srun", "--overlap"] and w["node"] == "kvnode"
    # teardown: nothing of the job is left in the queue
    queue = subprocess.run(["squeue", "-h", "-j", ex.submitted[0]], capture_output=True,
                           text=True, env={**os.environ, **env})
    assert queue.stdout.strip() == ""


def test_the_same_row_runs_locally_without_slurm(tmp_path):
    specs = disagg_specs()
    [outcome] = run_local(specs, tmp_path)
    assert outcome.status == "ok", outcome
    workers = check_result(tmp_path / specs[0].dir_name)
    assert all(w["node"] == "localhost" and w["argv"][0] != "srun" for w in workers)


def test_workers_on_two_slurm_nodes_with_patches_on_each(slurm_cluster_2n, tmp_path):
    import shutil

    import yaml

    # the disagg recipe with the sglang#34560 patch on a package that stands in for the
    # engine (the real sglang 0.5.16 source), importable by the batch step and the workers
    site = tmp_path / "site"
    target = site / "kvbench_fixture_engine" / "srt" / "configs" / "model_config.py"
    target.parent.mkdir(parents=True)
    (site / "kvbench_fixture_engine" / "__init__.py").write_text("")
    shutil.copyfile(REPO / "tests" / "data" / "sglang" / "model_config-0.5.16.excerpt.txt",
                    target)
    data = yaml.safe_load(RECIPE.read_text())
    next(iter(data.values()))["patches"] = [{
        "id": "sglang-34560", "file": "kvbench_fixture_engine/srt/configs/model_config.py",
        "anchor": 'self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"\n'
                  "self.hf_config.num_nextn_predict_layers = 1\n",
        "replacement": 'self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"\n'
                       "self.hf_config.num_nextn_predict_layers = 1\n"
                       "self.hf_text_config.num_nextn_predict_layers = 1\n",
        "arms": ["hicache"]}]
    recipe = tmp_path / "disagg-patched.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))

    env = slurm_env(slurm_cluster_2n, site)
    ex = SlurmExecutor(env=env, poll_interval_s=0.5, timeout_s=240, spread_cpu_workers=True)
    specs = disagg_specs(recipe)
    [outcome] = ex.run(specs, tmp_path / "results")
    allocation = next((tmp_path / "results" / ".kvbench" / "slurm").iterdir())
    log = (allocation / "task.log").read_text() if (allocation / "task.log").exists() else ""
    assert outcome.status == "ok", (outcome, log, slurm_cluster_2n.logs())
    script = (allocation / "allocation.sbatch").read_text().splitlines()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks=2" in script
    job_dir = tmp_path / "results" / specs[0].dir_name
    workers = check_result(job_dir)
    assert [(w["name"], w["node"]) for w in workers] == [("prefill-0", "kvnode1"),
                                                          ("decode-0", "kvnode2")]
    # the batch step runs on kvnode1: the prefill worker's patch is applied there, the
    # decode worker's by an srun step on kvnode2 (the same file here: found applied)
    result = read_json(job_dir / "result.json")
    assert [(p["worker"], p["status"]) for p in result["engine_patches"]] == \
        [("prefill-0", "applied"), ("decode-0", "already-applied")]
    assert "self.hf_text_config.num_nextn_predict_layers = 1" in target.read_text()
