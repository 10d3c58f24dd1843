"""Mooncake rows launch with a managed `mooncake_master`: the config kvbench writes passes
Mooncake's own loader (`mooncake.mooncake_config.MooncakeConfig`, the real package, installed
by .ci/install), names this job's master, and the master runs before the engine and stops
after it (the real `mooncake_master` binary)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.servers import free_port, job_port

from kvbench.engines import get_adapter
from kvbench.errors import EngineError
from kvbench.launch.process import ServerProcess
from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job

mooncake_config = pytest.importorskip("mooncake.mooncake_config",
                                      reason=".ci/install installs mooncake-transfer-engine")


def _mooncake_jobs():
    jobs = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                 frameworks=("vllm",), single_node=True))
    return [j for j in jobs if (j.row.get("kv-offload-backend") or {}).get("name") == "mooncake"]


def test_real_mooncake_rows_write_a_config_mooncake_loads(tmp_path):
    jobs = _mooncake_jobs()
    assert len(jobs) >= 10  # kimik3 b300 and minimaxm3 h100/h200 rows
    for job in jobs:
        plan = plan_job(job)
        spec = get_adapter("vllm").build(job, plan, port=30000, work_dir=tmp_path)
        path = tmp_path / "mooncake.json"
        path.write_text(spec.files["mooncake.json"])
        loaded = mooncake_config.MooncakeConfig.from_file(str(path))
        segment = next(p for p in plan.host_pools if p.name == "mooncake_segment")
        assert loaded.master_server_address == "127.0.0.1:42000"  # client port + 12,000
        assert loaded.global_segment_size == segment.bytes_per_rank
        assert loaded.local_buffer_size == 4 * 2**30  # "4GB", as the launchers write it
        assert json.loads(spec.files["mooncake.json"])["mode"] == "embedded"
        [master] = spec.services
        # the Kimi-K3 B300 launcher evicts at 95% (kimik3_fp4_b300_vllm_mtp.sh), the rest at 80%
        high = 0.95 if job.row["model-prefix"] == "kimik3" else 0.8
        assert master.argv == ["mooncake_master", "--port=42000", "--metrics_port=42001",
                               f"--eviction_high_watermark_ratio={high}", "--eviction_ratio=0.1"]
        assert master.ready_url == "http://127.0.0.1:42001/metrics"


def test_a_client_port_that_leaves_no_master_port_is_refused():
    job = _mooncake_jobs()[0]
    with pytest.raises(EngineError, match="port 60000 \\+ 12,001 = 72,001 is above 65535"):
        get_adapter("vllm").build(job, plan_job(job), port=60000)


def test_the_loader_rejects_a_config_without_the_master(tmp_path):
    """What kvbench wrote before: the same keys without master_server_address."""
    job = _mooncake_jobs()[0]
    config = dict(plan_job(job).engine_config["mooncake.json"])
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="master_server_address"):
        mooncake_config.MooncakeConfig.from_file(str(path))


ENGINE = """
import http.server, socket, sys
# the engine needs its master: refuse to start if it is not up yet
socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).close()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.skipif(shutil.which("mooncake_master") is None, reason="needs mooncake_master")
def test_master_runs_before_the_engine_and_stops_after_it(tmp_path):
    job = _mooncake_jobs()[0]
    port = job_port()  # its derived ports (master +12000) fit below 65536
    spec = get_adapter("vllm").build(job, plan_job(job), port=port, work_dir=tmp_path)
    engine_port = free_port()
    master_port = port + 12_000
    spec = spec.model_copy(update={
        "argv": [sys.executable, "-c", ENGINE, str(engine_port), str(master_port)],
        "health_url": f"http://127.0.0.1:{engine_port}/health", "env": {}})
    server = ServerProcess.for_spec(spec, log_path=tmp_path / "server.log",
                                    ready_timeout_s=300, grace_s=5)
    with server:
        server.wait_ready()
        # the master holds its RPC port and answers on its admin port while the engine runs
        socket.create_connection(("127.0.0.1", master_port), timeout=2).close()
        with urllib.request.urlopen(spec.services[0].ready_url, timeout=5) as r:
            assert r.status == 200
    log = (tmp_path / "mooncake-master.log").read_text()
    high = 0.95 if job.row["model-prefix"] == "kimik3" else 0.8
    assert "eviction_ratio=0.1" in log and f"eviction_high_watermark_ratio={high}" in log
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", master_port), timeout=1).close()
        except OSError:
            break  # stopped with the job
        time.sleep(0.2)
    else:
        pytest.fail("mooncake_master still listens after the job ended")
    assert json.loads(Path(tmp_path / "mooncake-master.command.json").read_text())
