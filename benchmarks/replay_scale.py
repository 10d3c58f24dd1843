"""The replay client at InferenceX's scale: hundreds of agentic sessions with AgentX-sized
contexts (100K-1M tokens: the AgentX-shaped corpus, each session from its first prompt of
100K tokens) against one paced SSE server, kvbench before and after a change side by side,
and AIPerf on the same server with the same prompts.

One trace is written first (in the kv-cache-tester format agentx-harness and AIPerf read:
`--custom-dataset-type weka_trace`), so every client replays the same sessions, sizes, hash
ids and think times. Per run a fresh reference server (`tests/data/bench/fast_sse_server.py`,
`--uvloop`, pinned to CPU 1, 20 ms between chunks) and one client pinned to CPU 0 (kvbench
with `--workers N`: CPUs 0..N-1): the client's CPU-seconds (its process tree, waited for;
AIPerf's include building its dataset), its peak RSS (the tree's, sampled every 0.2 s),
kvbench's own saturation check (event-loop lag p99, send lateness p99), and what the server
delivered (requests completed, content chunks a second while streaming). Clients run
interleaved per repeat; the load average and an idle event loop's lag on CPU 0 (the
machine's floor) are recorded before each run.

    git -C /work/main worktree add /tmp/kvbench-base main      # the code before
    python tests/fixtures/tiny_model.py /tmp/replay-tiny         # a tokenizer for AIPerf
    python benchmarks/replay_scale.py --sessions 512 --workers-sessions 1024 --duration 60 \\
        --think-scale 0.25 --baseline /tmp/kvbench-base/src \\
        --aiperf /tmp/aiperf-venv/bin/aiperf --tokenizer /tmp/replay-tiny

Prints one JSON line per run, then a table of medians."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_client import REPO, SERVER, _get, _port, steady_rate

DELAY_S = 0.02
MODEL = "fake-model"


# -- the workload ----------------------------------------------------------------------------
def write_trace(out: Path, sessions: int, turns: int, seed: int, min_tokens: int,
                think_scale: float) -> dict:
    """AgentX-sized sessions: the AgentX-shaped corpus (workload/corpus.py, 1M-token window)
    with each session's main-agent turns from its first prompt of `min_tokens` or more,
    `turns` of them (sessions that never reach it are passed over; subagents are left out so
    that AIPerf's chain detection and kvbench's tree agree on one stream a session), written
    as one kv-cache-tester JSON file each in the schema AIPerf's weka_trace loader checks
    (`models`, hash ids local to the file), with recorded times (`t`, the think times times
    `think_scale`, and `api_time` of 20 ms an output token) so every client paces them
    alike."""
    sys.path.insert(0, str(REPO / "src"))
    from kvbench.workload.corpus import FULL_CONTEXT_TOKENS, CorpusSpec, generate_corpus

    out.mkdir(parents=True, exist_ok=True)
    tokens: list[int] = []
    written = 0
    spec = CorpusSpec(sessions=4 * sessions, seed=seed, context_tokens=FULL_CONTEXT_TOKENS,
                      block_tokens=64)
    for s in generate_corpus(spec):
        main = [t for t in s.turns if t.agent is None]
        big = next((i for i, t in enumerate(main) if t.input_tokens >= min_tokens), None)
        if big is None:
            continue
        t, requests = 0.0, []
        for k, turn in enumerate(main[big:big + turns]):
            think = round(turn.think_time_s * think_scale, 3) if k else 0.0
            t += think
            api = round(turn.output_tokens * DELAY_S, 3)
            requests.append({"t": round(t, 3), "type": "n", "model": MODEL,
                             "in": turn.input_tokens, "out": turn.output_tokens,
                             "hash_ids": list(turn.hash_ids), "api_time": api,
                             "think_time": think})
            tokens.append(turn.input_tokens)
            t += api
        (out / f"{s.session_id}.json").write_text(json.dumps(
            {"id": s.session_id, "models": [MODEL], "block_size": spec.block_tokens,
             "hash_id_scope": "local", "requests": requests}))
        written += 1
        if written == sessions:
            break
    else:
        raise SystemExit(f"only {written} of {4 * sessions} corpus sessions reach "
                         f"{min_tokens:,} tokens")
    tokens.sort()
    return {"sessions": sessions, "requests": len(tokens),
            "prompt_tokens_median": tokens[len(tokens) // 2],
            "prompt_tokens_p90": tokens[int(len(tokens) * 0.9)],
            "prompt_tokens_max": tokens[-1], "think_scale": think_scale}


# -- measuring a client ----------------------------------------------------------------------
IDLE_PROBE = """
import asyncio, sys, time
async def probe(seconds):
    lag, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter_ns()
        await asyncio.sleep(0.01)
        lag.append((time.perf_counter_ns() - t) / 1e6 - 10)
    lag.sort()
    print(lag[int(len(lag) * 0.99)])
asyncio.run(probe(float(sys.argv[1])))
"""


def idle_lag_ms(seconds: float = 2.0) -> float:
    """An idle event loop's wake-up lag p99 on CPU 0: what the machine alone costs a loop."""
    res = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", IDLE_PROBE, str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 30)
    return float(res.stdout.strip() or "nan")


BUSY_PROBE = """
import sys, time
end = time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    pass
print(time.process_time() / float(sys.argv[1]))
"""


def cpu_share(seconds: float = 2.0) -> float:
    """What a busy process gets of CPU 0 now (cores): the share the machine leaves a
    client that needs all of its core; the idle loop's lag does not show it (a sleeper is
    woken first)."""
    res = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", BUSY_PROBE, str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 30)
    return round(float(res.stdout.strip() or "nan"), 2)


def run_measured(cmd: list[str], env: dict, timeout_s: float) -> dict:
    """Run `cmd`: its wall seconds, the peak RSS of its whole process tree and its busiest
    5 seconds (the tree's CPU-seconds over any 5 s window, in cores: whether a run that
    averages little saturates its core in a burst), sampled every 0.2 s."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak = [0]
    cpu: list[tuple[float, float]] = []  # (wall s, the live tree's CPU-s)
    done = threading.Event()

    def sample() -> None:
        try:
            root = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while not done.wait(0.2):
            total, used = 0, 0.0
            try:
                for p in [root, *root.children(recursive=True)]:
                    total += p.memory_info().rss
                    t = p.cpu_times()
                    used += t.user + t.system
            except psutil.Error:
                continue
            peak[0] = max(peak[0], total)
            cpu.append((time.perf_counter(), used))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        done.set()
        sampler.join()
    busiest, j = 0.0, 0
    for t, used in cpu:  # the windows ending at each sample
        while cpu[j][0] < t - 5.0:
            j += 1
        if t - cpu[j][0] >= 4.0:
            busiest = max(busiest, (used - cpu[j][1]) / (t - cpu[j][0]))
    return {"wall_s": time.perf_counter() - t0, "rss_peak_mb": peak[0] / 1e6,
            "cpu_cores_busiest_5s": round(busiest, 2),
            "rc": proc.returncode, "stdout": out, "stderr": err[-3000:]}


def children_cpu_s() -> float:
    """CPU-seconds of the reaped children: a client's, and all it reaped, once it is waited
    for (one client runs at a time)."""
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def kvbench_cmd(src: Path, url: str, trace: Path, n: int, duration: float, out: Path,
                workers: int) -> tuple[list[str], dict]:
    cpus = ",".join(str(c) for c in range(max(1, workers)))
    cmd = ["taskset", "-c", cpus, sys.executable, "-m", "kvbench", "replay", "--url", url,
           "--model", MODEL, "--trace", str(trace), "--concurrency", str(n),
           "--duration", str(duration), "--grace", "5", "--output", str(out),
           "--format", "json", "--workers", str(workers)]
    return cmd, {**os.environ, "PYTHONPATH": str(src)}


def aiperf_cmd(aiperf: str, tokenizer: str, url: str, trace: Path | None, n: int,
               duration: float, out: Path) -> tuple[list[str], dict]:
    cmd = ["taskset", "-c", "0", aiperf, "profile", "--model", MODEL, "--url", url,
           "--endpoint-type", "chat", "--streaming", "--concurrency", str(n),
           "--benchmark-duration", str(duration), "--tokenizer", tokenizer,
           "--use-server-token-count", "--ui-type", "none", "--artifact-dir", str(out),
           "--workers-max", "8"]
    if trace is None:  # the classic shape: ~100-token prompts, 256 tokens out
        cmd += ["--isl", "100", "--osl", "256"]
    else:
        cmd += ["--custom-dataset-type", "weka_trace", "--input-file", str(trace)]
    return cmd, {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}


def server_stats(url: str) -> dict:
    """The server's counters; a server still busy closing a thousand streams may take more
    than one request's timeout to answer, and a run it cannot answer for is kept, its
    server counters empty."""
    for _ in range(3):
        try:
            return _get(url + "/stats")
        except OSError:
            time.sleep(2)
    return {}


def paced_server(log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """The reference SSE server on CPU 1 (`DELAY_S` between chunks, uvloop) and its URL,
    once it answers (or after 10 s: the run then says what failed)."""
    port = _port()
    server = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, str(SERVER), "--port", str(port), "--delay",
         str(DELAY_S), "--uvloop", *(["--stats-log", str(log)] if log is not None else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            _get(url + "/health")
            break
        except OSError:
            time.sleep(0.1)
    return server, url


def one_run(name: str, cmd: list[str], env: dict, duration: float, tmp: Path,
            tag: str) -> dict:
    log = tmp / f"{tag}.stats.log"
    server, url = paced_server(log)
    try:
        cmd = [url if c == "{url}" else c for c in cmd]
        load0, floor, share = os.getloadavg()[0], idle_lag_ms(), cpu_share()
        cpu0 = children_cpu_s()
        got = run_measured(cmd, env, duration + 600)
        cpu = children_cpu_s() - cpu0
        stats = server_stats(url)
    finally:
        server.terminate()
        server.wait(10)
    row = {"client": name, "load_avg": round(load0, 2), "idle_loop_lag_p99_ms": floor,
           "cpu0_share": share,
           "cpu_s": round(cpu, 2), "wall_s": round(got["wall_s"], 1),
           "rss_peak_mb": round(got["rss_peak_mb"], 1), "rc": got["rc"],
           "cpu_cores_busiest_5s": got["cpu_cores_busiest_5s"],
           "server_requests_completed": stats.get("requests_completed"),
           "server_chunks": stats.get("content_chunks"),
           "server_chunks_per_s": round(steady_rate(log), 1)}
    if got["rc"] != 0:
        row["error"] = (got["stderr"] or got["stdout"])[-1500:]
    return row


def kvbench_row(row: dict, out: Path) -> dict:
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return row
    c, r = summary["client"], summary["requests"]
    row.update({
        "replay_cpu_cores": c.get("cpu_cores"), "loop_lag_p99_ms": c.get("loop_lag_ms_p99"),
        "send_lateness_p99_ms": c.get("send_lateness_ms_p99"),
        "lateness_render_p99_ms": c.get("send_lateness_render_ms_p99"),
        "lateness_after_render_p99_ms": c.get("send_lateness_after_render_ms_p99"),
        "prepare_s": summary["run"].get("prepare_s"), "saturated": c.get("saturated"),
        "reasons": c.get("reasons"), "requests_profiled": r.get("profiled"),
        "requests_errors": r.get("errors"), "requests_cancelled": r.get("cancelled")})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="256,512", help="session counts, one client each")
    ap.add_argument("--workers-sessions", default="",
                    help="session counts kvbench also runs with --workers 2")
    ap.add_argument("--turns", type=int, default=8, help="turns kept per session")
    ap.add_argument("--min-tokens", type=int, default=100_000,
                    help="a session's turns start at its first prompt of this many tokens")
    ap.add_argument("--think-scale", type=float, default=1.0,
                    help="the corpus's think times times this (the same for every client)")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", type=Path, help="src/ of the code before (kvbench-before)")
    ap.add_argument("--aiperf", help="the aiperf executable, in its own venv")
    ap.add_argument("--tokenizer", help="a local tokenizer directory, for AIPerf")
    ap.add_argument("--out", type=Path, help="keep the runs' files here")
    a = ap.parse_args()
    counts = [int(x) for x in a.sessions.split(",") if x]
    worker_counts = [int(x) for x in a.workers_sessions.split(",") if x]
    tmp = Path(tempfile.mkdtemp(prefix="replay-scale-")) if a.out is None else a.out
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in sorted(set(counts + worker_counts)):
            trace = tmp / f"trace-{n}"
            shape = write_trace(trace, n, a.turns, a.seed, a.min_tokens, a.think_scale)
            print(json.dumps({"trace": str(trace), **shape}), flush=True)
            clients: list[tuple[str, Path | None, int]] = []
            if n in counts:
                if a.baseline:
                    clients.append(("kvbench-before", a.baseline, 1))
                clients.append(("kvbench-after", REPO / "src", 1))
                if a.aiperf:
                    clients += [("aiperf-trace", None, 1), ("aiperf-100tok", None, 1)]
            if n in worker_counts:
                if a.baseline:
                    clients.append(("kvbench-before-w2", a.baseline, 2))
                clients.append(("kvbench-after-w2", REPO / "src", 2))
            for rep in range(a.repeats):
                for name, src, workers in clients:
                    tag = f"{name}-{n}-{rep}"
                    out = tmp / tag
                    shutil.rmtree(out, ignore_errors=True)
                    if src is not None:
                        cmd, env = kvbench_cmd(src, "{url}", trace, n, a.duration, out,
                                               workers)
                    else:
                        cmd, env = aiperf_cmd(a.aiperf, a.tokenizer, "{url}",
                                              trace if name == "aiperf-trace" else None, n,
                                              a.duration, out)
                    row = one_run(name, cmd, env, a.duration, tmp, tag)
                    row.update({"sessions": n, "repeat": rep, "workers": workers})
                    if src is not None:
                        row = kvbench_row(row, out)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        if a.out is None:
            shutil.rmtree(tmp, ignore_errors=True)
    table(rows)


def table(rows: list[dict]) -> None:
    print("\nsessions | client            | CPU-s  cores busiest 5s | loop lag p99 | late p99 "
          "| RSS MB | requests done | chunks/s | load | idle lag p99 | CPU 0 share")
    for n in sorted({r["sessions"] for r in rows}):
        for name in dict.fromkeys(r["client"] for r in rows if r["sessions"] == n):
            cell = [r for r in rows if r["sessions"] == n and r["client"] == name]

            def med(key: str, cell: list = cell) -> float | None:
                vals = [r[key] for r in cell if isinstance(r.get(key), int | float)]
                return statistics.median(vals) if vals else None

            def f(x: float | None, width: int, digits: int = 1) -> str:
                return f"{x:>{width},.{digits}f}" if x is not None else "-".rjust(width)

            cpu, wall = med("cpu_s"), med("wall_s")
            cores = cpu / wall if cpu is not None and wall else None
            print(f"{n:>8} | {name:<17} | {f(cpu, 6)} {f(cores, 5, 2)} "
                  f"{f(med('cpu_cores_busiest_5s'), 10, 2)} | "
                  f"{f(med('loop_lag_p99_ms'), 12)} | {f(med('send_lateness_p99_ms'), 8)} | "
                  f"{f(med('rss_peak_mb'), 6, 0)} | {f(med('server_requests_completed'), 13, 0)}"
                  f" | {f(med('server_chunks_per_s'), 8, 0)} | {f(med('load_avg'), 4)} | "
                  f"{f(med('idle_loop_lag_p99_ms'), 12)} | {f(med('cpu0_share'), 11, 2)}")


if __name__ == "__main__":
    main()
