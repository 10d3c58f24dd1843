"""Host memory while a GPU run goes: every 2 s, the node's /proc/meminfo (MemAvailable, Mlocked)
and, per vLLM or SGLang process (API server, EngineCore, sglang::scheduler), RSS and locked / pinned pages from
/proc/PID/status. The offload arms' growth over the resident arm is what the engine really
pinned for its CPU KV pool, to set beside the planner's projection. Every 10 s it also keeps the
latest raw /metrics text of each `vllm serve` / `sglang.launch_server` `--port N` it sees (metrics-N.txt beside OUT): the
real exposition text the metrics goldens are cut from.

    python benchmarks/gpu/vllm/memory.py OUT.jsonl
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

FIELDS = ("VmRSS", "VmLck", "VmPin", "RssAnon", "RssShmem")


def _kib(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in keys:
            out[k] = int(v.split()[0])
    return out


def _keep_metrics(out_dir: Path, procs: list[dict]) -> None:
    for port in {p["port"] for p in procs if p.get("port")}:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read()
        except OSError:
            continue
        tmp = out_dir / f".metrics-{port}.tmp"
        tmp.write_bytes(text)
        tmp.replace(out_dir / f"metrics-{port}.txt")


def _engine_processes() -> list[dict]:
    procs = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            name = (d / "comm").read_text().strip()
            if not any(k in cmd for k in ("vllm", "sglang")) and "VLLM" not in name \
                    and "EngineCore" not in name:
                continue
            argv = cmd.split()
            server = "serve" in argv or "sglang.launch_server" in argv
            port = argv[argv.index("--port") + 1] if server and "--port" in argv[:-1] else None
            procs.append({"pid": int(d.name), "comm": name, "port": port,
                          **_kib((d / "status").read_text(), FIELDS)})
        except OSError:
            continue
    return procs


def main() -> None:
    out = Path(sys.argv[1])
    with out.open("a") as f:
        tick = 0
        while True:
            meminfo = _kib(Path("/proc/meminfo").read_text(),
                           ("MemTotal", "MemAvailable", "Mlocked", "Shmem", "Cached"))
            procs = _engine_processes()
            f.write(json.dumps({"t": time.time(), "meminfo_kib": meminfo,
                                "procs": procs}) + "\n")
            f.flush()
            if tick % 5 == 4:
                _keep_metrics(out.parent, procs)
            tick += 1
            time.sleep(2)


if __name__ == "__main__":
    main()
