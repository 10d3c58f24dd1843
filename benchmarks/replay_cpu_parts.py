"""CPU-seconds of the replay client's fixed pieces of work, for two source trees side by side:
rendering every session's first context (what `Lanes.prepare` does before the clock), and
reading plus parsing one reference-server stream (a chunked SSE response of N tokens, one
read an event, as `tests/data/bench/fast_sse_server.py` sends it). Timed in the process's own
CPU time (`time.thread_time`), interleaved, best of `--repeats`: a loaded machine slows a
run but hardly changes what it costs.

    python benchmarks/replay_cpu_parts.py --trace /tmp/trace-512 --baseline /tmp/base/src

`--trace` is a directory of kv-cache-tester JSON files (benchmarks/replay_scale.py writes one
with `--out`)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[4])
from kvbench.replay.http import Connection
from kvbench.replay.request import build_record
from kvbench.workload.loader import load_trace
from kvbench.workload.prompt import PromptBuilder, PromptStream, Vocabulary
what, n = sys.argv[2], int(sys.argv[3])
out = {}
if what == "render":
    sessions = load_trace(sorted(Path(sys.argv[5]).glob("*.json")))[:n]
    b = PromptBuilder(Vocabulary(None), "bench")
    keep, blocks = [], 0
    t = time.thread_time()
    for s in sessions:
        st = PromptStream()
        b.sync(st, s.turns[0], s.namespace)
        keep.append(st)
        blocks += st.blocks if hasattr(st, "blocks") else len(st.pieces)  # (before: a list)
    out = {"cpu_s": time.thread_time() - t, "blocks": blocks}
else:
    import fast_sse_server as S
    evs, tail = S.build_events(True, b"chatcmpl-1", b"fake-model", b"1700000000", n, 100000)
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
    reads = [head] + [S.chunk_frame(e) for e in evs] + [S.chunk_frame(tail) + b"0\r\n\r\n"]
    class Waiter:
        result = None
        def done(self): return self.result is not None
        def set_result(self, r): self.result = r
    streams = 200
    t = time.thread_time()
    for _ in range(streams):
        c = Connection(); c._waiter = Waiter()
        for r in reads:
            c.data_received(r)
        resp = c._response(c._waiter.result)
    read = time.thread_time() - t
    t = time.thread_time()
    for _ in range(streams):
        rec = build_record(resp, chat=True, keep_text=False)
    parse = time.thread_time() - t
    assert len(rec["chunk_ns"]) == n
    out = {"read_us_per_event": read / streams / n * 1e6,
           "parse_us_per_event": parse / streams / n * 1e6}
print(json.dumps(out))
"""


def child(src: Path, what: str, n: int, trace: Path | None) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, str(src), what, str(n),
                          str(REPO / "tests" / "data" / "bench"), str(trace or "")],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--baseline", type=Path, required=True, help="src/ of the code before")
    ap.add_argument("--sessions", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    best: dict[tuple[str, str], float] = {}
    for _ in range(a.repeats):
        for name, src in (("before", a.baseline), ("after", REPO / "src")):
            got = child(src, "render", a.sessions, a.trace)
            key = (name, f"render {got['blocks']:,} blocks, CPU-s")
            best[key] = min(best.get(key, float("inf")), got["cpu_s"])
            got = child(src, "stream", a.tokens, None)
            for k in ("read_us_per_event", "parse_us_per_event"):
                best[(name, k)] = min(best.get((name, k), float("inf")), got[k])
    for what in dict.fromkeys(k for _, k in best):
        b, f = best[("before", what)], best[("after", what)]
        print(f"{what:<36} before {b:8.3f}  after {f:8.3f}  after/before {f / b:5.2f}x")


if __name__ == "__main__":
    main()
