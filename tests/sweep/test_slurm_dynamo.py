"""A Dynamo row of the catalog run for real on the local two-slurmd Slurm
(tests/fixtures/slurm.py): the dynamo-vllm 1P1D MiniMax-M3 row on GB300
(minimaxm3_p1x2_d1x4_conc20_kvdram-mooncake: a TP2 prefill and a TP4 decode worker, KV over
NIXL and a Mooncake store), rendered from its srt-slurm recipe in the checkout of its master
config (tests/data/inferencex/benchmarks/multi_node/srt-slurm-recipes/). One allocation of the
recipe's two nodes; each worker process an srun step on the node srtctl's placement gives it,
with its GPUs, running the command line srtctl would start (`python3 -m dynamo.vllm ...`,
`{node<rank>}` filled in), checked by Dynamo's own parser (its flags, then vLLM's engine
arguments: ai-dynamo dynamo/vllm/args.py) before the embedded engine serves in its place,
sized by the worker's plan; the frontend's command line checked by `dynamo.frontend`'s parser,
sglang-router standing in for it once both workers answer; the replay through it, a result,
and no step left behind, on success, on a rejected command line and on SIGTERM. And a row whose
recipe puts SGLang's own router in front (`frontend.type: sglang`, the Qwen3.5 GB300 TP2
aggregated row): `python3 -m sglang.launch_server` checked by SGLang's parser, the router's
`--worker-urls` command line by sglang-router's."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from fixtures.inferencex import INFERENCEX, RUNNERS
from fixtures.slurm import interrupt_row, run_row

from kvbench.files import read_json
from kvbench.matrix import Selection, select_jobs
from kvbench.recipe.layout import MULTI_NODE_RECIPES
from kvbench.sweep import build_specs
from kvbench.sweep.quickstart import quickstart_options

pytestmark = pytest.mark.slow

KEY = "minimaxm3-fp4-gb300-dynamo-vllm-agentic-mtp-disagg"
EXP = "minimaxm3_p1x2_d1x4_conc20_kvdram-mooncake"
RECIPE = "vllm/minimax-m3/agentic/gb300-fp4/1p1d-tp2-tp4-c20-c24-agentic.yaml"
MASTER = INFERENCEX / "nvidia-master.yaml"


SGLANG_KEY = "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg"
SGLANG_EXP = "qwen3.5_p1x2_d0x2_conc1_kvdram-hicache"


def specs_of(master: Path, *, time_scale: float = 100.0, max_requests: int = 6,
             key: str = KEY, exp: str = EXP):
    # about the executor and the stand-in: kvbench's own replay, not the row's AgentX one
    options = quickstart_options(time_scale=time_scale).model_copy(
        update={"max_requests": max_requests, "stand_in": "sim", "profile": "none"})
    jobs = [j for j in select_jobs(Selection(config_files=(master,), runner_config=RUNNERS,
                                             config_keys=(key,)))
            if j.exp_name == exp]
    assert len(jobs) == 1
    return build_specs(jobs, options, runner_config=RUNNERS)


def _refused(url: str) -> None:
    parts = urlsplit(url)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()


def test_dynamo_vllm_row_runs_on_two_slurm_nodes(slurm_cluster_2n, tmp_path):
    run = run_row(slurm_cluster_2n, specs_of(MASTER), tmp_path)
    log = (run.allocation / "task.log").read_text() if (run.allocation / "task.log").exists() \
        else ""
    assert run.outcome.status == "ok", (run.outcome, log, slurm_cluster_2n.logs())
    script = (run.allocation / "allocation.sbatch").read_text().splitlines()
    # the recipe's allocation: 2 GB300 nodes (4 GPUs each), a task per worker process, the
    # most GPUs one node's workers take (the TP4 decode's 4)
    assert {"#SBATCH --nodes=2", "#SBATCH --ntasks=2", "#SBATCH --gres=gpu:4"} <= set(script)
    job = read_json(run.job_dir / "job.json")
    assert job["config_file"] == str(MASTER)  # the checkout the recipe came from
    result = read_json(run.job_dir / "result.json")
    assert result["status"] == "ok" and result["num_requests_successful"] == 6
    workers = read_json(run.job_dir / "workers.json")
    assert [(w["name"], w["node"], w["gpus"]) for w in workers] == [
        ("prefill-0", "kvnode1", 2), ("decode-0", "kvnode2", 4)]
    for w in workers:
        role = w["role"]
        gres = f"--gres=gpu:{w['gpus']}"
        # its own srun step on its node, with the GPUs srtctl gives the process
        assert w["step"][:2] == ["srun", "--overlap"]
        assert f"--nodelist={w['node']}" in w["step"] and gres in w["step"]
        argv = w["argv"][w["argv"].index(gres) + 1:]
        assert argv[:3] == ["python3", "-m", "dynamo.vllm"]
        assert argv[argv.index("--disaggregation-mode") + 1] == role
        assert not any("{node" in a for a in argv)  # placeholders filled with the node
        # Dynamo's own parser read the command line that would have run
        check = read_json(Path(w["engine-check"]))
        assert check["ok"] and check["argv"] == argv and check["engine"] == "dynamo-vllm"
        assert check["args"]["disaggregation_mode"] == role
        assert check["args"]["tensor_parallel_size"] == (2 if role == "prefill" else 4)
        assert check["args"]["kv_connector"] == "MultiConnector"  # NIXL + Mooncake store
        assert check["args"]["request_plane"] == "tcp"
        assert check["args"]["served_model_name"] == "nvidia/MiniMax-M3-NVFP4"
        # srtctl's environment, the node's address in place of {node<rank>}
        addr = urlsplit(w["url"]).hostname
        assert w["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == addr
        assert w["env"]["ETCD_ENDPOINTS"].startswith("http://") and "{" not in \
            w["env"]["ETCD_ENDPOINTS"]
        # the embedded engine served on the worker's port, sized by the worker's plan, under
        # the frontend's model name
        serve = w["serve-argv"]
        assert serve[serve.index("--port") + 1] == str(urlsplit(w["url"]).port)
        assert serve[serve.index("--page-size") + 1] == str(w["plan"]["page-size-tokens"])
        assert serve[serve.index("--served-model-name") + 1] == "nvidia/MiniMax-M3-NVFP4"
        _refused(w["url"])  # teardown: nothing answers on the worker's port any more
    store = json.loads((run.job_dir / "workers" / "prefill-0" /
                        "mooncake_store_config.json").read_text())
    assert store["master_server_address"].endswith(":8700") and "{" not in \
        store["master_server_address"]
    # the frontend: Dynamo's parser accepted its command line; sglang-router stood in for it
    front = read_json(run.job_dir / "router" / "router-check.json")
    assert front["ok"] and front["engine"] == "dynamo-frontend"
    assert front["argv"][:3] == ["python3", "-m", "dynamo.frontend"]
    assert front["args"]["router_mode"] == "least-loaded"
    ran = read_json(run.job_dir / "router" / "router-argv.json")
    assert front["args"]["http_port"] == int(urlsplit(result_url(ran)).port)
    assert ran["ran"][ran["ran"].index("--prefill") + 1] == workers[0]["url"]
    assert ran["ran"][ran["ran"].index("--decode") + 1] == workers[1]["url"]
    # Dynamo's control plane serves its own workers only: listed, not started
    assert [(s["name"], s["started"]) for s in ran["services"]] == [
        ("etcd", False), ("nats", False), ("mooncake-master", False)]
    assert run.queue == ""  # every step and the allocation are gone


def test_a_row_behind_sglangs_own_router_runs_on_slurm(slurm_cluster_2n, tmp_path):
    run = run_row(slurm_cluster_2n, specs_of(MASTER, key=SGLANG_KEY, exp=SGLANG_EXP), tmp_path)
    assert run.outcome.status == "ok", (run.outcome, slurm_cluster_2n.logs())
    script = (run.allocation / "allocation.sbatch").read_text().splitlines()
    assert {"#SBATCH --nodes=1", "#SBATCH --gres=gpu:2"} <= set(script)  # one TP2 worker
    assert read_json(run.job_dir / "result.json")["num_requests_successful"] == 6
    (w,) = read_json(run.job_dir / "workers.json")
    assert (w["name"], w["node"], w["gpus"]) == ("agg-0", "kvnode1", 2)
    argv = w["argv"][w["argv"].index("--gres=gpu:2") + 1:]
    # SGLang's own server, no Dynamo in it: no --request-plane, no --dump-config-to
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--request-plane" not in argv and "--dump-config-to" not in argv
    check = read_json(Path(w["engine-check"]))
    assert check["ok"] and check["engine"] == "sglang" and check["argv"] == argv
    assert check["args"]["tp_size"] == 2 and check["args"]["port"] == \
        urlsplit(w["url"]).port
    # the router's command line names the worker, checked by sglang-router's parser
    front = read_json(run.job_dir / "router" / "router-check.json")
    assert front["ok"] and front["engine"] == "sglang-router"
    assert front["argv"][:3] == ["python", "-m", "sglang_router.launch_router"]
    ran = read_json(run.job_dir / "router" / "router-argv.json")
    assert ran["argv"][ran["argv"].index("--worker-urls") + 1] == w["url"]
    assert ran["ran"][ran["ran"].index("--worker-urls") + 1] == w["url"]
    # srtctl starts etcd and NATS for this front too (do_sweep.py): listed, not started
    assert [(s["name"], s["started"]) for s in ran["services"]] == [
        ("etcd", False), ("nats", False)]
    _refused(w["url"])
    assert run.queue == ""


def result_url(ran: dict) -> str:
    port = ran["ran"][ran["ran"].index("--port") + 1]
    return f"http://127.0.0.1:{port}"


def test_a_rejected_dynamo_command_line_fails_the_row_and_tears_down(slurm_cluster_2n,
                                                                     tmp_path):
    """A checkout whose copy of the recipe gives the prefill worker a flag neither Dynamo nor
    vLLM defines: Dynamo's parser rejects it on its node, the row fails before any frontend,
    and no step is left."""
    root = tmp_path / "InferenceX"
    (root / "configs").mkdir(parents=True)
    shutil.copy(MASTER, root / "configs" / "nvidia-master.yaml")
    recipe = root / MULTI_NODE_RECIPES / RECIPE
    recipe.parent.mkdir(parents=True)
    data = yaml.safe_load((INFERENCEX / MULTI_NODE_RECIPES / RECIPE).read_text())
    data["backend"]["vllm_config"]["prefill"]["carrier-pigeon"] = True
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    run = run_row(slurm_cluster_2n, specs_of(root / "configs" / "nvidia-master.yaml"),
                  tmp_path / "results")
    assert run.outcome.status == "failed" and run.outcome.phase == "ready", run.outcome
    failure = read_json(run.job_dir / "result.json")["failure"]
    log = (run.job_dir / "workers" / "prefill-0" / "server.log").read_text()
    assert "dynamo-vllm rejects the command line" in log and "--carrier-pigeon" in log, log
    assert "prefill-0" in failure["reason"], failure
    assert not (run.job_dir / "router" / "server.log").exists()  # no front without workers
    assert run.queue == ""


def test_a_signal_to_the_batch_step_stops_every_dynamo_worker_step(slurm_cluster_2n,
                                                                   tmp_path):
    """SIGTERM to `kvbench run-job` in the middle of the replay: the stand-in frontend and
    both worker steps are stopped, the allocation ends, no worker answers any more."""
    specs = specs_of(MASTER, time_scale=1.0, max_requests=10_000)
    run = interrupt_row(slurm_cluster_2n, specs, tmp_path)
    assert run.outcome.status == "failed"  # interrupted: no result, the row runs again
    log = (run.allocation / "task.log").read_text()
    assert "interrupted: job" in log and "no result written" in log, log
    assert "Received terminate signal" in (run.job_dir / "router" / "server.log").read_text()
    for w in read_json(run.job_dir / "workers.json"):
        _refused(w["url"])
    assert run.queue == ""
