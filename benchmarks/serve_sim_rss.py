"""serve-sim's RSS after each of N 256-session replays on one server: what it keeps between
runs (docs/reliability.md, "serve-sim and replay under abuse"). A measurement, not a test:
RSS moves with the allocator and whatever else the machine runs, so the suite asserts only
that nothing is held after each replay (tests/sim/test_server_abuse.py).

Run: PYTHONPATH=src python benchmarks/serve_sim_rss.py [--runs 4] [--glibc-defaults]
Each run: `kvbench replay --trace synthetic --sessions 256 --concurrency 64 --max-requests
256 --time-scale 100` (~15M prompt tokens in 57.7 MB of request bodies). By default glibc is
held to one arena and bodies over 64 KiB go to mmap (mallopt(3): M_ARENA_MAX,
M_MMAP_THRESHOLD), so RSS follows what the server keeps rather than its arenas' slack."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> str:
    with OPENER.open(url, timeout=10) as r:
        return r.read().decode()


def _idle(url: str) -> bool:
    return all(line.split()[-1] in ("0", "0.0") for line in _get(url + "/metrics").splitlines()
               if line.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs")))


def _wait(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("serve-sim did not become ready/idle")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--glibc-defaults", action="store_true")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": SRC, "http_proxy": "", "https_proxy": ""}
    if not a.glibc_defaults:
        env |= {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "kvbench", "serve-sim", "--port", str(port),
                             "--time-scale", "100"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    rss = []
    try:
        _wait(lambda: _get(url + "/health") is not None, 60)
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.runs):
                out = subprocess.run(
                    [sys.executable, "-m", "kvbench", "replay", "--url", url, "--trace",
                     "synthetic", "--sessions", "256", "--concurrency", "64", "--max-requests",
                     "256", "--think-time-scale", "0", "--max-tokens-cap", "16",
                     "--time-scale", "100", "--output", f"{tmp}/run{i}", "--format", "json"],
                    capture_output=True, text=True, env=env, timeout=600)
                if out.returncode:
                    raise SystemExit(out.stderr[-2000:])
                _wait(lambda: _idle(url), 30)
                rss.append(_rss_kib(proc.pid))
                print(f"run {i + 1}: RSS {rss[-1]:,} KiB "
                      f"({json.loads(out.stdout)['requests']['errors']} errors)", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    if len(rss) >= 4:  # the first run warms caches and allocators
        print(f"growth over runs 2..{len(rss)}: "
              f"{(rss[-1] - rss[1]) / (len(rss) - 2):,.0f} KiB a run")


if __name__ == "__main__":
    main()
