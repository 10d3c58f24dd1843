"""An SGLang PD-disaggregation row (`sglang-disagg`) run for real on the local two-slurmd
Slurm (tests/fixtures/slurm.py): one allocation, each worker an srun step on the node of its
plan's placement running the command line the adapter built, checked by the installed
SGLang's own parser before the embedded engine serves in its place (`--stand-in sim`); the
router's command line checked by sglang-router's parser, the PD router started once both
workers answer, the replay through it, a result, and no step left behind (on success and
when a worker's command line is rejected)."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import REPO
from fixtures.slurm import interrupt_row, run_row

from kvbench.files import read_json
from kvbench.matrix import Selection, select_jobs
from kvbench.sweep import build_specs
from kvbench.sweep.quickstart import quickstart_options

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).with_name("data") / "sglang-disagg-qwen3.yaml"
RUNNERS = REPO / "examples" / "runners.yaml"


def specs_of(recipe: Path, profile: str | None = "none"):
    """The row's job; `profile` None: the row's own default (AgentX: an InferenceX row)."""
    options = quickstart_options(time_scale=100.0).model_copy(
        update={"max_requests": 6, "stand_in": "sim", "profile": profile})
    jobs = select_jobs(Selection(config_files=(recipe,), runner_config=RUNNERS))
    assert [j.exp_name for j in jobs] == ["qwen3-8b_p1x1_d1x1_conc2_kvdram-hicache"]
    return build_specs(jobs, options, runner_config=RUNNERS)


def run_on_slurm(cluster, recipe: Path, results: Path, profile: str | None = "none"):
    run = run_row(cluster, specs_of(recipe, profile), results)
    return run.outcome, run.allocation, run.job_dir, run.queue


def test_sglang_disagg_row_runs_on_two_slurm_nodes(slurm_cluster_2n, tmp_path):
    """The row's own default workload: an InferenceX row replays as AgentX, with the
    embedded engine standing in (the result records both, and is never a submission)."""
    outcome, allocation, job_dir, queue = run_on_slurm(slurm_cluster_2n, RECIPE, tmp_path,
                                                       profile=None)
    log = (allocation / "task.log").read_text() if (allocation / "task.log").exists() else ""
    assert outcome.status == "ok", (outcome, log, slurm_cluster_2n.logs())
    script = (allocation / "allocation.sbatch").read_text().splitlines()
    # one allocation: a node per one-GPU worker (runners.yaml: 8 GPUs a node, the plan's
    # placement puts each worker on a node of its own), a task per worker
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks=2", "#SBATCH --gres=gpu:1"} <= set(script)
    result = read_json(job_dir / "result.json")
    assert result["status"] == "ok" and result["num_requests_successful"] == 6
    # AgentX's warm-up (a t* request and 10 one-token requests per lane) before the 6
    summary = read_json(job_dir / "summary.json")
    assert summary["run"]["warmup_per_lane"] == 10 and summary["requests"]["warmup"] >= 20
    assert result["workload"]["profile"] == "agentx-v1"
    assert summary["run"]["embedded_engine"] is True  # the sweep says so: --stand-in sim
    assert "engine" in {r.split(":")[0] for r in result["validity"]["submission"]["reasons"]}
    workers = read_json(job_dir / "workers.json")
    assert [(w["name"], w["node"]) for w in workers] == [("prefill-0", "kvnode1"),
                                                          ("decode-0", "kvnode2")]
    for w in workers:
        role = w["role"]
        # its own srun step on its node, with its plan's GPUs
        assert w["step"][:2] == ["srun", "--overlap"]
        assert f"--nodelist={w['node']}" in w["step"] and "--gres=gpu:1" in w["step"]
        argv = w["argv"][w["argv"].index("--gres=gpu:1") + 1:]
        assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
        assert argv[argv.index("--disaggregation-mode") + 1] == role
        # SGLang's own parser read the command line that would have run
        check = read_json(Path(w["engine-check"]))
        assert check["ok"] and check["argv"] == argv
        assert check["args"]["disaggregation_mode"] == role
        assert check["args"]["disaggregation_transfer_backend"] == "nixl"
        assert check["args"]["port"] == urlsplit(w["url"]).port
        assert check["args"]["enable_hierarchical_cache"] == (role == "prefill")
        assert check["args"]["page_size"] == w["plan"]["page-size-tokens"]
        assert check["args"]["mem_fraction_static"] == w["plan"]["mem-fraction-static"]
        # the embedded engine served on the same port, sized by the same plan
        serve = w["serve-argv"]
        assert serve[serve.index("--port") + 1] == str(urlsplit(w["url"]).port)
        assert serve[serve.index("--page-size") + 1] == str(w["plan"]["page-size-tokens"])
        assert ("--host-cache-gb" in serve) == (role == "prefill")
        # teardown: nothing answers on the worker's port once the job has its result
        url = urlsplit(w["url"])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((url.hostname, url.port), timeout=2).close()
    router = read_json(job_dir / "router" / "router-check.json")
    assert router["ok"] and router["args"]["pd_disaggregation"]
    assert router["args"]["prefill"] == [[workers[0]["url"]]]
    assert router["args"]["decode"] == [[workers[1]["url"]]]
    assert router["args"]["policy"] == "consistent_hashing"
    ran = read_json(job_dir / "router" / "router-argv.json")["ran"]
    assert ran[ran.index("--prefill") + 1] == workers[0]["url"]
    assert ran[ran.index("--decode") + 1] == workers[1]["url"]
    assert queue == ""  # every step and the allocation are gone


def test_a_rejected_worker_command_line_fails_the_row_and_tears_down(slurm_cluster_2n,
                                                                     tmp_path):
    data = yaml.safe_load(RECIPE.read_text())
    next(iter(data.values()))["kv-p2p-transfer"] = "carrier-pigeon"
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    outcome, _, job_dir, queue = run_on_slurm(slurm_cluster_2n, recipe, tmp_path / "results")
    assert outcome.status == "failed" and outcome.phase == "ready", outcome
    failure = read_json(job_dir / "result.json")["failure"]
    log = (job_dir / "workers" / "prefill-0" / "server.log").read_text()
    assert "sglang rejects the command line" in log and "carrier-pigeon" in log, log
    assert "prefill-0" in failure["reason"], failure
    assert not (job_dir / "router" / "server.log").exists()  # no router without its workers
    assert queue == ""


def test_a_signal_to_the_batch_step_stops_every_worker_step(slurm_cluster_2n, tmp_path):
    """SIGTERM to `kvbench run-job` in the middle of the replay (Slurm's own preemption and
    `scancel --signal=TERM --batch` deliver it there): the router and both srun steps are
    stopped, the allocation ends, no worker answers any more."""
    options = quickstart_options(time_scale=1.0).model_copy(
        update={"max_requests": 10_000, "stand_in": "sim", "profile": "none"})
    jobs = select_jobs(Selection(config_files=(RECIPE,), runner_config=RUNNERS))
    specs = build_specs(jobs, options, runner_config=RUNNERS)
    run = interrupt_row(slurm_cluster_2n, specs, tmp_path)
    outcome, workers_file = run.outcome, run.job_dir / "workers.json"
    assert outcome.status == "failed"  # interrupted: no result, the row runs again on resume
    # kvbench's own unwind ran (not only Slurm's end of the allocation): it stopped the
    # router and the srun steps, each srun terminating its step
    log = (run.allocation / "task.log").read_text()
    assert "interrupted: job" in log and "no result written" in log, log
    assert "Received terminate signal" in (
        tmp_path / specs[0].dir_name / "router" / "server.log").read_text()
    for w in read_json(workers_file):
        url = urlsplit(w["url"])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((url.hostname, url.port), timeout=2).close()
    assert run.queue == ""
