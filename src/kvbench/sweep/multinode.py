"""Run a multi-node (prefill/decode) row: every worker started (with `srun` on its node inside
a Slurm allocation, as a local process otherwise), readiness of every worker, then the
prefill/decode router in front of them; on exit everything is torn down, router first.

The router is sglang-router in PD mode (`--pd-disaggregation --prefill URL --decode URL`,
sglang-router 0.3.2 `launch_router --help`): it sends each request to one prefill and one
decode worker and streams the decode worker's answer, for SGLang workers and for the
embedded engine's (which serve the request whole on both, as they cannot hand KV over);
aggregated workers (an srt-slurm recipe's `agg` mode) sit behind it in its regular mode
(`--worker-urls`).

A row whose adapter builds it whole (`EngineAdapter.builds_workers`: sglang-disagg, and the
srt-slurm recipe rows of engines/dynamo.py) runs the workers and the front (router or Dynamo
frontend) the adapter built, `serve_built_workers`; any other multi-node row runs one
single-node server per worker row (sweep/workers.py), `serve_workers`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvbench.errors import KvbenchError, SweepError
from kvbench.sweep.workers import Worker, placement, workers_of

WORKERS_DIR = "workers"
ROUTER_DIR = "router"
CPU_ONLY_ENGINES = ("sim",)
DEFAULT_GPUS_PER_NODE = 8
# Flags a worker needs for its role, per framework (sglang server_args: --disaggregation-*;
# 8998 is its default bootstrap port, which the router needs beside each prefill URL).
ROLE_ARGS: dict[str, dict[str, list[str]]] = {
    "sglang": {"prefill": ["--disaggregation-mode", "prefill"],
               "decode": ["--disaggregation-mode", "decode"]},
}
PREFILL_BOOTSTRAP: dict[str, str] = {"sglang": "8998"}
# Frameworks whose rows the stand-in runs (their adapter builds the whole row). Each command
# line is checked by the parser of its program (launch/stand_in.py PROGRAM_CHECKS: SGLang's,
# sglang-router's, `vllm serve`'s, Dynamo's worker and frontend parsers); dynamo-trt is absent:
# dynamo.trtllm's parser imports TensorRT-LLM, which has no CPU build.
STAND_IN_FRAMEWORKS = ("sglang-disagg", "dynamo-vllm", "dynamo-sglang", "vllm")


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    addr: str


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where workers may run: the Slurm allocation's nodes (started with srun), or here."""

    nodes: tuple[Node, ...]
    srun: bool

    @classmethod
    def current(cls) -> Allocation:
        nodelist = os.environ.get("SLURM_JOB_NODELIST")
        if not (os.environ.get("SLURM_JOB_ID") and nodelist and shutil.which("srun")):
            return cls((Node("localhost", "127.0.0.1"),), srun=False)
        names = _scontrol(["show", "hostnames", nodelist]).split()
        return cls(tuple(Node(n, _node_addr(n)) for n in names), srun=True)

    def prefix(self, node: Node, worker: Worker, gpus: int) -> list[str]:
        """The launcher in front of a worker's argv: one srun step on its node."""
        if not self.srun:
            return []
        return ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node.name}",
                f"--job-name={worker.name}", "--kill-on-bad-exit=1", "--export=ALL",
                *([f"--gres=gpu:{gpus}"] if gpus else [])]


def _scontrol(args: list[str]) -> str:
    try:
        out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SweepError(f"scontrol {' '.join(args)} failed: {e}") from None
    if out.returncode != 0:
        raise SweepError(f"scontrol {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def _node_addr(name: str) -> str:
    """The node's NodeAddr (what its servers are reached at), else its name."""
    for token in _scontrol(["show", "node", "-o", name]).split():
        if token.startswith("NodeAddr="):
            return token.split("=", 1)[1] or name
    return name


ROUTER_MODULE = "sglang_router"
# Embedded workers behind a router run on a wall clock: two engines cannot share one virtual
# clock (sim/lockstep.py), and the router passes on neither the lanes' headers nor the clock
# handshake, so the replay is told the scale instead of reading it from the server.
ROUTED_SIM_TIME_SCALE = 50.0


def routed_sim_clock(opts: Any) -> list[str]:
    """serve-sim's clock arguments for a worker behind a router: the options' --time-scale
    where they give one (in their engine arguments already), else a 50x wall clock."""
    if opts.time_scale is not None:
        return []
    return ["--clock", "wall", "--time-scale", f"{ROUTED_SIM_TIME_SCALE:g}"]


def routed_time_scale(opts: Any) -> float:
    return opts.time_scale if opts.time_scale is not None else ROUTED_SIM_TIME_SCALE


def check_router_installed(jobs: list) -> None:
    """Rows that start sglang-router on this machine need its package, which is not one of
    kvbench's own dependencies: refused before the sweep starts, with the install command
    (issue 39: examples/disagg.yaml ended in `ModuleNotFoundError: sglang_router` after the
    README's install)."""
    import importlib.util

    from kvbench.errors import SweepOptionError

    need = [j for j in jobs if j.is_multinode
            and (j.row.get("router") or {}).get("name") == "sglang-router"]
    if not need or importlib.util.find_spec(ROUTER_MODULE) is not None:
        return
    version = need[0].row["router"].get("version")
    pin = f"=={version}" if version else ""
    raise SweepOptionError(
        f"{need[0].config_key} runs its workers behind sglang-router (python -m "
        f"{ROUTER_MODULE}.launch_router), which is not installed here ({len(need)} job(s) "
        "need it)", hint=f"pip install sglang-router{pin}")


@dataclass(slots=True)
class Endpoint:
    """What the replay talks to: the router, with the first prefill worker's metrics."""

    base_url: str
    metrics_url: str
    served_model_name: str
    correlation_header: str | None = None
    workers: list[dict[str, Any]] = field(default_factory=list)


def router_argv(engine: str, urls: dict[str, list[str]], port: int, metrics_port: int
                ) -> list[str]:
    """sglang-router over the workers' URLs by role: PD mode over prefill and decode workers,
    its regular mode over aggregated ones."""
    from kvbench.engines.disaggregation import router_worker_args

    bootstrap = PREFILL_BOOTSTRAP.get(engine)
    workers = [(role, url, bootstrap if role == "prefill" else None)
               for role, role_urls in urls.items() for url in role_urls]
    argv = [sys.executable, "-m", "sglang_router.launch_router", *router_worker_args(workers)]
    # agentic prefills run for minutes: never time a request out early
    return [*argv, "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-port", str(metrics_port), "--request-timeout-secs", "14400",
            "--disable-retries"]


@contextlib.contextmanager
def serve_workers(run: Any, plans: dict[str, Any], free_port: Any, server_env: Any
                  ) -> Iterator[Endpoint]:
    """Start every worker of `run.spec`'s row and the router; yield the endpoint. `run` is
    the job's state (spec, job_dir, events); `plans` maps worker name -> Plan."""
    from kvbench.engines import get_adapter
    from kvbench.launch import ServerProcess
    from kvbench.matrix import Job

    spec, job_dir = run.spec, run.job_dir
    framework = spec.row["framework"]
    if get_adapter(framework, multinode=True).builds_workers:
        with serve_built_workers(run, free_port, server_env) as endpoint:
            yield endpoint
        return
    workers = workers_of(spec.row)
    alloc = Allocation.current()
    cpu_only = framework in CPU_ONLY_ENGINES
    where = placement(workers, [n.name for n in alloc.nodes], DEFAULT_GPUS_PER_NODE, cpu_only)
    nodes = {n.name: n for n in alloc.nodes}
    adapter = get_adapter(framework)
    opts = spec.options
    with contextlib.ExitStack() as stack:
        servers, urls, records = [], {"prefill": [], "decode": []}, []
        first = None
        for w in workers:
            node = nodes[where[w.name]]
            wdir = job_dir / WORKERS_DIR / w.name
            wdir.mkdir(parents=True, exist_ok=True)
            launch = adapter.build(Job(spec.config_key, w.row, spec.scenario), plans[w.name],
                                   port=free_port(), host="0.0.0.0" if alloc.srun else
                                   "127.0.0.1", model_path=opts.model_path, work_dir=wdir)
            prefix = alloc.prefix(node, w, 0 if cpu_only else w.gpus)
            argv = [*prefix, *launch.argv, *ROLE_ARGS.get(adapter.name, {}).get(w.role, []),
                    *opts.engine_args,
                    *(routed_sim_clock(opts) if adapter.name == "sim" else ())]
            patches = list(launch.image_mods)
            skip = opts.skip_image_mods
            remote = alloc.srun and node.name != os.environ.get("SLURMD_NODENAME")
            outcomes = _patch_remote(prefix, patches, skip) if remote and patches else None
            base = _at(launch.base_url, node.addr)
            server = ServerProcess(argv, env=server_env({**launch.env, **w.env}),
                                   log_path=wdir / "server.log",
                                   ready_url=_at(launch.health_url, node.addr),
                                   ready_timeout_s=opts.timeouts.ready_s, cwd=wdir,
                                   patches=() if remote else patches, skip_patches=skip,
                                   name=w.name)
            stack.enter_context(server)
            servers.append(server)
            urls[w.role].append(base)
            records.append({"name": w.name, "role": w.role, "node": node.name, "url": base,
                            "tp": w.row["tp"], "ep": w.row["ep"], "gpus": w.gpus,
                            "argv": argv,
                            "patches": server.patch_outcomes if outcomes is None else outcomes})
            if first is None:
                first = (launch, base)
        run.phase = "ready"
        run.events.phase("ready")
        for server in servers:  # readiness of every worker before the router starts
            server.wait_ready()
        port = free_port()
        rdir = job_dir / ROUTER_DIR
        rdir.mkdir(parents=True, exist_ok=True)
        # its own free port for metrics: port + 10000 runs past 65535 for high free ports
        router = ServerProcess(router_argv(adapter.name, urls, port, free_port()),
                               env=server_env({}), log_path=rdir / "server.log",
                               ready_url=f"http://127.0.0.1:{port}/health",
                               ready_timeout_s=opts.timeouts.ready_s, cwd=rdir, name="router")
        stack.enter_context(router)
        router.wait_ready()
        launch, base = first
        yield Endpoint(base_url=f"http://127.0.0.1:{port}",
                       metrics_url=_at(launch.metrics_url, urlsplit(base).hostname or ""),
                       served_model_name=launch.served_model_name, workers=records)


@contextlib.contextmanager
def serve_built_workers(run: Any, free_port: Any, server_env: Any) -> Iterator[Endpoint]:
    """A row whose adapter builds every worker and the front (sglang-disagg's router, a
    recipe row's Dynamo frontend or SGLang router; none behind vLLM's own server, whose leader
    worker then serves the row): each worker process its own srun step on the node the
    adapter placed it on, with the GPUs it takes there and its command line as the adapter
    built it (`{node<rank>}` filled in with the node's address; a free port of its own where
    it has one: two slurmds may share a host); the front once every worker is ready. With
    `options.stand_in == "sim"` every worker step runs the real command line through its
    program's own parser (launch/stand_in.py PROGRAM_CHECKS), then the embedded engine serves
    in its place, sized by the worker's plan; the front's command line is checked by its own
    parser and sglang-router (`router_argv`) stands in for it over the embedded workers (the
    real router's policy flags need SGLang's worker APIs, Dynamo's frontend finds its
    workers through etcd/NATS, which embedded workers do not join). The services a recipe row
    needs (etcd, NATS, a Mooncake master) serve Dynamo's workers only: under the stand-in
    they are listed, not started. Any failure or signal unwinds the ExitStack: every step is
    stopped, the front first."""
    from kvbench.engines import get_adapter
    from kvbench.launch import ServerProcess
    from kvbench.launch.stand_in import check_of
    from kvbench.matrix import Job
    from kvbench.plan.workers import plan_workers

    spec, job_dir, opts = run.spec, run.job_dir, run.spec.options
    framework = spec.row["framework"]
    stand_in = opts.stand_in == "sim"
    runners = None
    if spec.runner_config:
        from kvbench.recipe import load_runners

        runners = load_runners(Path(spec.runner_config))
    job = spec.job()
    alloc = Allocation.current()
    host = "0.0.0.0" if alloc.srun else "127.0.0.1"
    router_port = free_port()
    try:
        launch = get_adapter(framework, multinode=True).build(
            job, None, port=router_port, model_path=opts.model_path, work_dir=job_dir,
            runners=runners, dummy_weights=opts.load_format == "dummy", host=host)
    except KvbenchError as e:  # the adapter refuses the row (no recipe, ...)
        raise SweepError(e.message) from None
    refused = [w for w in launch.warnings if w.startswith("plan refused: ")]
    if refused:
        raise SweepError("; ".join(refused))
    if launch.nodes > len(alloc.nodes) and alloc.srun:
        raise SweepError(f"the row's workers need {launch.nodes} nodes; the allocation has "
                         f"{len(alloc.nodes)}")
    checks = [check_of(ws.argv, ws.program_len) for ws in launch.workers]
    if stand_in and (framework not in STAND_IN_FRAMEWORKS or None in checks):
        raise SweepError(f"--stand-in {opts.stand_in}: no parser here checks a {framework} "
                         "worker's command line", hint="stand-in rows: "
                         + ", ".join(STAND_IN_FRAMEWORKS))
    if launch.services and not stand_in:
        raise SweepError(f"a {framework} row runs its workers behind "
                         f"{', '.join(x.name for x in launch.services)} under srtctl, in its "
                         "containers; kvbench runs it with --stand-in sim only")
    front_check = check_of(launch.argv, launch.program_len)  # None: no front of its own
    # a worker's own plan: by role and index, else its role's (an `agg` worker: the row's
    # prefill, which the generator budgets for; a recipe may run more workers than the row)
    planned = plan_workers(job, runners).workers
    plans = {(wp.role, wp.index): wp for wp in planned}
    for wp in planned:
        plans.setdefault((wp.role, -1), wp)
    # every worker on one host when Slurm is absent
    addrs = {f"{{node{rank}}}": (alloc.nodes[rank] if alloc.srun else alloc.nodes[0]).addr
             for rank in range(launch.nodes)}
    with contextlib.ExitStack() as stack:
        servers: list[Any] = []
        urls: dict[str, list[str]] = {}
        records: list[dict[str, Any]] = []
        first_metrics = None
        placeholder_urls: dict[str, str] = {}
        names: set[str] = set()
        for ws, worker_check in zip(launch.workers, checks, strict=True):
            name = f"{ws.role}-{ws.index}"
            if len(ws.nodes) > 1 or name in names:
                raise SweepError(f"{name} spans {max(len(ws.nodes), 2)} nodes: one server over "
                                 "several nodes needs a step per node with its node rank, "
                                 "which the embedded engine does not serve")
            names.add(name)
            wp = plans.get((ws.role, ws.index)) or plans[
                ("prefill" if ws.role == "agg" else ws.role, -1)]
            node = alloc.nodes[ws.nodes[0]] if alloc.srun else alloc.nodes[0]
            wdir = job_dir / WORKERS_DIR / name
            wdir.mkdir(parents=True, exist_ok=True)
            port = free_port()
            argv = _filled_nodes(_with_value(ws.argv, "--port", str(port), add=False), addrs)
            argv += list(() if stand_in else opts.engine_args)
            base = f"http://{node.addr}:{port}"
            placeholder_urls[ws.url] = base
            prefix = alloc.prefix(node, Worker(ws.role, ws.index, wp.job.row, {}), ws.gpus)
            for fname, content in ws.files.items():
                (wdir / fname).write_text(_filled_nodes([content], addrs)[0])
            env = dict(zip(ws.env, _filled_nodes(list(ws.env.values()), addrs), strict=True))
            record: dict[str, Any] = {
                "name": name, "role": ws.role, "node": node.name, "url": base,
                "tp": wp.job.row["tp"], "ep": wp.job.row.get("ep") or 1, "gpus": ws.gpus,
                "argv": [*prefix, *argv], "plan": ws.plan or wp.plan.to_json()}
            if stand_in:
                sim = get_adapter("sim").build(
                    Job(spec.config_key, {**wp.job.row, "framework": "sim"}, spec.scenario),
                    wp.plan, port=port, host=host, work_dir=wdir)
                # the name the replay asks for is the front's (a recipe's served-model-name)
                serve = [*_with_value(sim.argv, "--served-model-name",
                                      launch.served_model_name), *opts.engine_args,
                         *routed_sim_clock(opts)]
                check = wdir / "engine-check.json"
                file = wdir / "stand-in.json"
                file.write_text(json.dumps({"engine": worker_check, "argv": argv,
                                            "program_len": ws.program_len, "serve": serve,
                                            "check_path": str(check)}))
                step = [*prefix, sys.executable, "-m", "kvbench.launch.stand_in", str(file)]
                ready, metrics = _at(sim.health_url, node.addr), _at(sim.metrics_url, node.addr)
                record.update({"served-by": "kvbench serve-sim (stand-in)", "step": step,
                               "serve-argv": serve, "engine-check": str(check), "env": env})
            else:
                step = [*prefix, *argv]
                ready = _at(_filled(ws.health_url, ws.url, base), node.addr)
                metrics = _at(_filled(ws.metrics_url, ws.url, base), node.addr)
                record.update({"served-by": ws.argv[ws.program_len - 1], "step": step})
            server = ServerProcess(step, env=server_env(env), log_path=wdir / "server.log",
                                   ready_url=ready, ready_timeout_s=opts.timeouts.ready_s,
                                   cwd=wdir, name=name)
            stack.enter_context(server)
            servers.append(server)
            urls.setdefault(ws.role, []).append(base)
            record["patches"] = []
            records.append(record)
            if first_metrics is None:
                first_metrics = metrics
        run.phase = "ready"
        run.events.phase("ready")
        for server in servers:  # readiness of every worker before the front starts
            server.wait_ready()
        rdir = job_dir / ROUTER_DIR
        rdir.mkdir(parents=True, exist_ok=True)
        real_front = _filled_nodes([placeholder_urls.get(a, a) for a in launch.argv], addrs)
        front_env = dict(zip(launch.env, _filled_nodes(list(launch.env.values()), addrs),
                             strict=True))
        if not real_front and not stand_in:  # no front of its own: the leader worker serves
            yield Endpoint(base_url=records[0]["url"], metrics_url=first_metrics,
                           served_model_name=launch.served_model_name,
                           correlation_header=launch.correlation_header, workers=records)
            return
        if stand_in and front_check is not None:
            check = rdir / "router-check.json"
            file = rdir / "stand-in.json"
            file.write_text(json.dumps({"engine": front_check, "argv": real_front,
                                        "program_len": launch.program_len,
                                        "check_path": str(check)}))
            out = subprocess.run([sys.executable, "-m", "kvbench.launch.stand_in", str(file)],
                                 capture_output=True, text=True, timeout=300,
                                 env={**os.environ, **server_env(front_env)})
            if out.returncode != 0:
                raise SweepError(f"the front's command line: "
                                 f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
        if stand_in:  # sglang-router over the embedded workers, in the front's place
            rargv = router_argv(str(checks[0]), urls, router_port, free_port())
            health = f"http://127.0.0.1:{router_port}/health"
        else:
            rargv, health = real_front, launch.health_url
        (rdir / "router-argv.json").write_text(json.dumps(
            {"argv": real_front, "env": front_env, "ran": rargv,
             "services": [{"name": x.name, "argv": x.argv,
                           "started": not stand_in} for x in launch.services]},
            indent=1) + "\n")
        router = ServerProcess(rargv, env=server_env({}), log_path=rdir / "server.log",
                               ready_url=health, ready_timeout_s=opts.timeouts.ready_s,
                               cwd=rdir, name="router")
        stack.enter_context(router)
        router.wait_ready()
        yield Endpoint(base_url=f"http://127.0.0.1:{router_port}", metrics_url=first_metrics,
                       served_model_name=launch.served_model_name,
                       correlation_header=launch.correlation_header, workers=records)


def _with_value(argv: list[str], flag: str, value: str, add: bool = True) -> list[str]:
    """`argv` with `flag`'s value replaced (appended when absent, unless not `add`)."""
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
        return out
    return [*out, flag, value] if add else out


def _filled_nodes(values: list[str], addrs: dict[str, str]) -> list[str]:
    """`values` with each `{node<rank>}` of the adapter's (engines/dynamo.py: addresses are
    not known before the allocation) replaced by that node's address."""
    out = []
    for value in values:
        for placeholder, addr in addrs.items():
            value = value.replace(placeholder, addr)
        out.append(value)
    return out


def _filled(url: str, placeholder_base: str, base: str) -> str:
    """A worker URL of the adapter's (http://{node<rank>}:port/...) at the worker's address."""
    return url.replace(placeholder_base, base, 1)


def _at(url: str, addr: str) -> str:
    """`url` on host `addr` (servers bind 0.0.0.0 or 127.0.0.1; clients reach the node)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{addr}:{parts.port}"))


def _patch_remote(prefix: list[str], patches: list[dict], skip: tuple[str, ...] = ()
                  ) -> list[dict]:
    """Apply a worker's image modifications on its own node (one srun step), before its
    start."""
    import json

    argv = [*prefix, sys.executable, "-m", "kvbench.launch.patcher", json.dumps(patches),
            json.dumps(list(skip))]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        raise SweepError(f"engine patches failed on {prefix[4].split('=', 1)[1]}: "
                         f"{lines[-1] if lines else f'exit {out.returncode}'}")
    return json.loads(out.stdout)


def clear_workers(job_dir: Path) -> None:
    for name in (WORKERS_DIR, ROUTER_DIR):
        shutil.rmtree(job_dir / name, ignore_errors=True)
