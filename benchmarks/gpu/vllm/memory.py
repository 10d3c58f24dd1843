"""Host memory while a GPU run goes: every 2 s, the node's /proc/meminfo (MemAvailable, Mlocked)
and, per vLLM process (API server, EngineCore), RSS and locked / pinned pages from
/proc/PID/status. The offload arms' growth over the resident arm is what the engine really
pinned for its CPU KV pool, to set beside the planner's projection.

    python benchmarks/gpu/vllm/memory.py OUT.jsonl
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

FIELDS = ("VmRSS", "VmLck", "VmPin", "RssAnon", "RssShmem")


def _kib(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in keys:
            out[k] = int(v.split()[0])
    return out


def _engine_processes() -> list[dict]:
    procs = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            name = (d / "comm").read_text().strip()
            if "vllm" not in cmd and "VLLM" not in name and "EngineCore" not in name:
                continue
            procs.append({"pid": int(d.name), "comm": name,
                          **_kib((d / "status").read_text(), FIELDS)})
        except OSError:
            continue
    return procs


def main() -> None:
    out = Path(sys.argv[1])
    with out.open("a") as f:
        while True:
            meminfo = _kib(Path("/proc/meminfo").read_text(),
                           ("MemTotal", "MemAvailable", "Mlocked", "Shmem", "Cached"))
            f.write(json.dumps({"t": time.time(), "meminfo_kib": meminfo,
                                "procs": _engine_processes()}) + "\n")
            f.flush()
            time.sleep(2)


if __name__ == "__main__":
    main()
