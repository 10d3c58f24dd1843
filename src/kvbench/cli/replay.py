"""`kvbench replay`: replay agent sessions (a trace or the synthetic workload) against any
OpenAI-compatible server and write records.jsonl and summary.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.errors import ReplayError, ReplayOptionError, shown

# A /v1/models answer lists a few models in a few KB; read at most this much, within this
# time (urllib's timeout is per read: a server dripping bytes would never trip it)
MODELS_MAX_BYTES = 1 << 20
MODELS_DEADLINE_S = 10.0


def _first_model(url: str, api_key: str | None = None) -> str:
    import time
    import urllib.request

    from kvbench.bounds import MAX_MODEL_ID_CHARS
    from kvbench.replay.http import DIRECT

    base = url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        req = urllib.request.Request(f"{base}/v1/models", headers=headers)
        deadline = time.monotonic() + MODELS_DEADLINE_S
        raw = b""
        with DIRECT.open(req, timeout=MODELS_DEADLINE_S) as r:
            while piece := r.read1(65536):
                raw += piece
                if len(raw) > MODELS_MAX_BYTES or time.monotonic() > deadline:
                    raise ValueError(f"the answer is past {MODELS_MAX_BYTES >> 20} MiB or "
                                     f"{MODELS_DEADLINE_S:g} s")
        model = json.loads(raw)["data"][0]["id"]
        if not isinstance(model, str) or not 0 < len(model) <= MAX_MODEL_ID_CHARS:
            raise ValueError(f"the first model id {shown(model)} is not a model name")
        return model
    except Exception as e:  # any failure means: ask the user for --model
        raise ReplayError(
            f"cannot read the served model from {base}/v1/models: {e}",
            hint="pass --model NAME",
        ) from e


OPEN_LOOP_CAP = 1024


@app.command("replay")
def replay_cmd(
    url: Annotated[str, typer.Option(help="server base URL, e.g. http://127.0.0.1:8000")],
    trace: Annotated[str, typer.Option(
        help="trace file or directory (kv-cache-tester / weka JSON or JSONL, Mooncake JSONL), "
        "or a word: bundled (kvbench's Claude Code sessions), synthetic (seeded synthetic "
        "sessions, --sessions)")],
    output: Annotated[Path, typer.Option(help="directory for records.jsonl and summary.json")],
    concurrency: Annotated[int | None, typer.Option(
        help="live session lanes, default 1 (with --session-rate: the cap on live sessions, "
             f"default {OPEN_LOOP_CAP})")] = None,
    session_rate: Annotated[float | None, typer.Option(
        help="open loop: sessions arriving per second (server clock) instead of closed-loop "
             "lanes")] = None,
    arrival: Annotated[str, typer.Option(help="open loop: poisson | constant")] = "poisson",
    workers: Annotated[int, typer.Option(
        help="processes the lanes are sharded over (one event loop drains about a core's "
             "worth of streams); records merged, one summary")] = 1,
    duration: Annotated[float | None, typer.Option(help="seconds to keep sending")] = None,
    max_requests: Annotated[int | None, typer.Option(help="profiled requests to send")] = None,
    warmup_requests: Annotated[int | None, typer.Option(
        help="first requests sent counted as warm-up (default 0)")] = None,
    warmup_per_lane: Annotated[int | None, typer.Option(
        help="one-token requests per lane, with no idle delay, after the t* warm-up and "
             "before the profiling phase (default none; agentx: 10)")] = None,
    warmup_grace: Annotated[float | None, typer.Option(
        help="seconds the warm-up may take to drain before the run ends (agentx: 1800)")
    ] = None,
    model: Annotated[str | None, typer.Option(help="model name (default: /v1/models)")] = None,
    endpoint: Annotated[str, typer.Option(help="chat | completions")] = "chat",
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer for exact prompts")] = None,
    seed: Annotated[int | None, typer.Option(help="default 0; agentx: 42")] = None,
    sessions: Annotated[int, typer.Option(help="synthetic sessions")] = 64,
    start: Annotated[str | None, typer.Option(
        help="beginning | sampled: each lane's first session at an instant of its recording, "
             "its live requests before it sent as warm-up (default beginning; agentx: "
             "sampled in 25-75%)")] = None,
    order: Annotated[str, typer.Option(
        help="trace | shuffled (lanes take the sessions in an order drawn from --seed)")]
    = "trace",
    think_time_cap: Annotated[float | None, typer.Option(
        help="longest think time, s (default 60; agentx: none, the tree's idle cap)")] = None,
    tree_idle_cap: Annotated[float | None, typer.Option(
        help="when none of a session tree's requests is in flight, its pending think times "
             "shift so its next request leaves within this many seconds (default off; "
             "agentx: 300)")] = None,
    max_context_length: Annotated[int | None, typer.Option(
        help="the server's context length: whole traces whose peak prompt + output exceeds "
             "it are left out before the run (InferenceX's --max-context-length)")] = None,
    corpus: Annotated[str | None, typer.Option(
        help="the corpus the traces are (an AgentX one, e.g. "
             "semianalysis_cc_traces_weka_062126): its fingerprint is checked")] = None,
    think_time_scale: Annotated[float, typer.Option()] = 1.0,
    system_idle_cap: Annotated[float | None, typer.Option(
        help="when nothing is in flight anywhere, pending think times shift so the next "
        "request leaves within this many seconds (default off; agentx: 10)")] = None,
    time_scale: Annotated[float | None, typer.Option(
        help="the server's clock runs this much faster than wall time (default: what the "
        "server advertises, serve-sim does; else 1); timings are in the server's clock")
    ] = None,
    max_tokens_cap: Annotated[int | None, typer.Option()] = None,
    block_tokens: Annotated[int | None, typer.Option(help="tokens per hash block")] = None,
    correlation_header: Annotated[str, typer.Option(help="'' to disable")] = "X-Session-ID",
    num_gpus: Annotated[int, typer.Option(help="for per-GPU throughput")] = 1,
    ignore_eos: Annotated[bool, typer.Option(help="pin output lengths")] = True,
    request_timeout: Annotated[float, typer.Option(
        help="seconds for one complete response")] = 600.0,
    grace: Annotated[float, typer.Option(
        help="seconds in-flight requests may finish after --duration")] = 30.0,
    server_gone_after: Annotated[float, typer.Option(
        help="stop (exit 3) when no request found the server for this many seconds")] = 10.0,
    max_failed_ratio: Annotated[float, typer.Option(
        help="exit 3 when more than this share of measured requests failed")] = 0.1,
    api_key: Annotated[str | None, typer.Option(
        envvar="KVBENCH_API_KEY", show_envvar=True,
        help="Bearer token for the server (never printed nor written)")] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(
        help="goodput: a request meets the SLO with TTFT at most this (ms)")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(
        help="goodput: ... and TPOT at most this (ms)")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option(
        help="goodput: ... and end-to-end latency at most this (ms)")] = None,
    compress: Annotated[bool, typer.Option(
        help="write records.jsonl.gz (long runs; every kvbench reader takes either)")] = False,
    fmt: Annotated[str, typer.Option("--format", help="human | json")] = "human",
    profile: Annotated[str | None, typer.Option(
        help="validity profile: agentx (InferenceX AgentX v1.0: its settings where none is "
             "given, and a submission_valid verdict with reasons in summary.json)")] = None,
    run_marker: Annotated[str | None, typer.Option(
        help="the run's cache-bust id (default: random per run); a run reusing one can hit "
             "the prefixes an earlier run left. Under agentx it seeds the per-tree markers "
             "as the harness's benchmark id does (benchmarks/agentx_oracle.py passes the "
             "harness's, so both send the same markers)")] = None,
) -> None:
    """Replay agentic sessions closed-loop; concurrency is the number of live sessions.

    Exit status: 0 the run completed; 2 a usage error (a bad option or trace, found before
    the server is contacted); 3 the run failed or the server is unusable (no model list, more
    than --max-failed-ratio of the requests failed, the server stopped answering); 130
    interrupted (Ctrl-C), with summary.json written for the requests that finished."""
    from pydantic import ValidationError

    from kvbench.errors import ReplayInterrupted
    from kvbench.replay import ReplayConfig, run_replay
    from kvbench.replay.http import Endpoint
    from kvbench.replay.lanes import check_sockets
    from kvbench.replay.runner import load_sessions
    from kvbench.workload import SyntheticSpec

    if fmt not in ("human", "json"):
        raise ReplayOptionError(f"--format {fmt!r} is not one of: human, json")
    if not 0 <= max_failed_ratio <= 1:
        raise ReplayOptionError(f"--max-failed-ratio {max_failed_ratio} must be within 0..1")
    synthetic = trace == "synthetic"
    given = {"duration_s": duration, "warmup_requests": warmup_requests, "start": start,
             "think_time_cap_s": think_time_cap, "system_idle_cap_s": system_idle_cap,
             "warmup_per_lane": warmup_per_lane, "warmup_grace_s": warmup_grace,
             "tree_idle_cap_s": tree_idle_cap, "seed": seed}
    lanes = concurrency if concurrency is not None else (
        1 if session_rate is None else OPEN_LOOP_CAP)
    settings: dict = {}
    if profile is not None:
        from kvbench.replay.profile import profile_named, replay_settings

        settings = replay_settings(profile_named(profile), lanes, given)
    chosen = {**{"warmup_requests": 0, "start": "beginning", "think_time_cap_s": 60.0,
                 "seed": 0},
              **{k: v for k, v in given.items() if v is not None}, **settings}
    try:
        cfg = ReplayConfig(
            url=url, model=model or "", endpoint=endpoint,
            trace=None if synthetic else _trace_paths(trace),
            synthetic=(SyntheticSpec(num_sessions=sessions, seed=chosen["seed"]) if synthetic
                       else None),
            concurrency=lanes, workers=workers, session_rate=session_rate, arrival=arrival,
            duration_s=chosen.get("duration_s"), max_requests=max_requests,
            warmup_requests=chosen["warmup_requests"], seed=chosen["seed"],
            warmup_per_lane=chosen.get("warmup_per_lane"),
            warmup_grace_s=chosen.get("warmup_grace_s"),
            tree_idle_cap_s=chosen.get("tree_idle_cap_s"),
            max_context_tokens=max_context_length, corpus=corpus,
            correlation_header=correlation_header or None, output_dir=output,
            tokenizer=tokenizer, num_gpus=num_gpus, max_tokens_cap=max_tokens_cap,
            think_time_cap_s=chosen["think_time_cap_s"], think_time_scale=think_time_scale,
            system_idle_cap_s=chosen.get("system_idle_cap_s"),
            end_session_on_context_overflow=chosen.get("end_session_on_context_overflow", False),
            start=chosen["start"], start_ratio=chosen.get("start_ratio", (0.0, 1.0)),
            order=order, profile=profile, run_marker=run_marker,
            time_scale=time_scale,
            block_tokens=block_tokens, ignore_eos=ignore_eos,
            request_timeout_s=request_timeout, grace_s=grace, server_gone_s=server_gone_after,
            compress_records=compress, api_key=api_key or None,
            slo_ms={k: v for k, v in (("ttft", slo_ttft_ms), ("tpot", slo_tpot_ms),
                                      ("e2e", slo_e2e_ms)) if v is not None},
        )
    except ValidationError as e:
        lines = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']} (got "
                 f"{shown(err['input'])})" for err in e.errors()]
        raise ReplayOptionError("invalid replay options: " + "; ".join(lines)) from None
    # everything local first (URL, trace, sockets), so a typo never waits on a server
    Endpoint.parse(url)
    workload = load_sessions(cfg)
    if cfg.workers > 1:
        from kvbench.replay.workers import check_shards

        check_shards(cfg, len(workload))
    check_sockets(cfg.concurrency)
    if not model:
        cfg = cfg.model_copy(update={"model": _first_model(url, cfg.api_key)})
    try:
        summary = run_replay(cfg, progress=fmt == "human", sessions=workload)
    except ReplayInterrupted as e:
        print(e.message, file=sys.stderr)
        raise SystemExit(130) from None
    if fmt == "json":
        from kvbench.files import print_json

        print_json(summary)
    else:
        _print_human(summary, output)
    if (stopped := summary["run"].get("stopped")) is not None:
        raise ReplayError(f"the replay stopped early: {stopped}",
                          hint=f"the requests before it are in {output / 'summary.json'}")
    _check_failed_ratio(summary["requests"], max_failed_ratio, output)


def _print_profile(console, verdict: dict) -> None:  # type: ignore[no-untyped-def]
    if verdict["submission_valid"]:
        console.print(f"[green]{verdict['profile']}: a valid submission[/]")
        return
    console.print(f"[bold red]{verdict['profile']}: not a valid submission[/]")
    for reason in verdict["reasons"]:
        console.print(f"  {reason}", markup=False, highlight=False)


def _check_failed_ratio(req: dict, limit: float, output: Path) -> None:
    """A run whose requests mostly failed (every connect refused, say) is a failed run, not
    a result: exit non-zero. Cancelled requests (cut off by the end of the run) do not count."""
    measured = req["profiled"] + req["errors"]
    ratio = req["errors"] / measured if measured else 0.0
    if ratio > limit:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(req["errors_by_kind"].items()))
        raise ReplayError(
            f"{req['errors']} of {measured} measured requests failed ({ratio:.0%} > "
            f"--max-failed-ratio {limit:g}): {kinds}",
            hint=f"records with each error are in {output / 'records.jsonl'}")


def _print_human(s: dict, output: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    req = s["requests"]
    table = Table(title=f"replay: {req['profiled']} profiled requests, {req['errors']} errors")
    for col in ("metric", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    few = None
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "interactivity_tok_s"):
        d = s[key]
        few = few or d.get("few_samples")
        table.add_row(key + (" *" if d.get("few_samples") else ""),
                      *("-" if d[k] is None else f"{d[k]:.2f}"
                        for k in ("mean", "p50", "p90", "p99")))
    console.print(table)
    if few:
        console.print(f"* {few}")
    good = s.get("goodput")
    if good and good["requests_s"] is not None:
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in good["slo_ms"].items())
        console.print(f"goodput: {good['requests_s']:.2f} req/s ({good['met']} of {good['of']}"
                      f" requests met {slo})")
    tp = s["throughput"]
    if tp["output_tok_s"] is not None:
        console.print(f"throughput: in {tp['input_tok_s']:.0f} tok/s, out "
                      f"{tp['output_tok_s']:.0f} tok/s, {tp['requests_s']:.2f} req/s over "
                      f"{s['window_s']:.1f} s")
    if s["cache"]["hit_rate"] is not None:
        ideal = s["cache"].get("ideal_hit_rate")
        console.print(f"cache hit rate (server usage): {s['cache']['hit_rate']:.1%}" + (
            f" of an ideal {ideal:.1%} (an unlimited cache on these requests)"
            if ideal is not None else ""))
    prompt = s.get("prompt") or {}
    if prompt.get("agrees") is False:
        console.print(f"[bold red]prompt size:[/] the server counted {prompt['server_tokens']:,}"
                      f" prompt tokens for {prompt['sent_tokens']:,} sent "
                      f"({prompt['deviation']:+.1%}): its reuse is not the trace's (pass the "
                      "model's --tokenizer)")
    warm = s.get("warm_cache") or {}
    if warm.get("passed") is False:
        console.print(f"[bold red]warm cache:[/] {warm['suspect_sessions']} of "
                      f"{warm['checked_sessions']} sessions' first requests hit KV from before "
                      "this run")
    if (s.get("run") or {}).get("time_scale", 1.0) != 1.0:
        console.print(f"timings in the server's clock (x{s['run']['time_scale']:g} wall time, "
                      f"from the {s['run']['time_scale_source']})")
    client = s["client"]
    if client["saturated"]:
        console.print("[bold red]client saturated:[/] " + "; ".join(client["reasons"]))
    if req["errors_by_kind"]:
        console.print(f"errors: {req['errors_by_kind']}")
    if s.get("profile"):
        _print_profile(console, s["profile"])
    records = "records.jsonl" + (".gz" if s["run"].get("compressed") else "")
    console.print(f"records: {output / records}  summary: {output / 'summary.json'}")


def _trace_paths(trace: str) -> list[Path]:
    """A trace path, or the bundled sessions for the word `bundled`."""
    if trace != "bundled":
        return [Path(trace)]
    from kvbench.workload.choice import parse_trace

    return parse_trace(["bundled"]).trace_paths or []
