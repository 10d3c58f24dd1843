"""Where the replay client's long event-loop passes come from: one `kvbench replay` against
the paced reference server (as `replay_scale.py` runs it: server on CPU 1, client on CPU 0),
with its loop's steps timed by cause, and the loop-lag probe's worst wake-ups explained by
what ran while they waited.

Timed in the client (a child process, `--child`, the code under `--src`): every task step (a
task factory wraps each coroutine: one `send` is one step, named by its coroutine), every
`Connection.data_received`, every garbage collection (`gc.callbacks`, wall and CPU time, the
young generation's size), a few calls inside steps (prompt sync/json, record writing, the
body's `writelines`), and per timed send the parts of its lateness (the task's entry after
its due time, the connection, the byte budget's wait). Steps under 0.2 ms are not kept; they
are the "small steps, uvloop" share of a late interval. The instrumentation costs CPU (the
lag it reports is a little above an uninstrumented run's): compare runs of this script.

    python benchmarks/replay_steps.py --trace /tmp/trace-512 --src src
    python benchmarks/replay_steps.py --trace /tmp/trace-512 --src /tmp/base/src   # before

(`--trace`: a directory `replay_scale.py --out` wrote, `trace-512`.)"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import collections.abc
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from time import perf_counter_ns

MIN_NS = 200_000  # steps kept: 0.2 ms and longer
STEPS: list[tuple[int, int, str]] = []  # (start ns, ns, cause)
INNER: list[tuple[int, int, str]] = []  # calls inside steps
GCS: list[tuple[int, int, int, int, int]] = []  # (start ns, ns, generation, CPU ns, young)
PROBES: list[tuple[int, int, int]] = []  # the lag probe's (due ns, woke ns, run-queue ns)
SENDS: list[tuple[int, int, int, int]] = []  # (target, _one entered, connection ns, admit ns)


# -- the child: kvbench replay, instrumented -------------------------------------------------
class Timed(collections.abc.Coroutine):
    """A coroutine whose every step (`send`, `throw`) is timed under its name."""

    __slots__ = ("c", "label")

    def __init__(self, c) -> None:
        self.c = c
        self.label = getattr(c, "__qualname__", type(c).__name__)

    def send(self, v):
        t = perf_counter_ns()
        try:
            return self.c.send(v)
        finally:
            if (d := perf_counter_ns() - t) >= MIN_NS:
                STEPS.append((t, d, self.label))

    def throw(self, *a):
        t = perf_counter_ns()
        try:
            return self.c.throw(*a)
        finally:
            if (d := perf_counter_ns() - t) >= MIN_NS:
                STEPS.append((t, d, self.label))

    def close(self):
        return self.c.close()

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)


def _timed_call(owner, name: str, into: list, label: str | None = None) -> None:
    f = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    def w(*a, **k):
        t = perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            if (d := perf_counter_ns() - t) >= MIN_NS:
                into.append((t, d, label))
    setattr(owner, name, w)


def instrument() -> None:
    from kvbench.replay import health, http, lanes, pacing, request, runner
    from kvbench.workload import prompt

    factory = runner._loop_factory()

    def make_loop():
        loop = factory() if factory else asyncio.new_event_loop()
        loop.set_task_factory(lambda lp, coro, **k: asyncio.Task(Timed(coro), loop=lp))
        return loop
    runner._loop_factory = lambda: make_loop

    # the loop thread's time waiting on a run queue (Linux schedstat, field 2): the part of a
    # late wake-up that other processes, not the client's own work, took
    stat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def waited_ns() -> int:
        return int(os.pread(stat, 128, 0).split()[1])

    async def probe(self) -> None:
        want = int(health.PROBE_S * 1e9)
        while True:
            t0, w0 = perf_counter_ns(), waited_ns()
            await asyncio.sleep(health.PROBE_S)
            now = perf_counter_ns()
            PROBES.append((t0 + want, now, waited_ns() - w0))
            self.lag_ns.append(max(0, now - t0 - want))
    health.LoopMonitor._run = probe
    _timed_call(http.Connection, "data_received", STEPS, "Connection.data_received")
    for owner, name in [(prompt.PromptBuilder, "sync"), (prompt.PromptBuilder, "json"),
                        (request.RequestFactory, "encode"), (lanes.Lanes, "_finish"),
                        (lanes.Lanes, "_schedule")]:
        _timed_call(owner, name, INNER)

    # the parts of each timed send's lateness
    parts: dict[asyncio.Task, list[int]] = {}
    one, conn, admit = lanes.Lanes._one, lanes.Lanes._connection, pacing.PassBudget.admit

    async def one_(self, lane, key, k, turn, namespace, target, *rest):
        task = asyncio.current_task()
        parts[task] = [perf_counter_ns(), 0, 0]
        try:
            return await one(self, lane, key, k, turn, namespace, target, *rest)
        finally:
            c = parts.pop(task)
            if target:
                SENDS.append((target, c[0], c[1], c[2]))

    def timed_part(f, i):
        async def w(*a):
            t = perf_counter_ns()
            try:
                return await f(*a)
            finally:
                if (c := parts.get(asyncio.current_task())) is not None:
                    c[i] += perf_counter_ns() - t
        return w
    lanes.Lanes._one = one_
    lanes.Lanes._connection = timed_part(conn, 1)
    pacing.PassBudget.admit = timed_part(admit, 2)

    started = [0, 0, 0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            g = info["generation"]
            started[:] = [perf_counter_ns(), time.thread_time_ns(),
                          len(gc.get_objects(g)) if g < 2 else 0]
        else:
            GCS.append((started[0], perf_counter_ns() - started[0], info["generation"],
                        time.thread_time_ns() - started[1], started[2]))
    gc.callbacks.append(on_gc)


def child(out: Path, argv: list[str]) -> None:
    instrument()
    from kvbench.cli import main

    sys.argv = ["kvbench", *argv]
    try:
        main()
    except SystemExit:
        pass
    finally:
        out.write_text(json.dumps({"steps": STEPS, "inner": INNER, "gcs": GCS,
                                   "probes": PROBES, "sends": SENDS}))


# -- the parent: run it, explain it ----------------------------------------------------------
BINS_MS = (0.2, 1, 2, 5, 10, 20, 50)


def report(d: dict) -> None:
    import numpy as np

    t0 = d["probes"][0][0]  # the clock's start (the preparation left out)
    # (the first probe's due time: the steps before it are the preparation's)
    steps = sorted(s for s in d["steps"] if s[0] >= t0)
    inner = sorted(s for s in d["inner"] if s[0] >= t0)
    gcs = [(g[0], g[1], f"gc gen{g[2]}") for g in d["gcs"] if g[0] >= t0]
    lags = sorted(((w - due) / 1e6, due, w) for due, w, _ in d["probes"])
    n = len(lags)
    own = sorted(max(0.0, (w - due - q) / 1e6) for due, w, q in d["probes"])
    print(f"lag probes {n}: p50 {lags[n // 2][0]:.2f} p90 {lags[int(n * .9)][0]:.2f} "
          f"p99 {lags[int(n * .99)][0]:.2f} max {lags[-1][0]:.1f} ms; less the loop thread's "
          f"run-queue wait (the client's own): p90 {own[int(n * .9)]:.2f} p99 "
          f"{own[int(n * .99)]:.2f} max {own[-1]:.1f} ms")
    edges = [*BINS_MS, float("inf")]
    head = " ".join(f"{f'>={a:g}':>7}" for a in BINS_MS)
    for title, rows in (("task steps, reads", steps), ("calls inside steps", inner),
                        ("collections", gcs)):
        print(f"\n{title}: count by length (ms) {head}   total ms   max ms")
        total: collections.Counter = collections.Counter()
        hist: dict = collections.defaultdict(lambda: [0] * len(BINS_MS))
        top: dict = collections.defaultdict(float)
        for _, dur, cause in rows:
            ms = dur / 1e6
            if ms >= BINS_MS[0]:  # (collections shorter than that are counted in the total)
                hist[cause][bisect.bisect_right(edges, ms) - 1] += 1
            total[cause] += ms
            top[cause] = max(top[cause], ms)
        for cause, ms in total.most_common(10):
            print(f"  {cause[:34]:34} {' '.join(f'{c:7d}' for c in hist[cause])} "
                  f"{ms:9.0f} {top[cause]:8.1f}")
    worst = lags[int(n * .99):]
    late = sum(w - due for _, due, w in worst)
    within: collections.Counter = collections.Counter()
    for rows in (steps, inner, sorted(gcs)):
        starts = [r[0] for r in rows]
        for _, due, w in worst:
            for s, dur, cause in rows[bisect.bisect_left(starts, due - 200_000_000):]:
                if s > w:
                    break
                if (ov := min(w, s + dur) - max(due, s)) > 0:
                    within[cause] += ov
    print(f"\nthe worst 1% of probes ({len(worst)}, {late / 1e6:.0f} ms late in all), the time "
          "inside them by cause (calls and collections are inside steps):")
    for cause, ns in within.most_common(14):
        print(f"  {cause[:40]:40} {ns / 1e6:8.1f} ms {100 * ns / late:5.1f}%")
    if d["sends"]:
        s = np.array(d["sends"], dtype=float)
        print("\ntimed sends' lateness, ms:")
        for name, v in (("entry after due (timer, render, prompt)", (s[:, 1] - s[:, 0]) / 1e6),
                        ("opening a connection", s[:, 2] / 1e6),
                        ("waiting for the byte budget", s[:, 3] / 1e6)):
            print(f"  {name:40} p50 {np.percentile(v, 50):6.1f} p90 {np.percentile(v, 90):6.1f}"
                  f" p99 {np.percentile(v, 99):6.1f}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(Path(sys.argv[2]), sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True, help="a trace directory")
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    ap.add_argument("--sessions", type=int, default=512)
    ap.add_argument("--duration", type=float, default=30.0)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from replay_scale import paced_server

    server, url = paced_server()
    with tempfile.TemporaryDirectory(prefix="replay-steps-") as tmp:
        try:
            dump = Path(tmp) / "steps.json"
            subprocess.run(
                ["taskset", "-c", "0", sys.executable, __file__, "--child", str(dump), "replay",
                 "--url", url, "--model", "fake-model", "--trace", str(a.trace),
                 "--concurrency", str(a.sessions), "--duration", str(a.duration), "--grace",
                 "5", "--output", str(Path(tmp) / "out"), "--format", "json"],
                env={**os.environ, "PYTHONPATH": str(a.src)}, check=True,
                stdout=subprocess.DEVNULL)
        finally:
            server.terminate()
            server.wait(10)
        summary = json.loads((Path(tmp) / "out" / "summary.json").read_text())
        c = summary["client"]
        def ms(key: str) -> str:
            return "-" if c.get(key) is None else f"{c[key]:.1f} ms"

        print(f"{a.src}: load {os.getloadavg()[0]:.2f}; the client's own check: lag p99 "
              f"{ms('loop_lag_ms_p99')}, send lateness p99 {ms('send_lateness_ms_p99')}, "
              f"{c['cpu_cores']:.3f} cores, {summary['requests']['profiled']} requests")
        report(json.loads(dump.read_text()))


if __name__ == "__main__":
    main()
