"""Client speed on one core: kvbench's replay client vs the best peer on PyPI (AIPerf), side by
side against the reference fast SSE server (`tests/data/bench/fast_sse_server.py`).

The server is pinned to CPU 1 and the client to CPU 0 (`taskset`). For each cell (inter-chunk
delay x concurrency) the server runs fresh with `--stats-log`; the delivered rate is the median
per-second growth of the server's content-chunk counter over the steady part of the run (what
the client drained), and the server's own inter-chunk gaps are the truth the client's per-chunk
gaps are compared with.

    python benchmarks/replay_client.py --duration 10 --cells 0:256,0.02:256,0.02:64 \
        --aiperf /tmp/aiperf-venv/bin/aiperf --tokenizer /tmp/replay-tiny

Past one core (issue 27 item 11): `--workers-list 1,2` runs kvbench with each number of replay
worker processes (`kvbench replay --workers N`); N workers are pinned to CPUs 0..N-1, so on a
two-core machine two workers share CPU 1 with the server:

    python benchmarks/replay_client.py --duration 10 --cells 0.02:256,0.02:1024,0.02:2048 \
        --workers-list 1,2 --aiperf /tmp/aiperf-venv/bin/aiperf --tokenizer /tmp/replay-tiny

Prints one JSON line per run and a ratio table. The peer runs only when --aiperf is given
(install it in its own venv: `python -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip
install aiperf==0.13.0`)."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "data" / "bench" / "fast_sse_server.py"
OUTPUT_TOKENS = 256


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data: bytes | None = None) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as r:
        return json.load(r)


def start_server(delay: float, log: Path, uvloop: bool = False) -> tuple[subprocess.Popen, str]:
    port = _port()
    proc = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, str(SERVER), "--port", str(port), "--delay",
         str(delay), "--default-tokens", str(OUTPUT_TOKENS), "--stats-log", str(log),
         *(["--uvloop"] if uvloop else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            _get(url + "/health")
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("fast_sse_server did not start")


def steady_rate(log: Path, skip_s: int = 2) -> float:
    """Chunks per second over the log intervals with traffic, minus the ramp-up and the tail:
    total chunks over total time (a starved server logs late, so each interval is divided by
    its own length, and a stall followed by a catch-up burst is not rewarded)."""
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    spans = [(b["chunks"] - a["chunks"], b["t"] - a["t"]) for a, b in itertools.pairwise(rows)]
    busy = [s for s in spans if s[0] > 0]
    core = busy[skip_s:-1] if len(busy) > skip_s + 2 else busy
    chunks, secs = sum(c for c, _ in core), sum(t for _, t in core)
    return chunks / secs if secs > 0 else 0.0


def client_cpus(workers: int) -> str:
    """CPUs 0..workers-1 (of those this process may use): one worker keeps CPU 0 to itself."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0, 1]
    return ",".join(str(c) for c in cpus[:max(1, workers)])


def run_kvbench(url: str, conc: int, duration: float, out: Path, workers: int = 1) -> dict:
    cmd = ["taskset", "-c", client_cpus(workers), sys.executable, __file__, "--client-only",
           "--url", url, "--conc", str(conc), "--duration", str(duration), "--out", str(out),
           "--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration + 120)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def client_only(args: argparse.Namespace) -> None:
    """Runs inside the pinned child. CPU is the whole replay's (sending, reading, parsing,
    records, statistics) over its wall time; chunks are every content chunk received."""
    from kvbench.files import read_jsonl
    from kvbench.replay import ReplayConfig, run_replay
    from kvbench.workload import SyntheticSpec

    # ~100-token prompts, 256 output tokens, no think time: the peers' benchmark shape
    # every turn asks for OUTPUT_TOKENS (max_tokens as sent, so usage checks hold: a reply
    # longer than the max_tokens asked is an impossible usage, a failed request)
    spec = SyntheticSpec(num_sessions=args.conc, scale=0.002, output_mu=20.0, output_sigma=0.0,
                         max_output_tokens=OUTPUT_TOKENS, max_turns=8)
    cfg = ReplayConfig(url=args.url, model="fake-model", concurrency=args.conc,
                       workers=args.workers, duration_s=args.duration, synthetic=spec,
                       think_time_scale=0, output_dir=Path(args.out),
                       grace_s=OUTPUT_TOKENS * 0.02 + 2, ignore_eos=False)
    w0, c0 = time.perf_counter(), time.process_time()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = run_replay(cfg)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the workers' CPU (reaped children) with this process's own (the parent's merge)
    wall_s = time.perf_counter() - w0
    cpu_s = (time.process_time() - c0 + kids.ru_utime + kids.ru_stime - kids0.ru_utime
             - kids0.ru_stime)
    chunks, gaps = 0, []
    for r in read_jsonl(Path(args.out) / "records.jsonl"):
        ts = r["chunk_ns"]
        chunks += len(ts)
        gaps.extend((b - a) / 1e6 for a, b in itertools.pairwise(ts))
    gaps.sort()
    print(json.dumps({
        "workers": args.workers, "client_cpu_cores": cpu_s / wall_s,
        "chunks_per_cpu_s": chunks / cpu_s,
        "requests": summary["requests"]["profiled"], "errors": summary["requests"]["errors"],
        "itl_mean_ms": summary["itl_ms"]["mean"], "itl_p99_ms": summary["itl_ms"]["p99"],
        "chunk_gap_p99_ms": gaps[int(0.99 * (len(gaps) - 1))] if gaps else None,
        "saturated": summary["client"]["saturated"],
        "loop_lag_ms_p99": summary["client"]["loop_lag_ms_p99"],
        "send_lateness_ms_p99": summary["client"]["send_lateness_ms_p99"],
    }))


def aiperf_startup_cpu_s(aiperf: str, tokenizer: str, tmp: Path) -> float:
    """AIPerf's fixed CPU cost (spawning its services, loading the tokenizer, building the
    dataset): the CPU of a one-request run, subtracted to get its steady per-chunk cost."""
    log = tmp / "startup.log"
    proc, url = start_server(0.0, log)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(["taskset", "-c", "0", aiperf, "profile", "--model", "fake-model", "--url",
                        url, "--endpoint-type", "chat", "--streaming", "--concurrency", "1",
                        "--request-count", "1", "--isl", "100", "--osl", str(OUTPUT_TOKENS),
                        "--tokenizer", tokenizer, "--workers-max", "8",
                        "--use-server-token-count", "--ui-type", "none", "--artifact-dir",
                        str(tmp / "startup")], capture_output=True, check=True, timeout=300)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        proc.terminate()
        proc.wait(10)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def run_aiperf(aiperf: str, tokenizer: str, url: str, conc: int, duration: float,
               out: Path, startup_cpu_s: float) -> dict:
    cmd = ["taskset", "-c", "0", aiperf, "profile", "--model", "fake-model", "--url", url,
           "--endpoint-type", "chat", "--streaming", "--concurrency", str(conc),
           "--benchmark-duration", str(duration), "--isl", "100",
           "--osl", str(OUTPUT_TOKENS), "--tokenizer", tokenizer,
           "--workers-max", "8", "--use-server-token-count", "--ui-type", "none",
           "--artifact-dir", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 300,
                         env={k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if res.returncode != 0:
        return {"error": (res.stderr or res.stdout)[-1500:]}
    export = json.loads((out / "profile_export_aiperf.json").read_text())
    icl, itl = export["inter_chunk_latency"], export["inter_token_latency"]
    chunks = icl["count"] + export["request_count"]["avg"]
    # AIPerf's process tree (controller, workers, record processors) inherits the pinning;
    # its CPU includes start-up (service spawn, tokenizer), which is reported apart
    steady_cpu = max(cpu - startup_cpu_s, 1e-9)
    return {"client_cpu_cores_incl_startup": cpu / wall, "chunks_per_cpu_s": chunks / steady_cpu,
            "chunks_per_cpu_s_incl_startup": chunks / cpu, "startup_cpu_s": startup_cpu_s,
            "requests": export["request_count"]["avg"], "itl_mean_ms": itl["avg"],
            "itl_p99_ms": itl["p99"], "chunk_gap_p99_ms": icl["p99"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url")
    ap.add_argument("--conc", type=int, default=256)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--workers-list", default="1",
                    help="kvbench replay worker counts to run each cell with, e.g. 1,2")
    ap.add_argument("--server-uvloop", action="store_true",
                    help="the server on uvloop (it then sustains more streams)")
    ap.add_argument("--out")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--cells", default="0:256,0.02:256,0.02:64",
                    help="delay_s:concurrency pairs")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--aiperf", help="path to the aiperf executable in its own venv")
    ap.add_argument("--tokenizer", help="local tokenizer directory for AIPerf")
    args = ap.parse_args()
    if args.client_only:
        client_only(args)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        startup = aiperf_startup_cpu_s(args.aiperf, args.tokenizer, Path(tmp)) \
            if args.aiperf else 0.0
        for rep in range(args.repeats):
            for cell in args.cells.split(","):
                delay_s, conc_s = cell.split(":")
                delay, conc = float(delay_s), int(conc_s)
                clients = [("kvbench", int(w)) for w in args.workers_list.split(",")] + (
                    [("aiperf", 1)] if args.aiperf else [])
                for name, workers in clients:
                    log = Path(tmp) / f"{name}-{workers}-{cell}-{rep}.log"
                    proc, url = start_server(delay, log, args.server_uvloop)
                    try:
                        out = Path(tmp) / f"{name}-{workers}-{cell}-{rep}"
                        if name == "kvbench":
                            extra = run_kvbench(url, conc, args.duration, out, workers)
                        else:
                            extra = run_aiperf(args.aiperf, args.tokenizer, url, conc,
                                               args.duration, out, startup)
                        stats = _get(url + "/stats")
                    finally:
                        proc.terminate()
                        proc.wait(10)
                    row = {"client": name if name == "aiperf" else f"kvbench-w{workers}",
                           "delay_s": delay, "conc": conc, "repeat": rep,
                           "chunks_s": steady_rate(log),
                           "offered_chunks_s": conc / delay if delay else None,
                           "server_gap_p99_ms": stats.get("gap_p99_ms"), **extra}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    if args.workers_list != "1":
        _workers_table(rows)
    else:
        _table([{**r, "client": r["client"].removesuffix("-w1")} for r in rows])


def _workers_table(rows: list[dict]) -> None:
    """Medians over repeats, per client (kvbench with each worker count, AIPerf): delivered
    of offered chunks/s, the client's CPU, its event-loop lag p99 (kvbench's own check; the
    worst worker) and the per-chunk gap p99 beside the server's own."""
    names = sorted({r["client"] for r in rows}, key=lambda n: (n == "aiperf", n))
    print("\ncell            | client      | chunks/s delivered (offered)   % | CPU cores"
          " | loop lag p99 ms | gap p99 ms client server")
    for d, c in sorted({(r["delay_s"], r["conc"]) for r in rows}):
        for name in names:
            cell = [r for r in rows if r["client"] == name and (r["delay_s"], r["conc"]) == (d, c)]
            if not cell:
                continue

            def med(key: str, cell: list = cell) -> float | None:
                vals = [r[key] for r in cell if r.get(key) is not None]
                return statistics.median(vals) if vals else None

            got, offered = med("chunks_s"), med("offered_chunks_s")
            share = f"{100 * got / offered:5.1f}" if got and offered else "    -"
            cpu = med("client_cpu_cores") or med("client_cpu_cores_incl_startup")
            lag, gap, server = (med("loop_lag_ms_p99"), med("chunk_gap_p99_ms"),
                                med("server_gap_p99_ms"))

            def f(x: float | None, width: int, digits: int = 1) -> str:
                return f"{x:>{width},.{digits}f}" if x is not None else "-".rjust(width)

            print(f"delay {d:<4} c {c:<4}| {name:<11} | {f(got, 10, 0)} ({f(offered, 8, 0)}) "
                  f"{share} | {f(cpu, 9, 2)} | {f(lag, 15)} | {f(gap, 10)} {f(server, 6)}")


def _table(rows: list[dict]) -> None:
    """Medians over repeats. 'per CPU-s' is chunks drained per CPU-second of the client: the
    figure a noisy shared machine distorts least (AIPerf's start-up CPU is subtracted)."""
    print("\ncell            | chunks/s kvbench  aiperf  ratio | per CPU-s kvbench  aiperf  ratio"
          " | gap p99 ms kvbench aiperf server")
    cells = sorted({(r["delay_s"], r["conc"]) for r in rows})
    for d, c in cells:
        def med(name: str, key: str, d: float = d, c: int = c) -> float | None:
            vals = [r[key] for r in rows if r["client"] == name and r.get(key) is not None
                    and (r["delay_s"], r["conc"]) == (d, c)]
            return statistics.median(vals) if vals else None

        def fmt(x: float | None, width: int, digits: int = 0) -> str:
            return f"{x:>{width},.{digits}f}" if x is not None else "-".rjust(width)

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:>5.2f}x" if a and b else "     -"

        k, a = med("kvbench", "chunks_s"), med("aiperf", "chunks_s")
        kc, ac = med("kvbench", "chunks_per_cpu_s"), med("aiperf", "chunks_per_cpu_s")
        server = med("kvbench", "server_gap_p99_ms")
        print(f"delay {d:<4} c {c:<4}| {fmt(k, 16)} {fmt(a, 7)} {ratio(k, a)} | "
              f"{fmt(kc, 17)} {fmt(ac, 7)} {ratio(kc, ac)} | "
              f"{fmt(med('kvbench', 'chunk_gap_p99_ms'), 18, 1)} "
              f"{fmt(med('aiperf', 'chunk_gap_p99_ms'), 6, 1)} {fmt(server, 6, 1)}")


if __name__ == "__main__":
    main()
