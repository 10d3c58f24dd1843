"""`kvbench launch --engine sim` on a real recipe row: the embedded engine starts from the
argv the sim adapter builds, answers on the URLs the LaunchSpec names, and Ctrl-C takes the
whole tree down. Needs the `serve-sim` command (the sim area); skipped where it is absent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.inferencex import launch_sim_argv
from fixtures.servers import alive, free_port

SRC = Path(__file__).resolve().parents[2] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _has_serve_sim() -> bool:
    res = subprocess.run([sys.executable, "-m", "kvbench", "serve-sim", "--help"],
                         capture_output=True, env=ENV, timeout=60)
    return res.returncode == 0


def _descendants(pid: int) -> list[int]:
    out, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                            out.append(int(entry))
                            frontier.append(int(entry))
                except OSError:
                    pass
    return out


@pytest.mark.slow
def test_launch_sim_serves_then_ctrl_c_cleans_up(tmp_path):
    if not _has_serve_sim():
        pytest.skip("kvbench serve-sim is not part of this checkout")
    port = free_port()
    argv = launch_sim_argv(tmp_path, port, ready_timeout_s=300, grace_s=3)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    try:
        deadline = time.monotonic() + 90
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "stops the server" in line or not line:
                break
        assert any(line.startswith("ready after") for line in lines), \
            "".join(lines) + proc.stderr.read() if proc.poll() is not None else "".join(lines)
        with OPENER.open(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
            models = json.loads(r.read())
        assert models["data"][0]["id"] == "Qwen/Qwen3.5-397B-A17B-FP8"
        with OPENER.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert "sglang:hicache_host_total_tokens" in metrics
        tree = _descendants(proc.pid)
        assert tree, "the launch should have a serve-sim child"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert [p for p in tree if alive(p)] == []
    command = json.loads((tmp_path / "command.json").read_text())
    assert command["argv"][1:4] == ["-m", "kvbench", "serve-sim"]
    assert "--host-cache-gb" in command["argv"]
    assert (tmp_path / "plan.json").exists()
