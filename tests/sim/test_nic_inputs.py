"""The disaggregation model's network input: every hardware profile's NIC bandwidth with its
source (no 'assumption'), and `simulate-jobs` listing, beside each disaggregated row, the
predicted prefill -> decode KV transfer and the NIC bandwidth (and source) it ran at."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.hardware import hardware_names, load_hardware

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "inferencex"
KEY = "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp"


@pytest.mark.parametrize("name", hardware_names())
def test_every_profile_states_its_nic_with_a_source(name):
    hw = load_hardware(name)
    nic = hw.kv_transfer_bytes_per_s
    assert nic is not None, name
    assert "assum" not in nic.source.lower(), nic.source
    # the figure in the source is the value: '<N> GB/s per direction'
    stated = {float(g) for g in re.findall(r"(\d+) GB/s per direction", nic.source)}
    line = nic.value if hw.kind == "datasheet" else nic.value / 0.8
    assert line / 1e9 in stated, (name, nic.value, nic.source)
    if hw.kind == "measured":  # what calibrate could not measure is said, not guessed
        assert "not measured" in nic.source and "unknown" in nic.source


def _simulate(fmt: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvbench", "simulate-jobs", "--config-files",
         str(DATA / "amd-master.yaml"), "--runner-config", str(DATA / "runners.yaml"),
         "--workers", "1", "--config-keys", KEY, "--max-jobs", "2", "--max-requests", "40",
         "--bounds", "once",
         "--trace", str(REPO / "src" / "kvbench" / "workload" / "data" / "claude-code"),
         "--format", fmt],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "400"})


def test_simulate_jobs_names_the_nic_and_predicts_the_transfer():
    res = _simulate("json")
    assert res.returncode == 0, res.stderr
    entries = json.loads(res.stdout)
    hw = load_hardware("mi355x")
    assert len(entries) == 2
    for e in entries:
        nic = e["kv-transfer"]
        assert nic == {"hardware": "mi355x", "line-bytes-per-s": 50e9,
                       "link-fraction": hw.achievable_link_fraction,
                       "bytes-per-s": 50e9 * hw.achievable_link_fraction,
                       "source": hw.kv_transfer_bytes_per_s.source}
        for arm in e["arms"].values():
            assert arm["setup"]["disagg"]["transfer_bytes_per_s"] == nic["bytes-per-s"]
            xfer = arm["kv_transfer_ms"]
            # at least the smallest prompt's KV over the NIC; p99 >= p50
            assert 0 < xfer["p50"] <= xfer["p99"]
            assert arm["kv_transfer_tokens"] > 0


def test_simulate_jobs_table_lists_the_prediction_beside_each_multinode_row():
    res = _simulate("table")
    assert res.returncode == 0, res.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines()
            if line.startswith("│")]
    jobs = [r for r in rows if r[0]]
    assert len(jobs) == 2
    for r in rows:
        p50, p99 = (float(x) for x in r[13].split(" / "))
        assert 0 < p50 <= p99
    assert all(r[12] == "1 + 1" for r in jobs)  # one prefill, one decode rank (dp-attn off)
    footer = [ln for ln in res.stdout.splitlines() if ln.startswith("kv xfer on mi355x")]
    assert len(footer) == 1 and "40.0 GB/s per GPU per direction" in footer[0]
    assert "Pollara 400" in res.stdout and "sglang-mori-distributed" in res.stdout
