"""`kvbench serve-sim` (the embedded engine over HTTP) and `kvbench simulate` (traces through
the same core in virtual time, no HTTP)."""

from __future__ import annotations

import errno
import math
import sys
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.cli.sim_loop import DEFAULT_SIM_CONCURRENCY, judge_open_loop, loop_mode
from kvbench.cli.trace_option import TRACE_HELP
from kvbench.errors import SimError

_POLICIES = ("write_through", "write_through_selective", "write_back")
_MODEL_HELP = "Model profile name (kvbench.models) or the built-in 'reference-8b'."
_ENGINE_HELP = ("Engine profile: sglang | vllm | transformers (kvbench/sim/engines) or a YAML "
                "path; sets step overheads, attention costing and layer efficiency.")

# Options shared by `serve-sim` and `simulate`: one spelling and help text for both.
ModelOpt = Annotated[str, typer.Option(help=_MODEL_HELP)]
HardwareOpt = Annotated[str, typer.Option(help="Hardware profile (kvbench.hardware).")]
TpOpt = Annotated[int, typer.Option(help="Tensor-parallel ranks.")]
PrecisionOpt = Annotated[str | None, typer.Option(
    help="Weight precision: bf16 | fp8 | fp4 (default: from the model name).")]
AcceptOpt = Annotated[float, typer.Option(
    help="Speculative decoding: tokens accepted per step (1 = off).")]
VerifyOpt = Annotated[int, typer.Option(
    help="Speculative decoding: tokens verified per step (drafts + 1).")]
GpuTokensOpt = Annotated[str | None, typer.Option(
    help="Device KV pool tokens per rank, or 'inf'; default: from HBM and weights.")]
# The replay's workload bounds (`kvbench replay`, kvbench.workload.bounds): same names, same
# meaning, so one command line describes a replay and a simulation of the same requests.
DurationOpt = Annotated[float | None, typer.Option(
    help="Closed loop: seconds (simulated) to keep sending, as replay --duration.")]
MaxRequestsOpt = Annotated[int | None, typer.Option(
    help="Closed loop: profiled requests to send, as replay --max-requests.")]
WarmupOpt = Annotated[int, typer.Option(help="Closed loop: first requests excluded.")]
MaxTokensCapOpt = Annotated[int | None, typer.Option(help="Cap on output tokens per request.")]
ThinkCapOpt = Annotated[float | None, typer.Option(
    help="Closed loop: longest think time, s (default 60; agentx: none).")]
ThinkScaleOpt = Annotated[float, typer.Option(help="Closed loop: think times times this.")]
StartOpt = Annotated[str, typer.Option(
    help="beginning | sampled (a lane's first session starts at an instant of its "
         "recording, its live requests before it sent as warm-up).")]
WarmupPerLaneOpt = Annotated[int | None, typer.Option(
    help="Closed loop: one-token requests per lane after the t* warm-up, as replay "
         "--warmup-per-lane (agentx: 10).")]
MaxContextOpt = Annotated[int | None, typer.Option(
    help="Sessions whose peak prompt + output exceeds this are left out (the server's "
         "context length).")]
ProfileOpt = Annotated[str | None, typer.Option(
    help="agentx: the replay's AgentX v1.0 settings where none is given (start at t*, "
         "10 one-token warm-up requests per lane, a 3600 s phase, seed 42, no per-delay cap).")]
SeedOpt = Annotated[int | None, typer.Option(
    help="Seed of the sampled start and synthetic sessions (default 0; agentx: 42).")]
OrderOpt = Annotated[str, typer.Option(
    help="trace | shuffled (lanes take the sessions in an order drawn from --seed).")]
BlockTokensOpt = Annotated[int | None, typer.Option(
    help="Tokens per hash block instead of the trace's (scales prompts).")]
MaxInputOpt = Annotated[int | None, typer.Option(help="Turns with more input tokens are skipped.")]
SessionsOpt = Annotated[int | None, typer.Option(
    help="--trace synthetic: the sessions; --trace agentx: at least this many corpus sessions "
    "(default: AgentX's 393, or the lanes).")]



def _policy(value: str) -> str:
    if value not in _POLICIES:
        raise SimError(f"--write-policy: {value!r} is not one of {', '.join(_POLICIES)}")
    return value


def _gpu_tokens(value: str | None, costs, hardware: str) -> float:
    from kvbench.sim.sizing import gpu_tier_tokens

    if value is None:
        return gpu_tier_tokens(costs, hardware)
    if value.lower() in ("inf", "unlimited"):
        return math.inf
    try:
        tokens = int(value)
    except ValueError:
        tokens = 0
    if tokens < 1:
        raise SimError(f"--gpu-tokens: expected a positive integer or 'inf', got {value!r}")
    return tokens


def _host_tokens(tokens: int | None, gb: float | None, costs) -> int:
    from kvbench.sim.sizing import host_tier_tokens

    if tokens is not None and gb is not None:
        raise SimError("give --host-tokens or --host-cache-gb, not both")
    if tokens is not None:
        if tokens < 0:
            raise SimError(f"--host-tokens must be >= 0, got {tokens}")
        return tokens
    return host_tier_tokens(costs, gb) if gb is not None else 0


def _engine_config(profile: str | None, block_tokens: int | None = None, **kw):
    """The engine's scheduler settings, with the KV manager its profile names (and its block
    size unless the plan gives one)."""
    from kvbench.sim.engine_config import EngineConfig
    from kvbench.sim.engine_profile import load_engine_profile

    p = load_engine_profile(profile)
    return EngineConfig(kv_manager=p.kv_manager,
                        block_tokens=int(block_tokens or p.block_tokens.value), **kw)


ContextOpt = Annotated[int | None, typer.Option(
    help="The served context (max_model_len): a longer prompt + output is refused with a "
    "400, counted as rejected: context (default: the model's max_position_embeddings)")]


def _context(context_tokens: int | None, model: str) -> int | None:
    from kvbench.sim.sizing import model_context_tokens

    if context_tokens is not None and context_tokens < 1:
        raise SimError(f"--context-tokens {context_tokens}; allowed: >= 1")
    return context_tokens if context_tokens is not None else model_context_tokens(model)


def _bounds(concurrency: int | None, profile: str | None = None, **opts):
    """The replay's workload bounds for a closed-loop run; None for open loop (which takes
    no bounds: every request at its trace time). A validity profile (replay/profile.py)
    gives its settings where the command gives none, as `kvbench replay --profile` does."""
    from kvbench.workload.bounds import WorkloadBounds

    defaults = {"duration": None, "max_requests": None, "warmup_requests": 0,
                "max_tokens_cap": None, "think_time_cap": 60.0, "think_time_scale": 1.0,
                "start": "beginning", "seed": 0, "block_tokens": None, "max_input_tokens": None,
                "warmup_per_lane": None, "max_context_tokens": None, "start_ratio": (0.0, 1.0),
                "order": "trace", "tree_idle_cap_s": None, "system_idle_cap_s": None}
    given = {k: v for k, v in opts.items() if v is not None}
    if profile is not None and concurrency is not None:
        from kvbench.replay.profile import profile_named, replay_settings

        names = {"duration_s": "duration", "think_time_cap_s": "think_time_cap"}
        mine = {names.get(k, k): v for k, v in replay_settings(
            profile_named(profile), concurrency,
            {"duration_s": opts.get("duration"), "think_time_cap_s": opts.get("think_time_cap"),
             **{k: opts.get(k) for k in ("start", "seed", "warmup_per_lane")}}).items()
            if names.get(k, k) in defaults}
        given = {**mine, **given}
    opts = {**defaults, **given}
    if concurrency is None:
        given = [k for k, v in opts.items() if v != defaults[k]]
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise SimError(f"{flags}: workload bounds apply to closed-loop lanes",
                           hint="drop --open-loop (session lanes, as kvbench replay)")
        return None
    return WorkloadBounds(
        concurrency=concurrency, duration_s=opts["duration"], max_requests=opts["max_requests"],
        warmup_requests=opts["warmup_requests"], max_tokens_cap=opts["max_tokens_cap"],
        think_time_cap_s=opts["think_time_cap"], think_time_scale=opts["think_time_scale"],
        start=opts["start"], start_ratio=opts["start_ratio"], seed=opts["seed"],
        block_tokens=opts["block_tokens"], max_input_tokens=opts["max_input_tokens"],
        warmup_per_lane=opts["warmup_per_lane"], max_context_tokens=opts["max_context_tokens"],
        order=opts["order"], tree_idle_cap_s=opts["tree_idle_cap_s"],
        system_idle_cap_s=opts["system_idle_cap_s"], tree_markers=_tree_markers(profile))


def _tree_markers(profile: str | None) -> bool:
    """Whether the profile's replay opens each chat prompt with the harness's per-tree
    cache-bust marker (replay/profile.py `chat_prompts`, on the chat endpoint: the replay's
    default, as `kvbench run` sends)."""
    if profile is None:
        return False
    from kvbench.replay.profile import chat_prompts

    return chat_prompts(profile, chat=True)[1]


def _source(trace: list[str], num_sessions: int | None, seed: int):
    """The `--trace` values as a WorkloadSource (workload/choice.py)."""
    from kvbench.workload.choice import parse_trace

    if num_sessions is not None and num_sessions < 1:
        raise SimError(f"--sessions: {num_sessions}; allowed: >= 1")
    return parse_trace(trace, synthetic_sessions=num_sessions or 64, seed=seed,
                       corpus_sessions=num_sessions)


def _speculate(costs, accept_length: float, verify_tokens: int):
    if verify_tokens < 1:
        raise SimError(f"--spec-verify-tokens {verify_tokens}: allowed: >= 1 (1 = no "
                       "speculative decoding)")
    if accept_length == 1.0 and verify_tokens == 1:
        return costs
    return costs.with_speculation(accept_length, verify_tokens)


# Each DP rank is a whole simulated engine: a bound that keeps a simulation finite, far past
# the DP-attention groups of real deployments (one rank per GPU of a group of nodes).
MAX_DP_RANKS = 256


def _check_choices(precision: str | None, router: str = "round_robin") -> None:
    """Words the simulator would otherwise ignore or fall back from silently."""
    from kvbench.models.profile import PARAM_BYTES
    from kvbench.sim.ranks import ROUTERS

    if precision is not None and precision not in PARAM_BYTES:
        raise SimError(f"--precision {precision!r}; allowed: {', '.join(PARAM_BYTES)}")
    if router not in ROUTERS:
        raise SimError(f"--router {router!r}; allowed: {', '.join(ROUTERS)}")


@app.command("serve-sim")
def serve_sim(
    model: ModelOpt = "reference-8b",
    context_tokens: ContextOpt = None,
    hardware: HardwareOpt = "h200",
    tp: TpOpt = 1,
    precision: PrecisionOpt = None,
    spec_accept_length: AcceptOpt = 1.0,
    spec_verify_tokens: VerifyOpt = 1,
    host_cache_gb: Annotated[float | None, typer.Option(
        help="Host KV pool per rank in GB (1e9), like --hicache-size; 0 = no host tier.")] = None,
    gpu_tokens: GpuTokensOpt = None,
    page_size: Annotated[int, typer.Option(help="Tokens per KV page.")] = 64,
    write_policy: Annotated[str, typer.Option(help=" | ".join(_POLICIES))] = "write_through",
    time_scale: Annotated[float | None, typer.Option(
        help="Wall clock: simulated seconds per wall second (>1 runs faster; default 1).")]
    = None,
    clock: Annotated[str, typer.Option(
        help="wall: simulated time follows wall time x --time-scale; virtual: it moves only "
             "while every lane of a kvbench replay has a request in the engine, each event "
             "stamped with it (timings independent of the client's speed; sim/lockstep.py)")]
    = "wall",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 30000,
    seed: Annotated[int, typer.Option(help="Seed of the generated text.")] = 0,
    served_model_name: Annotated[str | None, typer.Option(
        help="Model name in /v1/models and responses (default: --model).")] = None,
    max_running_requests: Annotated[int, typer.Option(help="Running-request cap.")] = 256,
    chars_per_token: Annotated[int, typer.Option(
        help="Characters per pseudo-token of a text prompt; 0 = one token per word.")] = 0,
    tokenizer: Annotated[str | None, typer.Option(
        help="Count and key text prompts with this HuggingFace tokenizer (name or "
             "directory) instead of words.")] = None,
    engine_profile: Annotated[str, typer.Option(help=_ENGINE_HELP)] = "sglang",
) -> None:
    """Serve the embedded engine: OpenAI-compatible API, SGLang /metrics, simulated time."""
    from aiohttp import web

    from kvbench.sim.server import CLOCKS, ServerConfig, SimServer, build_app, quiet_logging
    from kvbench.sim.sizing import resolve_costs

    if clock not in CLOCKS:
        raise SimError(f"--clock {clock!r}; allowed: {', '.join(CLOCKS)}")
    if clock == "virtual" and time_scale is not None:
        raise SimError(f"--time-scale {time_scale:g} with --clock virtual: a virtual clock "
                       "follows the client's lanes, not wall time",
                       hint="drop --time-scale, or --clock wall")
    time_scale = 1.0 if time_scale is None else time_scale
    if time_scale <= 0 or page_size < 1 or chars_per_token < 0:
        raise SimError("--time-scale must be > 0, --page-size >= 1, --chars-per-token >= 0")
    _check_choices(precision)
    costs = _speculate(resolve_costs(model, hardware, tp, precision, engine=engine_profile),
                       spec_accept_length, spec_verify_tokens)
    config = ServerConfig(
        served_model_name=served_model_name or model,
        gpu_tokens=_gpu_tokens(gpu_tokens, costs, hardware),
        host_tokens=_host_tokens(None, host_cache_gb, costs), page_tokens=page_size,
        write_policy=_policy(write_policy), time_scale=time_scale, clock=clock, seed=seed,
        max_running_requests=max_running_requests, chars_per_token=chars_per_token,
        tokenizer=tokenizer, context_tokens=_context(context_tokens, model))
    sock = _listen(host, port)  # a bad address is a clean error before anything starts
    quiet_logging()
    server = SimServer(config, costs)
    print(f"kvbench serve-sim: {costs.label} ({costs.engine} engine), gpu tier "
          f"{config.gpu_tokens} tokens, host tier "
          f"{config.host_tokens} tokens ({config.write_policy}), "
          f"{'virtual clock' if clock == 'virtual' else f'time x{time_scale:g}'}; "
          f"listening on http://{host}:{port}", file=sys.stderr, flush=True)
    # handler_cancellation: a client that disconnects cancels its request (queue and running
    # set); shutdown_timeout: SIGTERM stops the server promptly even with streams open.
    web.run_app(build_app(server), sock=sock, print=None, access_log=None,
                handler_cancellation=True, shutdown_timeout=1.0)


def _listen(host: str, port: int):
    import socket

    if not 1 <= port <= 65535:
        raise SimError(f"--port {port} is not a TCP port (allowed: 1..65535)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise SimError(f"--host {host!r} does not resolve: {e}",
                       hint="an address such as 127.0.0.1 or 0.0.0.0") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(1024)
    except OSError as e:
        sock.close()
        hint = ("another server holds it: pick another --port" if e.errno == errno.EADDRINUSE
                else None)
        raise SimError(f"cannot listen on {host}:{port}: {e.strerror}", hint=hint) from None
    return sock


@app.command("simulate")
def simulate(
    trace: Annotated[list[str], typer.Option(help=TRACE_HELP + ".")],
    model: ModelOpt = "reference-8b",
    context_tokens: ContextOpt = None,
    hardware: HardwareOpt = "h200",
    tp: TpOpt = 1,
    precision: PrecisionOpt = None,
    spec_accept_length: AcceptOpt = 1.0,
    spec_verify_tokens: VerifyOpt = 1,
    gpu_tokens: GpuTokensOpt = None,
    host_tokens: Annotated[int | None, typer.Option(help="Host KV pool tokens per rank.")] = None,
    host_cache_gb: Annotated[float | None, typer.Option(
        help="Host KV pool per rank in GB (1e9) instead of --host-tokens.")] = None,
    concurrency: Annotated[int | None, typer.Option(
        help=f"Session lanes (closed loop; default {DEFAULT_SIM_CONCURRENCY}).")] = None,
    open_loop: Annotated[bool, typer.Option(
        "--open-loop", help="Send at the trace's own times instead (no lanes).")] = False,
    arrival_scale: Annotated[float, typer.Option(
        help="Open loop: multiply trace times by this (2 = half the request rate).")] = 1.0,
    write_policy: Annotated[str, typer.Option(help=" | ".join(_POLICIES))] = "write_through",
    max_running_requests: Annotated[int, typer.Option(help="Running-request cap.")] = 256,
    chunked_prefill_tokens: Annotated[int, typer.Option(
        help="Prefill token budget per step.")] = 8192,
    scheduler_recv_interval: Annotated[int, typer.Option(
        help="SGLang's --scheduler-recv-interval: new requests are taken in once per this "
             "many decode steps (at once after a prefill or when idle).")] = 1,
    compare: Annotated[bool, typer.Option(
        help="Run the GPU-resident arm (no host tier) beside the offload arm.")] = False,
    output_format: Annotated[str, typer.Option("--format", help="json | table")] = "table",
    output: Annotated[str | None, typer.Option(help="Also write the JSON here.")] = None,
    engine_profile: Annotated[str, typer.Option(help=_ENGINE_HELP)] = "sglang",
    duration: DurationOpt = None,
    max_requests: MaxRequestsOpt = None,
    warmup_requests: WarmupOpt = 0,
    max_tokens_cap: MaxTokensCapOpt = None,
    think_time_cap: ThinkCapOpt = None,
    think_time_scale: ThinkScaleOpt = 1.0,
    start: StartOpt = None,
    seed: SeedOpt = None,
    order: OrderOpt = "trace",
    block_tokens: BlockTokensOpt = None,
    max_input_tokens: MaxInputOpt = None,
    warmup_per_lane: WarmupPerLaneOpt = None,
    max_context_length: MaxContextOpt = None,
    profile: ProfileOpt = None,
    sessions: SessionsOpt = None,
    dp: Annotated[int, typer.Option(
        help="DP-attention ranks, each with its own GPU and host tier (closed loop).")] = 1,
    router: Annotated[str, typer.Option(
        help="DP router: round_robin | consistent_hash | sticky.")] = "round_robin",
) -> None:
    """Replay traces through the simulator in virtual time; per-tier hit rates, TTFT/E2E
    percentiles and throughput. With --concurrency, the lanes follow the replay's workload
    bounds (--duration, --max-requests, --max-tokens-cap, --think-time-cap, --start, ...):
    the same requests `kvbench replay` sends with the same options."""
    from kvbench.files import JSON_OPTS, write_output
    from kvbench.sim.simulate import SimSetup, run, run_sessions
    from kvbench.sim.sizing import resolve_costs
    from kvbench.sim.trace import load_traces

    check_format(output_format, ("json", "table"), SimError)
    _check_choices(precision, router)
    costs = _speculate(resolve_costs(model, hardware, tp, precision, engine=engine_profile),
                       spec_accept_length, spec_verify_tokens)
    concurrency = loop_mode(concurrency, open_loop, arrival_scale)
    bounds = _bounds(concurrency, profile, duration=duration, max_requests=max_requests,
                     warmup_requests=warmup_requests, max_tokens_cap=max_tokens_cap,
                     think_time_cap=think_time_cap, think_time_scale=think_time_scale,
                     start=start, seed=seed, block_tokens=block_tokens,
                     max_input_tokens=max_input_tokens, warmup_per_lane=warmup_per_lane,
                     max_context_tokens=max_context_length, order=order)
    if profile is not None and bounds is None:
        raise SimError("--profile: a validity profile applies to closed-loop lanes",
                       hint="drop --open-loop")
    source = _source(trace, sessions, bounds.seed if bounds is not None else 0)
    if source.kind != "traces" and bounds is None:
        raise SimError(f"--trace {source.kind if source.kind == 'synthetic' else 'agentx'} "
                       "needs closed-loop lanes, not --open-loop")
    traces = [] if bounds is not None else load_traces(source.trace_paths)
    workload = None if bounds is None else source.sessions_for(
        model.split("/")[-1].lower(), concurrency)
    host = _host_tokens(host_tokens, host_cache_gb, costs)
    if compare and host == 0:
        raise SimError("--compare needs a host tier", hint="add --host-tokens or --host-cache-gb")
    engine = _engine_config(engine_profile, max_running_requests=max_running_requests,
                            chunked_prefill_tokens=chunked_prefill_tokens,
                            context_tokens=_context(context_tokens, model),
                            recv_interval_steps=scheduler_recv_interval)
    gpu = _gpu_tokens(gpu_tokens, costs, hardware)
    arms = {"resident": 0, "offload": host} if compare else {"offload" if host else "resident":
                                                             host}
    if not 1 <= dp <= MAX_DP_RANKS:
        raise SimError(f"--dp {dp}: allowed: 1..{MAX_DP_RANKS} DP-attention ranks")
    if dp != 1 and bounds is None:
        raise SimError("--dp: DP-attention ranks need closed-loop lanes, not --open-loop")
    results = {}
    for name, h in arms.items():
        setup = SimSetup(gpu, h, _policy(write_policy), concurrency, engine, arrival_scale,
                         dp=dp, router=router)
        results[name] = (run(traces, costs, setup) if workload is None
                         else run_sessions(workload, costs, setup, bounds))
    if concurrency is None:
        for summary in results.values():
            judge_open_loop(summary, traces, arrival_scale)
    else:
        from kvbench.workload.working_set import lanes_warning

        line = lanes_warning("simulate", len(workload), concurrency, bounds.recycle)
        if line:
            print(line, file=sys.stderr)
    for name, summary in results.items():
        answered = (summary.get("rejected") or {}).get("context", 0)
        if not summary.get("requests") and not answered and not summary.get("errors"):
            # no latency, rate or hit rate means anything over no request (0/0 printed as 0%);
            # requests refused or failed are an answer and say so themselves
            raise SimError(f"the simulation ({name}) completed no request: its bounds ended it "
                           "before any finished", hint="a longer --duration, more "
                           "--max-requests, or fewer --warmup-requests")
    doc = results[next(iter(results))] if len(results) == 1 else {"arms": results}
    if output:
        import orjson

        write_output(output, orjson.dumps(doc, option=JSON_OPTS) + b"\n")
    if output_format == "json":
        from kvbench.files import print_json

        print_json(doc)
    else:
        from kvbench.sim.table import print_arms

        names = [t.name for t in traces] or [source.label(model.split("/")[-1].lower(),
                                                          concurrency)]
        print_arms(results, names)
