"""agentx-harness 1.0.12 as the oracle of `kvbench replay --profile agentx`: both replay the
same Weka-format traces against the same kind of server, each run on a fresh one, and their
requests are compared.

For each repeat a fresh server is started (`kvbench serve-sim`, counting prompts with the
given tokenizer, as both clients synthesise them with it), the harness runs once
(`aiperf profile --scenario agentx`, InferenceX's flags: benchmarks/benchmark_lib.sh
`build_replay_cmd` at 843c6254f; `--unsafe-override` as the traces are local and the phase
short), then, on another fresh server, kvbench (`kvbench replay --profile agentx` with the
same concurrency, duration and warm-up). Compared per repeat: the requests each sent per
session stream and turn in the warm-up and the profiling phase, each request's prompt (the
server's token count, with its cache-bust marker: kvbench runs with the harness's run id,
`--run-marker`, so both mark each session tree alike), the requests in flight (the most at
once, the mean over time, the time above the lanes), the profiling window, the verdict; over
the repeats: TTFT p50 and throughput, judged as `kvbench compare` judges two arms
(results/compare.py: the 95% interval of the difference of the means, Student t on the pooled
repeat variance), and the same requests' TTFT differences pooled (their median's bootstrap
interval). The runs alternate (harness, kvbench, harness, ...), each on a fresh server; the
machine's load is recorded before and after each. `--rescore` compares again the runs an
earlier call left under OUT.

    python3 benchmarks/agentx_oracle.py --traces tests/data/traces/agentx-small \\
        --tokenizer DIR --concurrency 2 --duration 30 --warmup-per-lane 3 --repeats 3 \\
        --out /tmp/agentx-oracle [--url URL --model NAME: a running server instead]

The harness lives in its own virtual environment (it pins packages the global one does not
have): `--harness-venv`, default $KVBENCH_AGENTX_VENV or ~/.cache/kvbench/agentx-harness-1.0.12
(.ci/install creates it). The JSON written to OUT/oracle.json is what
tests/replay/test_agentx_oracle.py checks and docs/performance.md tabulates."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path(os.environ.get("KVBENCH_AGENTX_VENV") or
                    Path.home() / ".cache" / "kvbench" / "agentx-harness-1.0.12")


def harness_venv(path: Path | None = None) -> Path:
    venv = Path(path or DEFAULT_VENV)
    if not (venv / "bin" / "aiperf").exists():
        raise SystemExit(f"agentx-harness is not installed at {venv} (bin/aiperf missing): "
                         "run .ci/install or set KVBENCH_AGENTX_VENV")
    return venv


def kvbench_env() -> dict[str, str]:
    """kvbench from this checkout, ahead of what PYTHONPATH already gives (on the GPU machine
    the SGLang bundle's site directory carries kvbench's own dependencies)."""
    paths = [str(REPO / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def harness_env() -> dict[str, str]:
    """The harness sees its venv only: another PYTHONPATH (the GPU machine's SGLang bundle)
    would shadow the versions its venv pins."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_ttft(url: str) -> tuple[float, float] | None:
    """The engine's own time-to-first-token histogram, (sum in seconds, count), from its
    /metrics: SGLang's and serve-sim's `sglang:time_to_first_token_seconds`, vLLM's
    `vllm:time_to_first_token_seconds` (arrival to first token as the engine saw it). The
    difference of two scrapes is the requests of one run: what a client's TTFT adds to it
    is the client's (sending, reading, its event loop)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    got = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        for prefix in ("sglang:", "vllm:"):
            for part in ("sum", "count"):
                if name.startswith(f"{prefix}time_to_first_token_seconds_{part}"):
                    got[part] += float(value.split()[0])
    return (got["sum"], got["count"]) if got["count"] else None


def run_ttft_ms(before: tuple[float, float] | None, after: tuple[float, float] | None
                ) -> float | None:
    """The engine's mean TTFT over the requests between two scrapes."""
    if after is None:
        return None
    s0, n0 = before or (0.0, 0.0)
    return (after[0] - s0) / (after[1] - n0) * 1e3 if after[1] > n0 else None


def reset_cache(url: str) -> bool:
    """Empties a running server's prefix cache, as a fresh server would start: vLLM's
    `POST /reset_prefix_cache` (served with VLLM_SERVER_DEV_MODE=1,
    vllm/entrypoints/serve/dev/cache/api_router.py:20 0.26), SGLang's `POST /flush_cache`.
    Without it the second client of a pair finds the first's prompts cached (the same
    markers)."""
    for path in ("/reset_prefix_cache", "/flush_cache"):
        try:
            with urllib.request.urlopen(urllib.request.Request(f"{url}{path}", method="POST"),
                                        timeout=30) as r:
                if r.status == 200:
                    return True
        except OSError:
            continue
    return False


class SimServer:
    """A fresh `kvbench serve-sim` for one run, stopped after it."""

    def __init__(self, tokenizer: str, log: Path, args: list[str] = ()) -> None:
        self.port = _free_port()
        env = kvbench_env()
        self.log = open(log, "wb")  # noqa: SIM115 (the server writes it until stopped)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvbench", "serve-sim", "--port", str(self.port),
             "--tokenizer", tokenizer, "--time-scale", "1", *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve-sim exited: see {log}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=2) as r:
                    self.model = json.load(r)["data"][0]["id"]
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"serve-sim did not answer within 60 s: see {log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# -- the two clients -------------------------------------------------------------------------
def run_harness(venv: Path, url: str, model: str, a: argparse.Namespace, out: Path) -> dict:
    cmd = [str(venv / "bin" / "aiperf"), "profile", "--scenario", "agentx", "--unsafe-override",
           "--url", url, "--endpoint", "/v1/chat/completions", "--endpoint-type", "chat",
           "--streaming", "--model", model, "--tokenizer", a.tokenizer,
           "--concurrency", str(a.concurrency), "--benchmark-duration", str(a.duration),
           "--random-seed", "42", "--trajectory-start-min-ratio", "0.25",
           "--trajectory-start-max-ratio", "0.75",
           "--warmup-requests-per-lane", str(a.warmup_per_lane),
           "--trace-idle-gap-cap-seconds", "300", "--use-server-token-count",
           "--custom-dataset-type", "weka_trace", "--input-file", str(a.traces),
           "--output-artifact-dir", str(out), "--ui", "none"]
    if a.max_context_length:
        cmd += ["--max-context-length", str(a.max_context_length)]
    if a.lean:  # fewer of its service processes: a CI run's start-up, not its requests
        cmd += ["--workers-max", "1", "--record-processors", "1", "--no-server-metrics"]
    if a.bodies:  # every request's body and cache-bust marker (raw_records/*.jsonl)
        cmd += ["--export-level", "raw"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=harness_env())
    wall = time.monotonic() - t0
    (out / "harness.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"the harness failed (exit {proc.returncode}): see {out}/harness.log")
    records = harness_records(out, a.bodies)
    agg = json.loads((out / "profile_export_aiperf.json").read_text())
    meta = agg.get("metadata") or {}
    # the run's random id (cli_runner/__init__.py:108), the seed of its cache-bust markers
    a.harness_run_id = agg.get("benchmark_id")

    def avg(name: str) -> float:
        return float((agg.get(name) or {}).get("avg") or 0.0)

    ok, errors = avg("request_count"), avg("error_request_count")
    # a context overflow is in neither count nor in profile_export.jsonl: the harness keeps
    # it apart (record_processor_service.py:339-351, records_manager.py:831-846)
    return {"records": records, "wall_s": wall, "run_id": a.harness_run_id,
            "overflows": int(avg("skipped_context_overflow_count")),
            "verdict": {"submission_valid": bool(meta.get("submission_valid")),
                        "reasons": list(meta.get("submission_invalid_reasons") or []),
                        # InferenceX utils/agentic/validation/validate_agentic_result.py
                        "failed_ratio": errors / (ok + errors) if ok + errors else None}}


def harness_records(out: Path, bodies: bool) -> list[dict]:
    """The harness's requests as the oracle compares them, from its export in `out`
    (profile_export.jsonl; with `bodies`, each request's cache-bust marker from the raw one)."""
    markers = _harness_bodies(out) if bodies else {}
    records = []
    for line in (out / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        m, x = r["metadata"], r.get("metrics") or {}

        def val(name: str, x=x):
            return (x.get(name) or {}).get("value")

        records.append({
            "phase": "warmup" if m["benchmark_phase"] == "warmup" else "profiling",
            "stream": m["conversation_id"], "turn": m["turn_index"],
            "start_ns": m["request_start_ns"], "end_ns": m["request_end_ns"],
            "ttft_ms": val("time_to_first_token"),
            "out_tokens": val("usage_completion_tokens") or val("output_token_count"),
            "prompt_tokens": val("usage_prompt_tokens"),
            "cached_tokens": val("usage_prompt_cache_read_tokens"),
            "ok": not r.get("error") and not m.get("was_cancelled"),
            **markers.get(m.get("x_request_id"), {})})
    return records


def _harness_bodies(out: Path) -> dict[str, dict]:
    """Per request id: the cache-bust marker the harness sent and where it sat (the index of
    its message in the body, whether it opened the first user message), from the raw export
    (`--export-level raw`: profile_export_raw.jsonl, or the record processors' own files,
    post_processors/raw_record_writer_processor.py)."""
    got = {}
    paths = [out / "profile_export_raw.jsonl"] if (out / "profile_export_raw.jsonl").exists() \
        else sorted((out / "raw_records").glob("*.jsonl"))
    for path in paths:
        for line in path.read_text().splitlines():
            r = json.loads(line)
            m, marker = r["metadata"], r.get("cache_bust_marker")
            messages = (r.get("payload") or {}).get("messages") or []
            at = next((i for i, msg in enumerate(messages)
                       if marker and isinstance(msg.get("content"), str)
                       and marker in msg["content"]), None)
            first_user = next((i for i, msg in enumerate(messages)
                               if msg.get("role") == "user"), None)
            got[m.get("x_request_id")] = {
                "marker": marker, "marker_message": at,
                "marker_opens_first_user": at is not None and at == first_user
                and messages[at]["content"].startswith(marker)}
    return got


def run_kvbench(url: str, model: str, a: argparse.Namespace, out: Path,
                run_id: str | None = None) -> dict:
    """`run_id`: the harness's run id of the same repeat, so that both send the same
    cache-bust markers (kvbench `--run-marker`)."""
    cmd = [sys.executable, "-m", "kvbench", "replay", "--url", url, "--model", model,
           "--trace", str(a.traces), "--output", str(out), "--tokenizer", a.tokenizer,
           "--concurrency", str(a.concurrency), "--duration", str(a.duration),
           "--warmup-per-lane", str(a.warmup_per_lane), "--profile", "agentx",
           "--format", "json"]
    if a.max_context_length:
        cmd += ["--max-context-length", str(a.max_context_length)]
    if run_id:
        cmd += ["--run-marker", run_id]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=kvbench_env())
    if proc.returncode == 3 and proc.stdout.strip():
        pass  # the run stopped early (a failed warm-up): its summary still says why
    elif proc.returncode != 0:
        (out / "kvbench.log").write_text(proc.stderr)
        raise SystemExit(f"kvbench failed (exit {proc.returncode}): see {out}/kvbench.log")
    wall = time.monotonic() - t0
    (out / "kvbench.log").write_text(proc.stderr)
    summary = json.loads(proc.stdout)
    records, overflows = kvbench_records(out, a.traces)
    v = summary["profile"]
    return {"records": records, "wall_s": wall, "summary_inflight": summary["run"]["inflight"],
            "overflows": overflows,
            "verdict": {"submission_valid": v["submission_valid"], "reasons": v["reasons"],
                        "failed_ratio": v["checks"]["failed_ratio"]["value"]}}


def kvbench_records(out: Path, traces: Path) -> tuple[list[dict], int]:
    """kvbench's requests as the oracle compares them, from its records.jsonl in `out`, named
    as the harness names them; and the profiled context overflows (kept apart, as the harness
    exports them)."""
    streams = _stream_names(traces)
    records, overflows = [], 0
    for line in (out / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["error_kind"] == "context_overflow":
            overflows += not r["is_warmup"]
            continue
        stream, turn = streams[r["session_id"].split("#")[0]][r["turn"]]
        records.append({
            "phase": "warmup" if r["is_warmup"] else "profiling", "stream": stream,
            "turn": turn, "start_ns": r["t_send_ns"], "end_ns": r["t_last_ns"] or r["t_send_ns"],
            "ttft_ms": (r["t_first_ns"] - r["t_send_ns"]) / 1e6 if r["t_first_ns"] else None,
            "out_tokens": r["completion_tokens"], "prompt_tokens": r["prompt_tokens"],
            "cached_tokens": r["cached_tokens"], "ok": r["status"] == "ok",
            "marker": r.get("cache_bust_marker")})
    return records, overflows


def _stream_names(traces: Path) -> dict[str, list[tuple[str, int]]]:
    """Each session's turns as the harness names them (`weka.harness_stream_id`), each with
    its index in its own stream."""
    sys.path.insert(0, str(REPO / "src"))
    from kvbench.workload.loader import load_trace
    from kvbench.workload.weka import harness_stream_id

    out = {}
    for s in load_trace(traces):
        names: list[tuple[str, int]] = []
        owner = {k: b for b in s.tree() for k in range(b.first, b.end)}
        counts: dict[str, int] = {}
        for k in range(len(s.turns)):
            b = owner.get(k)
            name = harness_stream_id(s.session_id, None if b is None else b.agent)
            names.append((name, counts.get(name, 0)))
            counts[name] = counts.get(name, 0) + 1
        out[s.session_id] = names
    return out


# -- what a run did --------------------------------------------------------------------------
def inflight(prof: list[dict], lanes: int) -> dict:
    """Requests in flight over the profiled requests' span: the most at once, the mean over
    time, and the share of the time with more than `lanes` (subagents alongside their
    parent). The peak is one instant and moves with when a spawn meets another lane's
    request; the mean and the share are what the engine's load is made of."""
    events = sorted([(r["start_ns"], 1) for r in prof] + [(r["end_ns"], -1) for r in prof])
    now = peak = 0
    held_ns: dict[int, int] = {}
    last = events[0][0] if events else 0
    for t, d in events:
        held_ns[now] = held_ns.get(now, 0) + t - last
        last, now = t, now + d
        peak = max(peak, now)
    span = sum(held_ns.values())
    return {"max_inflight": peak,
            "inflight_mean": sum(n * t for n, t in held_ns.items()) / span if span else None,
            "above_lanes_share": sum(t for n, t in held_ns.items() if n > lanes) / span
            if span else None}


def describe(run: dict, lanes: int) -> dict:
    recs = run["records"]
    warm = [r for r in recs if r["phase"] == "warmup"]
    prof = [r for r in recs if r["phase"] == "profiling"]
    ok = [r for r in prof if r["ok"]]
    start = min((r["start_ns"] for r in prof), default=0)
    end = max((r["end_ns"] for r in prof), default=0)
    window_s = (end - start) / 1e9
    ttft = sorted(r["ttft_ms"] for r in ok if r["ttft_ms"] is not None)
    by_stream: dict[str, list[int]] = {}
    for r in sorted(prof, key=lambda r: r["start_ns"]):
        by_stream.setdefault(r["stream"], []).append(r["turn"])
    warm_end = max((r["end_ns"] for r in warm), default=start)
    return {
        # each request's prompt as the server counted it, with its cache-bust marker
        "prompts": sorted((r["phase"], r["stream"], r["turn"], r.get("marker") or "",
                           r["prompt_tokens"] or 0) for r in recs if r["ok"]),
        # each profiled request's TTFT, keyed as its prompt is
        "ttfts": sorted((r["phase"], r["stream"], r["turn"], r.get("marker") or "",
                         r["ttft_ms"]) for r in prof if r["ok"] and r["ttft_ms"] is not None),
        "markers_open_first_user": [r.get("marker_opens_first_user") for r in recs
                                    if "marker_opens_first_user" in r],
        "warmup": sorted((r["stream"], r["turn"]) for r in warm),
        "profiling": by_stream, "profiled_requests": len(prof),
        **inflight(prof, lanes), "window_s": window_s,
        "warmup_s": (warm_end - min((r["start_ns"] for r in warm), default=warm_end)) / 1e9,
        "ttft_p50_ms": statistics.median(ttft) if ttft else None,
        # what the engine had to do per request: the prompt share it found cached, the
        # output it decoded, the whole request's time
        "cached_share": sum(r["cached_tokens"] or 0 for r in ok) / p
        if (p := sum(r["prompt_tokens"] or 0 for r in ok)) else None,
        "out_tokens_mean": statistics.fmean(r["out_tokens"] or 0 for r in ok) if ok else None,
        "e2e_p50_ms": statistics.median((r["end_ns"] - r["start_ns"]) / 1e6 for r in ok)
        if ok else None,
        # every answered request's, warm-up included, as the engine's own mean counts them
        "ttft_mean_all_ms": statistics.fmean(t) if (t := [
            r["ttft_ms"] for r in recs if r["ok"] and r["ttft_ms"] is not None]) else None,
        "requests_s": len(ok) / window_s if window_s else None,
        "output_tok_s": sum(r["out_tokens"] or 0 for r in ok) / window_s if window_s else None,
        "verdict": run["verdict"], "wall_s": run["wall_s"], "overflows": run["overflows"],
    }


def compare(h: dict, k: dict) -> dict:
    """Request agreement of one repeat: the warm-up sets equal, and every stream's profiled
    turns the same, counted as a multiset (two lanes replaying one trace interleave its
    turns) but for one (the window's end may cut a stream a request earlier in one run)."""
    from collections import Counter

    streams = set(h["profiling"]) | set(k["profiling"])
    same, differ, cut = 0, [], 0
    for s in sorted(streams):
        a, b = Counter(h["profiling"].get(s, [])), Counter(k["profiling"].get(s, []))
        extra = sum(((a - b) + (b - a)).values())
        if extra <= 1:
            same += 1
            cut += extra
        else:
            differ.append({"stream": s, "harness": h["profiling"].get(s, []),
                           "kvbench": k["profiling"].get(s, [])})
    # the same request (phase, stream, turn) with the same marker: the same prompt tokens.
    # Without the harness's bodies its markers are unknown: a request is then its (phase,
    # stream, turn) and its repeats (another pass of the trace) pair in token order
    bodies = any(p[3] for p in h["prompts"])

    def keyed(prompts: list) -> dict:
        out, seen = {}, Counter()
        for *key, tokens in sorted(prompts, key=lambda p: (*p[:3], p[4])):
            key = tuple(key) if bodies else (*key[:3], seen[tuple(key[:3])])
            seen[tuple(key[:3])] += 1
            out[key] = tokens
        return out

    hp, kp = keyed(h["prompts"]), keyed(k["prompts"])
    # the same request's TTFT in both runs: a difference all requests share is the client's
    # or the engine's state, one in a few the load around them
    ht, kt = keyed(h["ttfts"]), keyed(k["ttfts"])
    ttft_deltas = sorted(kt[key] - ht[key] for key in set(ht) & set(kt))
    both = sorted(set(hp) & set(kp))
    unequal = [[*key, hp[key], kp[key]] for key in both if hp[key] != kp[key]]
    deltas = Counter(kp[key] - hp[key] for key in both)
    return {"prompts": {"harness": len(hp), "kvbench": len(kp), "same_marker": len(both),
                        "markers_compared": bodies,
                        "same_tokens": len(both) - len(unequal),
                        # kvbench's prompt tokens less the harness's: {delta: requests}
                        "token_deltas": {str(d): n for d, n in sorted(deltas.items())},
                        "differing": unequal[:20]},
            # kvbench's TTFT less the harness's, the same requests: quartiles (ms)
            "ttft_delta_ms": [round(statistics.quantiles(ttft_deltas, n=4)[i], 2)
                              for i in range(3)] if len(ttft_deltas) >= 2 else None,
            "ttft_deltas_ms": [round(d, 3) for d in ttft_deltas],
            "warmup_equal": h["warmup"] == k["warmup"], "streams": len(streams),
            "streams_equal": same, "streams_differing": differ, "cut_at_window_end": cut,
            "inflight_equal": h["max_inflight"] == k["max_inflight"],
            "overflows_equal": h["overflows"] == k["overflows"],
            "failed_ratio_equal": h["verdict"]["failed_ratio"] == k["verdict"]["failed_ratio"],
            "verdict_equal": h["verdict"]["submission_valid"] ==
            k["verdict"]["submission_valid"]}


def noise(values_h: list[float], values_k: list[float], higher_is_better: bool) -> dict:
    """kvbench's own verdict on the difference (results/compare.py, as `kvbench compare`
    judges two arms: the 95% interval of the difference of the means, Student t on the
    pooled repeat variance), the harness the first arm."""
    sys.path.insert(0, str(REPO / "src"))
    from kvbench.results.compare import _delta, _stats

    h, k = _stats(values_h), _stats(values_k)
    d = _delta(h, k, higher_is_better)
    return {"harness": h["mean"], "kvbench": k["mean"], "harness_sd": h["std"],
            "kvbench_sd": k["std"], "n": [h["n"], k["n"]], "delta": d["abs"],
            "delta_pct": d["pct"], "interval": d["noise"], "interval_pct": d["noise_pct"],
            "verdict": d["verdict"],
            "within_noise": None if d["significant"] is None else not d["significant"]}


def paired_ttft(runs: list[dict], resamples: int = 4000, seed: int = 0) -> dict | None:
    """The same requests' TTFT differences (kvbench less harness) pooled over the pairs: their
    median with its 95% bootstrap interval (requests resampled with replacement), beside the
    harness's TTFT p50. Each request is its own control (the same prompt, the same cached
    prefix), so this sees a client's offset that the repeats' spread of p50 hides."""
    import numpy as np

    deltas = [d for r in runs for d in r["agreement"].get("ttft_deltas_ms") or []]
    if len(deltas) < 10:
        return None
    x = np.asarray(deltas, dtype=float)
    draws = np.random.default_rng(seed).choice(x, size=(resamples, x.size))
    lo, hi = np.percentile(np.median(draws, axis=1), [2.5, 97.5])
    base = statistics.fmean(r["harness"]["ttft_p50_ms"] for r in runs)
    return {"requests": len(deltas), "median_ms": float(np.median(x)),
            "interval_ms": [float(lo), float(hi)], "harness_ttft_p50_ms": base,
            "within_noise": bool(lo <= 0 <= hi)}


def load() -> list[float]:
    """The machine's load averages (1, 5, 15 min): the runs share it."""
    return [round(x, 2) for x in os.getloadavg()]


def summarise(a: argparse.Namespace, runs: list[dict]) -> dict:
    """The oracle's result over the pairs run so far: each pair, and over the repeats each
    metric's difference with its noise verdict."""
    result = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
              "runs": runs}
    for run in runs:
        for tool in ("harness", "kvbench"):
            r = run[tool]
            r["client_ttft_overhead_ms"] = (
                r["ttft_mean_all_ms"] - r["server_ttft_ms"]
                if r["server_ttft_ms"] is not None and r["ttft_mean_all_ms"] is not None
                else None)
    result["paired_ttft"] = paired_ttft(runs)
    for metric, higher in (("ttft_p50_ms", False), ("requests_s", True),
                           ("output_tok_s", True), ("max_inflight", True),
                           ("inflight_mean", True), ("above_lanes_share", True),
                           ("window_s", True), ("server_ttft_ms", False),
                           ("cached_share", True), ("out_tokens_mean", True),
                           ("e2e_p50_ms", False),
                           ("client_ttft_overhead_ms", False)):
        if any(r[t][metric] is None for r in runs for t in ("harness", "kvbench")):
            continue  # not measured (a server without the metric)
        result[metric] = noise([r["harness"][metric] for r in runs],
                               [r["kvbench"][metric] for r in runs], higher)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=Path, required=True)
    p.add_argument("--tokenizer", help="HF tokenizer name or directory (not with --rescore)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--duration", type=float, default=30)
    p.add_argument("--warmup-per-lane", type=int, default=3)
    p.add_argument("--max-context-length", type=int, default=None)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--url", default=None, help="a running server (default: serve-sim per run)")
    p.add_argument("--model", default=None)
    p.add_argument("--server-args", default="",
                   help="more serve-sim options, e.g. '--model llama-3.1-70b' (an engine whose "
                        "TTFT is tens of milliseconds, as on a GPU, not a few)")
    p.add_argument("--harness-venv", type=Path, default=None)
    p.add_argument("--lean", action="store_true",
                   help="one harness worker and record processor, no server metrics")
    p.add_argument("--bodies", action="store_true",
                   help="the harness exports every request body (--export-level raw): where "
                        "its cache-bust marker sat (costs it writing them)")
    p.add_argument("--reset-cache", action="store_true",
                   help="with --url: empty the server's prefix cache before each run "
                        "(vLLM served with VLLM_SERVER_DEV_MODE=1, or SGLang), as a fresh "
                        "server would start")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rescore", action="store_true",
                   help="run nothing: compare again the runs under OUT (its oracle.json and "
                        "run directories, e.g. a GPU call's brought back) as this script now "
                        "compares; --traces names the same traces")
    a = p.parse_args()
    if not a.rescore and not a.tokenizer:
        p.error("--tokenizer is required (but with --rescore)")
    if a.rescore:
        result = rescore(a.out, a.traces)
        (a.out / "oracle.json").write_text(json.dumps(result, indent=1))
        print(table(result))
        return
    venv = harness_venv(a.harness_venv)
    a.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(a.repeats):
        pair = {}
        for tool in ("harness", "kvbench"):
            out = a.out / f"{tool}-{i}"
            out.mkdir(parents=True, exist_ok=True)
            before = load()
            server = None if a.url else SimServer(a.tokenizer, out / "server.log",
                                                  a.server_args.split())
            url, model = (a.url, a.model) if a.url else (server.url, server.model)
            reset = reset_cache(url) if a.reset_cache else None
            scraped = engine_ttft(url)
            try:
                run = (run_harness(venv, url, model, a, out) if tool == "harness"
                       else run_kvbench(url, model, a, out, pair["harness"]["run_id"]))
                run["server_ttft_ms"] = run_ttft_ms(scraped, engine_ttft(url))
            finally:
                if server is not None:
                    server.stop()
            pair[tool] = {**describe(run, a.concurrency), "run_id": run.get("run_id"),
                          "server_ttft_ms": run["server_ttft_ms"], "cache_reset": reset,
                          "load_before": before, "load_after": load()}
        pair["agreement"] = compare(pair["harness"], pair["kvbench"])
        runs.append(pair)
        # written after every pair: a run cut by the device call's deadline keeps the pairs
        # it finished (the GPU call of session 12 lost three runs whole)
        result = summarise(a, runs)
        (a.out / "oracle.json").write_text(json.dumps(result, indent=1))
    print(table(result))


# what a run's files do not hold: its verdict and counts as the client reported them, the
# server's scrape, the machine's load
KEPT = ("verdict", "wall_s", "overflows", "run_id", "server_ttft_ms", "cache_reset",
        "load_before", "load_after")


def rescore(out: Path, traces: Path) -> dict:
    """Every pair of OUT/oracle.json described and compared again from its runs' own files
    (harness-N/, kvbench-N/), with the settings it ran under."""
    old = json.loads((out / "oracle.json").read_text())
    settings = argparse.Namespace(**{**old["settings"], "traces": str(traces)})
    runs = []
    for i, pair in enumerate(old["runs"]):
        new = {}
        for tool in ("harness", "kvbench"):
            d = out / f"{tool}-{i}"
            records = (harness_records(d, bool(settings.bodies)) if tool == "harness"
                       else kvbench_records(d, traces)[0])
            kept = {k: pair[tool][k] for k in KEPT}
            new[tool] = {**describe({"records": records, **kept}, settings.concurrency), **kept}
        new["agreement"] = compare(new["harness"], new["kvbench"])
        runs.append(new)
    return summarise(settings, runs)


def table(result: dict) -> str:
    rows = ["| | agentx-harness 1.0.12 | kvbench replay --profile agentx | agree |",
            "|---|---|---|---|"]
    runs = result["runs"]
    for i, r in enumerate(runs):
        h, k, ag = r["harness"], r["kvbench"], r["agreement"]
        rows.append(f"| run {i}: warm-up requests | {len(h['warmup'])} | {len(k['warmup'])} "
                    f"| {'same (stream, turn)s' if ag['warmup_equal'] else 'DIFFER'} |")
        rows.append(f"| run {i}: profiled requests | {h['profiled_requests']} | "
                    f"{k['profiled_requests']} | {ag['streams_equal']}/{ag['streams']} "
                    f"streams send the same turns ({ag['cut_at_window_end']} cut by the "
                    "window's end) |")
        pr = ag["prompts"]
        rows.append(f"| run {i}: prompts (server's tokens) | {pr['harness']} | {pr['kvbench']} "
                    f"| {pr['same_marker']} the same (stream, turn"
                    f"{', marker' if pr['markers_compared'] else ''}); tokens kvbench less "
                    f"harness: {pr['token_deltas']} |")
        if ag.get("ttft_delta_ms"):
            q = ag["ttft_delta_ms"]
            rows.append(f"| run {i}: TTFT of the same request, kvbench less harness (ms) | | "
                        f"| quartiles {q[0]:+.1f}, {q[1]:+.1f}, {q[2]:+.1f} |")
        rows.append(f"| run {i}: most requests in flight ({result['settings']['concurrency']} "
                    f"lanes) | {h['max_inflight']} | {k['max_inflight']} | "
                    f"{'yes' if ag['inflight_equal'] else 'no'} |")
        if h.get("inflight_mean") is not None and k.get("inflight_mean") is not None:
            rows.append(f"| run {i}: requests in flight, mean over time (share of the time "
                        f"above the lanes) | {h['inflight_mean']:.2f} "
                        f"({h['above_lanes_share']:.1%}) | {k['inflight_mean']:.2f} "
                        f"({k['above_lanes_share']:.1%}) | |")
        rows.append(f"| run {i}: submission valid | {h['verdict']['submission_valid']} "
                    f"({', '.join(h['verdict']['reasons'])}) | "
                    f"{k['verdict']['submission_valid']} ({len(k['verdict']['reasons'])} "
                    f"reasons) | {'yes' if ag['verdict_equal'] else 'no'} |")
    if (pt := result.get("paired_ttft")) is not None:
        rows.append(f"| TTFT of the same request, kvbench less harness, median of "
                    f"{pt['requests']} over all runs (ms) | | {pt['median_ms']:+.2f} "
                    f"[{pt['interval_ms'][0]:+.2f}, {pt['interval_ms'][1]:+.2f}] against a "
                    f"p50 of {pt['harness_ttft_p50_ms']:.1f} | "
                    f"{'within noise' if pt['within_noise'] else 'outside noise'} "
                    "(95% bootstrap interval) |")
    for metric, label in (("ttft_p50_ms", "TTFT p50 (ms)"), ("requests_s", "requests/s"),
                          ("output_tok_s", "output tokens/s"),
                          ("window_s", "profiling window (s)"),
                          ("inflight_mean", "requests in flight, mean over time"),
                          ("cached_share", "prompt share the engine found cached"),
                          ("out_tokens_mean", "output tokens per request"),
                          ("e2e_p50_ms", "request time p50, send to last byte (ms)"),
                          ("server_ttft_ms", "engine's own TTFT, mean of all requests (ms)"),
                          ("client_ttft_overhead_ms",
                           "client's TTFT less the engine's, means of all requests (ms)")):
        m = result.get(metric)
        if m is None:
            continue
        sd_h = f" ±{m['harness_sd']:.2f}" if m["harness_sd"] is not None else ""
        sd_k = f" ±{m['kvbench_sd']:.2f}" if m["kvbench_sd"] is not None else ""
        delta = f"{m['delta']:+.3f}"
        if m["interval"] is not None:
            delta += f" ±{m['interval']:.3f}"
        if m["delta_pct"] is not None:
            delta += f" ({m['delta_pct']:+.1f}%" + (
                f" ±{m['interval_pct']:.1f}" if m["interval_pct"] is not None else "") + ")"
        rows.append(f"| {label}, mean of {len(runs)} | {m['harness']:.2f}{sd_h} | "
                    f"{m['kvbench']:.2f}{sd_k} | {delta}: {m['verdict']} |")
    loads = [r[t]["load_before"][0] for r in runs for t in ("harness", "kvbench")]
    rows.append(f"| machine load (1-min average before each run) | {min(loads):.2f} to "
                f"{max(loads):.2f} | | |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
