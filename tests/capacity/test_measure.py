"""`kvbench capacity --url` against a real `kvbench serve-sim` with the same settings finds
the simulator's maximum within one concurrency step, writing each step as a result.json.

The sessions carry a 32,768-token context (a miss costs ~3 s of prefill, a hit well under
the SLO) so that the client's own per-request time, stretched by the server's --time-scale,
cannot move a step across the 1.5 s TTFT objective."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from capacity.cases import PAGE, write_sessions
from fixtures.servers import free_port

from kvbench.cli import main
from kvbench.results import read_result

SRC = Path(__file__).resolve().parents[2] / "src"
CONTEXT_PAGES = 512
CONTEXT = CONTEXT_PAGES * PAGE
KV_BYTES_PER_TOKEN = 131_072  # reference-8b (test_curve.py)
TIME_SCALE = "10"


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve-sim exited: {proc.stderr.read()}")
        try:
            with opener.open(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("serve-sim did not become ready")


@pytest.mark.slow
def test_measured_maximum_is_within_one_step_of_the_simulated(tmp_path, capsys):
    traces = write_sessions(tmp_path / "t", sessions=6, turns=20, think_s=1.0,
                            context_pages=CONTEXT_PAGES)
    gpu_tokens = str(2 * CONTEXT + 1000)
    host_gb = f"{(4 * CONTEXT + 32) * KV_BYTES_PER_TOKEN / 1e9:.6f}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "serve-sim", "--model", "reference-8b",
         "--hardware", "h200", "--gpu-tokens", gpu_tokens, "--host-cache-gb", host_gb,
         "--time-scale", TIME_SCALE, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        _wait_ready(url, proc)
        out = tmp_path / "out"
        main(["capacity", "--trace", str(traces), "--model", "reference-8b", "--hardware",
              "h200", "--gpu-tokens", gpu_tokens, "--budget-gb", host_gb, "--host-gb", "0",
              "--host-gb", host_gb, "--ttft-p90-ms", "1500", "--url", url,
              "--time-scale", TIME_SCALE, "--output", str(out)])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    doc = json.loads((out / "capacity.json").read_text())
    predicted = {p["host_gb"]: p["max_sessions"] for p in doc["predicted"]}
    assert predicted == {0.0: 2, float(host_gb): 4}  # 2 contexts on GPU, 4 with the host
    [measured] = doc["measured"]
    assert measured["host_gb"] == float(host_gb)
    assert abs(measured["max_sessions"] - predicted[float(host_gb)]) <= 1
    # the search started at the prediction and stopped one step past the last pass
    concs = [s["concurrency"] for s in measured["steps"]]
    assert predicted[float(host_gb)] in concs and measured["first_failing"] in concs
    for step in measured["steps"]:
        result = read_result(Path(step["result_path"]))
        assert result.conc == step["concurrency"]
        assert result.num_requests_total == 6 * 20  # every session once, every turn
        assert (Path(step["result_path"]).parent / "records.jsonl").is_file()
    assert "measured at host" in capsys.readouterr().out
    # the dashboard of the measured steps carries the capacity panel beside the runs
    assert "p-capacity" in (out / "dashboard.html").read_text()
