"""Dynamo rows (`dynamo-vllm`, `dynamo-sglang`, `dynamo-trt`) and multi-node vLLM rows: the
processes NVIDIA's srtctl starts for the row's srt-slurm recipe (engines/srt_recipe.py), as
InferenceX's NVIDIA runners run it (runners/launch_<runner>.sh: `srtctl apply -f
$CONFIG_FILE`).

srtctl (NVIDIA/srt-slurm; facts and citations in data/dynamo.yaml) places the recipe's
prefill/decode/aggregated workers on the allocation (core/topology.py allocate_endpoints:
whole nodes for a worker of a node or more, else packed GPU ranges; decode starts on a fresh
node), starts one process per node of a worker (vLLM DP: one per node with its local ranks;
TRT-LLM: one MPI step for the whole worker), each `python3 -m dynamo.<backend>` with the
model, the worker's mode and placement flags and then every key of the recipe's
`<backend>_config.<mode>` as a flag (backends/*.py `_config_to_cli_args`, keys sorted), in
the recipe's environment; and the front on the head node, by the recipe's `frontend.type`
(data/dynamo.yaml frontends): Dynamo's frontend (`python3 -m dynamo.frontend`, which finds
the workers through etcd and NATS on the infra node); SGLang's router (`sglang_router.
launch_router` over the workers' URLs, the workers then SGLang's own `sglang.launch_server`);
or none, vLLM's own server (`vllm serve`, its leader on the public port, the other node ranks
headless) serving the row. The recipe fixes every engine setting (memory fraction, offload
pools, KV transfer): this adapter starts what it says and refuses the row, with the
planner's arithmetic, when a worker's own plan (plan/workers.py `plan_workers`) does not fit
its node.

Addresses are not known before the allocation: `{node<rank>}` names a node of the row's
allocation (0-based); ports are srtctl's (data/dynamo.yaml ports) except the front's public
port, which is kvbench's --port. A row whose runner pins an srtctl no recording could read
(data/dynamo.yaml unread-pins) is rendered as the named release renders it, with a warning."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from kvbench import yamldoc
from kvbench.engines.base import BuildOptions, EngineAdapter
from kvbench.engines.disaggregation import router_worker_args
from kvbench.engines.rules import DATA_DIR
from kvbench.engines.spec import LaunchSpec, ServiceSpec, WorkerSpec
from kvbench.engines.srt_recipe import Recipe, config_file_of, recipe_image_mods, recipe_of
from kvbench.errors import EngineError, shown
from kvbench.expr import expand

if TYPE_CHECKING:
    from kvbench.matrix import Job
    from kvbench.plan import Plan

MODEL_IN_CONTAINER = "/model"  # core/runtime.py: the checkpoint is mounted at /model
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)


class BackendFacts(BaseModel):
    model_config = _STRICT
    program: list[str]
    model_flag: str | None = Field(alias="model-flag")  # None: the model is positional
    # the engine's own server that a recipe's frontend.type of that name starts instead
    direct: dict[str, BackendFacts] = Field(default_factory=dict)
    # recipe keys srtctl drops (it sets them from the placement), and on headless ranks
    drops: list[str] = Field(default_factory=list)
    headless_drops: list[str] = Field(default_factory=list, alias="headless-drops")


class FrontendFacts(BaseModel):
    model_config = _STRICT
    program: list[str]  # empty: no process of its own (`workers: leader`)
    args: list[str] = Field(default_factory=list)
    workers: Literal["discovery", "sglang-router", "leader"]
    health_path: str = Field(alias="health-path")
    metrics_path: str | None = Field(alias="metrics-path")
    correlation_header: str | None = Field(alias="correlation-header")
    env: dict[str, str]
    recipe_env: bool = Field(alias="recipe-env")
    etcd_nats: bool = Field(alias="etcd-nats")


class UnreadPin(BaseModel):
    model_config = _STRICT
    runner: str
    model_prefix: str = Field(alias="model-prefix")
    pin: str
    line: str
    rendered_as: str = Field(alias="rendered-as")


class SrtctlFacts(BaseModel):
    """data/dynamo.yaml."""

    model_config = _STRICT
    ports: dict[str, int]
    backends: dict[str, BackendFacts]
    frontends: dict[str, FrontendFacts]
    unread_pins: list[UnreadPin] = Field(alias="unread-pins")
    worker_env: dict[str, str] = Field(alias="worker-env")
    vllm_connectors: dict[str, dict[str, str]] = Field(alias="vllm-connectors")
    rejected_fields: dict[str, list[str]] = Field(alias="rejected-fields")


@cache
def facts() -> SrtctlFacts:
    raw = yamldoc.load_file(DATA_DIR / "dynamo.yaml", "srtctl facts", EngineError)
    return SrtctlFacts.model_validate(raw)


# ---- placement (core/topology.py) -------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Endpoint:
    """One logical worker: its mode, index within the mode, nodes and GPUs of each node."""

    mode: str
    index: int
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]


def allocate(recipe: Recipe, workers: Sequence[int]) -> list[Endpoint]:
    """core/topology.py allocate_endpoints (v1.0.36:226-330), over the worker node ranks."""
    res, gpn = recipe.resources, recipe.resources.gpus_per_node
    out: list[Endpoint] = []
    node, offset = 0, 0

    def simple(mode: str, count: int, per: int) -> None:
        nonlocal node, offset
        span = -(-per // gpn)
        if per < 1:
            raise EngineError(f"recipe {recipe.name}: resources give {mode} workers no GPUs")
        for i in range(count):
            if node + (span if per >= gpn else 1 + (offset + per > gpn)) > len(workers):
                raise EngineError(
                    f"recipe {recipe.name}: resources place {count} {mode} worker(s) of "
                    f"{per} GPU(s) on more than the {len(workers)} node(s) the job has")
            if per >= gpn:
                out.append(Endpoint(mode, i, tuple(workers[node + j] for j in range(span)),
                                    tuple(range(gpn))))
                node += span
                continue
            if offset + per > gpn:
                node, offset = node + 1, 0
            out.append(Endpoint(mode, i, (workers[node],), tuple(range(offset, offset + per))))
            offset += per
            if offset >= gpn or res.spread_workers:
                node, offset = node + 1, 0

    if res.prefill_workers:
        simple("prefill", res.prefill_workers, res.gpus_per("prefill"))
    if res.decode_workers:
        if offset > 0 and node + 1 < len(workers):  # decode starts on a node of its own
            node, offset = node + 1, 0
        simple("decode", res.decode_workers, res.gpus_per("decode"))
    if res.agg_workers:
        simple("agg", res.agg_workers, res.gpus_per("agg"))
    return out


def allocation_nodes(recipe: Recipe) -> int:
    """cli/submit.py: the job's --nodes, the modes' nodes plus a dedicated etcd/NATS node."""
    res = recipe.resources
    dedicated = bool(recipe.infra.get("etcd_nats_dedicated_node"))
    return res.prefill_nodes + res.decode_nodes + res.agg_nodes + int(dedicated)


# ---- one worker process ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Process:
    endpoint: Endpoint
    node: int
    gpus: tuple[int, ...]
    rank: int  # node rank in the endpoint, or (vLLM DP per node) the first DP rank
    system_port: int
    kv_events_port: int
    nixl_port: int
    http_port: int  # an SGLang server's --port (0: a follower, which serves none)
    bootstrap_port: int | None  # a prefill endpoint's KV bootstrap port


def processes(recipe: Recipe, endpoints: list[Endpoint]) -> list[Process]:
    """backends/*.py endpoints_to_processes and core/topology.py NodePortAllocator: one per
    node of an endpoint, each with the next system port and KV-event port; vLLM DP per node
    starts at the node's first DP rank, takes a KV-event port per local rank and shares one
    NIXL port block per endpoint. HTTP ports go per node in strides (the leader's only, or
    every DP process's), bootstrap ports per node one by one (a prefill endpoint's leader's,
    or every DP process's). TRT-LLM launches one MPI step per endpoint (its leader's). Behind
    vLLM's own frontend vLLM DP is one process per node as without DP (v1.0.53
    backends/vllm.py:600-601: `vllm serve` manages its local ranks)."""
    ports = facts().ports
    out: list[Process] = []
    system, events, nixl = ports["system-base"], ports["kv-events-base"], ports["vllm-nixl-base"]
    http: dict[int, int] = {}
    boot: dict[int, int] = {}

    def next_port(table: dict[int, int], node: int, base: str, step: int) -> int:
        port = table.get(node, ports[base])
        table[node] = port + step
        return port

    stride = ports["sglang-http-stride"]
    per_node_dp = recipe.backend_type == "vllm" and recipe.frontend_type != "vllm"
    for ep in endpoints:
        dp = _dp_size(recipe, ep.mode) if per_node_dp else None
        block = nixl
        nixl += dp or 0
        prefill = ep.mode == "prefill"
        shared = next_port(boot, ep.nodes[0], "sglang-bootstrap-base", 1) \
            if prefill and not dp else None
        for rank, node in enumerate(ep.nodes):
            first = rank * len(ep.gpus) if dp else rank
            http_port = next_port(http, node, "sglang-http-base", stride) \
                if dp or rank == 0 else 0
            bootstrap = next_port(boot, node, "sglang-bootstrap-base", 1) \
                if dp and prefill else shared
            proc = Process(ep, node, ep.gpus, first, system, events, block if dp else nixl,
                           http_port, bootstrap)
            system += 1
            events += len(ep.gpus) if dp else 1
            nixl += 0 if dp else 1
            if recipe.backend_type != "trtllm" or rank == 0:
                out.append(proc)
    return out


def _dp_size(recipe: Recipe, mode: str) -> int | None:
    cfg = recipe.mode_config(mode)
    value = cfg.get("data-parallel-size", cfg.get("data_parallel_size"))
    return int(value) if value is not None else None


def config_flags(config: Mapping[str, Any]) -> list[str]:
    """backends/vllm.py, sglang.py `_config_to_cli_args`: keys sorted, `_` -> `-`, true a bare
    flag, false and None dropped, a list its items after the flag."""
    out: list[str] = []
    for key, value in sorted(config.items()):
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            out += [flag] if value else []
        elif isinstance(value, list):
            out += [flag, *map(str, value)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def served_name(recipe: Recipe, mode: str, model_dir: str) -> str:
    cfg = recipe.mode_config(mode)
    return str(cfg.get("served-model-name") or cfg.get("served_model_name") or model_dir)


def frontend_facts(recipe: Recipe, where: str) -> FrontendFacts:
    """The recipe's front (data/dynamo.yaml frontends), or why srtctl or kvbench starts none.
    With no front of its own the one aggregated worker's leader serves the API: srtctl's
    load-time checks of that (v1.0.53 core/schema.py:1742-1766 _validate_vllm_frontend)."""
    fe = facts().frontends.get(recipe.frontend_type)
    if fe is None:
        raise EngineError(f"{where}: frontend.type {recipe.frontend_type!r}; kvbench renders "
                          + ", ".join(facts().frontends))
    res = recipe.resources
    if fe.workers == "leader":
        if res.prefill_workers or res.decode_workers or res.agg_workers != 1:
            raise EngineError(
                f"{where}: frontend.type {recipe.frontend_type} serves from one aggregated "
                f"worker, the recipe has {res.prefill_workers} prefill, {res.decode_workers} "
                f"decode and {res.agg_workers} aggregated (srtctl: \"supports exactly one "
                "aggregate worker\", core/schema.py _validate_vllm_frontend)")
        if recipe.frontend.get("enable_multiple_frontends"):
            raise EngineError(
                f"{where}: frontend.type {recipe.frontend_type} binds the server directly; "
                "srtctl refuses enable_multiple_frontends (core/schema.py "
                "_validate_vllm_frontend)")
    return fe


def served_at(fe: FrontendFacts, proc: Process, leader: Process, port: int) -> str:
    """Where a worker process answers HTTP (its health and metrics): Dynamo's system server of
    the process; behind SGLang's router the SGLang server of its endpoint's leader (the one
    the router lists, frontends/sglang.py:100-109); behind vLLM's own server that server, the
    leader's on the public port (a headless rank serves nothing of its own)."""
    if fe.workers == "discovery":
        return f"http://{{node{proc.node}}}:{proc.system_port}"
    if fe.workers == "sglang-router":
        return f"http://{{node{leader.node}}}:{leader.http_port}"
    return f"http://{{node{leader.node}}}:{port}"


def unread_pin_warnings(job: Job) -> list[str]:
    """The warning of a row whose runner pins an srtctl no recording could read
    (data/dynamo.yaml unread-pins)."""
    return [f"no recording verifies this row: its runner runs srtctl {u.pin} ({u.line}), "
            f"which could not be read; rendered as {u.rendered_as} renders it"
            for u in facts().unread_pins
            if job.row.get("runner") == u.runner and job.row.get("model-prefix") ==
            u.model_prefix]


def worker_program(recipe: Recipe) -> BackendFacts:
    """The worker's program: the backend's Dynamo module, or the engine's own server where the
    recipe's frontend.type starts one (data/dynamo.yaml backends.<type>.direct)."""
    be = facts().backends.get(recipe.backend_type)
    if be is None:
        raise EngineError(
            f"recipe {recipe.name}: backend.type {shown(recipe.backend['type'])} is not a "
            f"backend srtctl renders (allowed: {', '.join(facts().backends)})")
    if recipe.frontend_type == "dynamo":
        return be
    if recipe.frontend_type not in be.direct:
        raise EngineError(
            f"recipe {recipe.name}: frontend.type {recipe.frontend_type!r} in front of "
            f"{recipe.backend_type} workers; kvbench renders "
            + ", ".join(["dynamo", *be.direct]) + " for that backend")
    return be.direct[recipe.frontend_type]


def worker_argv(recipe: Recipe, proc: Process, model_dir: str, dump: str, port: int
                ) -> list[str]:
    """backends/<type>.py build_worker_command; `port` is the public port (vLLM's own server
    binds it, behind no frontend)."""
    kind = recipe.backend_type
    be = worker_program(recipe)
    dynamo = recipe.frontend_type == "dynamo"
    mode, ep = proc.endpoint.mode, proc.endpoint
    cfg = recipe.mode_config(mode)
    leader = f"{{node{ep.nodes[0]}}}"
    multi = len(ep.nodes) > 1
    if kind == "trtllm":  # trtllm.py: the engine's YAML is the mode's config
        numa = recipe.resources.gpu_type in ("gb200", "gb300") and mode != "agg"
        argv = (["numactl", "-m", "0,1"] if numa else []) + [
            "trtllm-llmapi-launch", *be.program, str(be.model_flag), MODEL_IN_CONTAINER,
            "--served-model-name", model_dir]
        if mode != "agg":
            argv += ["--disaggregation-mode", mode]
        argv += ["--extra-engine-args", f"/logs/trtllm_config_{mode}.yaml",
                 "--request-plane", "tcp"]
        if recipe.backend.get("publish_events_and_metrics"):
            argv.append("--publish-events-and-metrics")
        return argv
    if not dynamo and kind == "vllm":
        return _vllm_serve_argv(recipe, proc, be, cfg, model_dir, port)
    argv = [*be.program, str(be.model_flag), MODEL_IN_CONTAINER, "--served-model-name",
            served_name(recipe, mode, model_dir)]
    if kind == "sglang":
        for key in ("model-path", "model_path", "served-model-name", "served_model_name"):
            cfg.pop(key, None)
        argv += ["--host", "0.0.0.0", "--port", str(proc.http_port)]
        if mode != "agg":
            argv += ["--disaggregation-mode", mode]
            if mode == "prefill" and proc.bootstrap_port is not None:
                argv += ["--disaggregation-bootstrap-port", str(proc.bootstrap_port)]
        if multi:
            argv += ["--dist-init-addr", f"{leader}:{facts().ports['sglang-dist-init']}",
                     "--nnodes", str(len(ep.nodes)), "--node-rank", str(proc.rank)]
        if dynamo:  # sglang.py:379-381, 390-392: neither behind SGLang's own router
            argv += ["--dump-config-to", dump]
        events = _kv_events(recipe, mode, {"publisher": "zmq", "topic": "kv-events"})
        if events is not None:  # sglang.py get_kv_events_config_for_mode
            argv += ["--kv-events-config",
                     json.dumps({**events, "endpoint": f"tcp://*:{proc.kv_events_port}"})]
        if dynamo:
            argv += ["--request-plane", "tcp"]
        return argv + config_flags(cfg)
    # vllm
    if mode in ("prefill", "decode"):
        argv += ["--disaggregation-mode", mode]
    connector = cfg.pop("connector", None)
    connector = connector if connector is not None else recipe.backend.get("connector", "nixl")
    if connector and connector not in ("null", "none"):
        preset = facts().vllm_connectors.get(str(connector).lower())
        argv += ["--kv-transfer-config", json.dumps(preset) if preset else str(connector)]
    argv += ["--device-ids", ",".join(map(str, proc.gpus))]
    if _dp_size(recipe, mode) and recipe.backend.get("dp_launch_mode") == "per_node":
        for key in ("data-parallel-rpc-port", "data-parallel-size-local",
                    "data-parallel-start-rank", "data-parallel-hybrid-lb", "headless"):
            cfg.pop(key, None)
        argv += ["--data-parallel-size-local", str(len(proc.gpus)),
                 "--data-parallel-start-rank", str(proc.rank), "--data-parallel-address",
                 leader, "--data-parallel-rpc-port", str(facts().ports["vllm-dp-rpc"]),
                 "--data-parallel-hybrid-lb"]
    elif multi:
        argv += _node_rank_flags(proc)
    argv += ["--request-plane", "tcp", "--dump-config-to", dump]
    events = _kv_events(recipe, mode, {"publisher": "zmq", "topic": "kv-events",
                                       "enable_kv_cache_events": True})
    if events is not None:  # vllm.py get_kv_events_config_for_mode, the process's port
        argv += ["--kv-events-config",
                 json.dumps({**events, "endpoint": f"tcp://*:{proc.kv_events_port}"})]
    return argv + config_flags(cfg)


def _vllm_serve_argv(recipe: Recipe, proc: Process, be: BackendFacts, cfg: dict[str, Any],
                     model_dir: str, port: int) -> list[str]:
    """v1.0.53 backends/vllm.py:815-865, behind vLLM's own frontend: `vllm serve /model`, the
    leader on the public port, the other node ranks headless engine workers of it
    (--master-addr/--nnodes/--node-rank), the recipe's topology flags and connector dropped,
    served-model-name defaulted, then every key of the mode's config."""
    ep = proc.endpoint
    drops = set(be.drops) | (set(be.headless_drops) if proc.rank else set())
    for key in list(cfg):
        if str(key).replace("_", "-") in drops:
            del cfg[key]
    cfg.setdefault("served-model-name", served_name(recipe, ep.mode, model_dir))
    argv = [*be.program, MODEL_IN_CONTAINER]
    if proc.rank == 0:
        argv += ["--host", "0.0.0.0", "--port", str(port)]
    if len(ep.nodes) > 1:
        argv += _node_rank_flags(proc)
    argv += ["--device-ids", ",".join(map(str, proc.gpus))]
    return argv + config_flags(cfg)


def _node_rank_flags(proc: Process) -> list[str]:
    """vllm.py (both paths): vLLM's own multi-node launch, the leader's address, the node count
    and rank; every rank but the leader runs headless."""
    ep = proc.endpoint
    return ["--master-addr", f"{{node{ep.nodes[0]}}}", "--nnodes", str(len(ep.nodes)),
            "--node-rank", str(proc.rank)] + (["--headless"] if proc.rank else [])


def _kv_events(recipe: Recipe, mode: str, default: dict[str, Any]) -> dict[str, Any] | None:
    """backend.kv_events_config: true (prefill and decode) or per mode, true or a dict."""
    setting = recipe.backend.get("kv_events_config")
    if setting is True:
        return default if mode in ("prefill", "decode") else None
    if isinstance(setting, dict):
        value = setting.get("aggregated" if mode == "agg" else mode)
        if isinstance(value, dict):
            return {**default, **value}
        return default if value is True else None
    return None


def worker_env(recipe: Recipe, proc: Process, infra: int, head: int) -> dict[str, str]:
    """cli/mixins/worker_stage.py start_worker: Dynamo's discovery, the recipe's mode and
    global environment ({node}/{node_id} filled), the process's ports."""
    ports = facts().ports
    env = {"HEAD_NODE_IP": f"{{node{head}}}", "ETCD_ENDPOINTS": f"http://{{node{infra}}}:"
           f"{ports['etcd']}", "NATS_SERVER": f"nats://{{node{infra}}}:{ports['nats']}",
           "DYN_SYSTEM_PORT": str(proc.system_port), **facts().worker_env}
    if recipe.backend_type == "trtllm":  # start_endpoint_worker sets no request plane
        env.pop("DYN_REQUEST_PLANE")
    names = {"node": f"{{node{proc.node}}}", "node_id": str(proc.node)}
    for key, value in {**recipe.mode_environment(proc.endpoint.mode),
                       **{k: str(v) for k, v in recipe.environment.items()}}.items():
        env[key] = _fill(value, names)
    if recipe.backend_type == "trtllm":  # trtllm.py get_environment_for_mode: fresh per job
        env["TRTLLM_EPLB_SHM_NAME"] = f"moe_shared_{uuid.uuid4().hex}"
    if recipe.backend_type == "vllm":  # vllm.py get_process_environment
        index = proc.system_port - ports["system-base"]
        env["DYN_VLLM_KV_EVENT_PORT"] = str(proc.kv_events_port)
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(proc.nixl_port)
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = f"{{node{proc.node}}}"
        env["VLLM_PORT"] = str(ports["vllm-port-base"] + index * ports["vllm-port-stride"])
    store = recipe.backend.get("mooncake_kv_store")
    if store:  # backends/vllm.py get_mooncake_worker_env
        env |= {"MOONCAKE_MASTER": f"{{node{infra}}}:{ports['mooncake-master']}",
                "MOONCAKE_TE_META_DATA_SERVER":
                    f"http://{{node{infra}}}:{ports['mooncake-metadata']}/metadata",
                "MOONCAKE_LOCAL_HOSTNAME": f"{{node{proc.node}}}",
                "MOONCAKE_CONFIG_PATH": "/logs/mooncake_store_config.json",
                **{k: str(v) for k, v in (store.get("env") or {}).items()}}
    # worker_stage.py: a process on part of a node sees only its GPUs (vLLM takes --device-ids)
    if recipe.backend_type != "vllm" and len(proc.gpus) < recipe.resources.gpus_per_node:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, proc.gpus))
    if recipe.backend_type == "vllm" and len(proc.endpoint.nodes) > 1:
        # worker_stage.py:236 (v1.0.36 to c88ef731) `unset -- VLLM_PORT` before the command
        # of a multi-node endpoint: concurrent ranks would race for the same base port
        env.pop("VLLM_PORT", None)
    return env


def _fill(value: str, names: Mapping[str, str]) -> str:
    for key, sub in names.items():
        value = value.replace("{" + key + "}", sub)
    return value


def worker_files(recipe: Recipe, mode: str, infra: int) -> dict[str, str]:
    files = {}
    if recipe.backend_type == "trtllm":  # trtllm.py: yaml.safe_dump of the mode's config
        files[f"trtllm_config_{mode}.yaml"] = yaml.safe_dump(recipe.mode_config(mode))
    store = (recipe.backend.get("mooncake_kv_store") or {}).get("store_config")
    if store:  # vllm.py build_mooncake_store_config: the master on the infra node
        master = f"{{node{infra}}}:{facts().ports['mooncake-master']}"
        files["mooncake_store_config.json"] = json.dumps(
            {**store, "master_server_address": master}, indent=2)
    return files


# ---- the adapter --------------------------------------------------------------------------

def no_recipe_reason(job: Job) -> str:
    """Why a row without `CONFIG_FILE=` is refused: InferenceX's srt-slurm runners stop on it
    (runners/launch_gb300-nv.sh:510-512, launch_b300-nv.sh:187-189, launch_h200-dgxc-slurm.sh:
    16-19 and every other srt-slurm runner at 843c6254f: "CONFIG_FILE is not set. The
    srt-slurm path requires a CONFIG_FILE in additional-settings.", exit 1); the one other
    path, launch_gb200-nv.sh:328-338 for dynamo-sglang, runs
    benchmarks/multi_node/<prefix>_<precision>_gb200_dynamo-sglang.sh, a script 843c6254f
    does not have. A single-node row of these frameworks has no additional-settings at all
    (and no benchmarks/single_node script either)."""
    where = "its prefill/decode additional-settings name none" if job.is_multinode else \
        "a single-node row has no prefill/decode additional-settings"
    return (f"{job.exp_name}: a {job.framework} row runs the srt-slurm recipe that "
            f"CONFIG_FILE= names, and {where}: InferenceX's runner stops with "
            "\"CONFIG_FILE is not set. The srt-slurm path requires a CONFIG_FILE in "
            "additional-settings.\" (runners/launch_gb300-nv.sh:510-512)")


class DynamoAdapter(EngineAdapter):
    """A row rendered from its srt-slurm recipe: the front's command line (empty behind vLLM's
    own server), every worker process in `workers`, etcd/NATS (and a Mooncake master) in
    `services`."""

    name = "dynamo"
    data_name = "sim"  # no rule file: the recipe is the data (EngineAdapter.data is unused)
    builds_workers = True

    def launch_spec(self, job: Job, plan: Plan | None, o: BuildOptions) -> LaunchSpec:
        from kvbench.plan.workers import plan_workers

        config_file = config_file_of(job.row)
        if config_file is None:
            raise EngineError(no_recipe_reason(job))
        recipe = recipe_of(job, config_file, o.runners)
        for section, names in facts().rejected_fields.items():
            bad = sorted(set(names) & set(getattr(recipe, section)))
            if bad:
                raise EngineError(
                    f"{job.exp_name}: recipe {config_file}: srtctl rejects {section}."
                    f"{', '.join(bad)} (Unknown field; `srtctl apply` exits with Invalid "
                    "config, srt-slurm core/schema.py BenchmarkConfig)")
        fe = frontend_facts(recipe, f"{job.exp_name}: recipe {config_file}")
        if o.overrides or o.dummy_weights:
            raise EngineError(f"{job.exp_name}: --engine-arg and --load-format dummy apply "
                              "to single-engine rows; a recipe row runs the recipe")
        model_dir = (o.model_path or job.model).rstrip("/").rsplit("/", 1)[-1]
        dedicated = bool(recipe.infra.get("etcd_nats_dedicated_node"))
        nodes = allocation_nodes(recipe)
        workers_ranks = list(range(1 if dedicated else 0, nodes))
        infra = 0  # core/runtime.py Nodes: etcd/NATS on the first node
        planned = plan_workers(job, o.runners)
        plans = {wp.role: wp.plan for wp in planned.workers}
        be = worker_program(recipe)
        procs = processes(recipe, allocate(recipe, workers_ranks))
        mods = recipe_image_mods(recipe, config_file, job.row)
        leaders = {(p.endpoint.mode, p.endpoint.index): p for p in procs if p.rank == 0}
        workers = []
        for proc in procs:
            mode = proc.endpoint.mode
            wdir = (o.work_dir or Path(".")) / "logs"
            dump = str(wdir / f"node{proc.node}_config.json")
            argv = worker_argv(recipe, proc, model_dir, dump, o.port)
            # the engine's own arguments start where the model is named
            program_len = argv.index(be.model_flag or MODEL_IN_CONTAINER)
            env = worker_env(recipe, proc, infra, workers_ranks[0]) | dict(o.env_overrides or {})
            url = served_at(fe, proc, leaders.get((mode, proc.endpoint.index), proc), o.port)
            worker_plan = plans.get("prefill" if mode == "agg" else mode)
            # one srun step per process: a node of the worker, or (TRT-LLM, MPI) all of them
            step = (list(proc.endpoint.nodes) if recipe.backend_type == "trtllm"
                    else [proc.node])
            workers.append(WorkerSpec(
                role=mode, index=proc.endpoint.index, nodes=step, gpus=len(proc.gpus),
                argv=argv, program_len=program_len, env=env,
                files=worker_files(recipe, mode, infra) if proc.rank == 0 else {},
                url=url, metrics_url=f"{url}/metrics", health_url=f"{url}/health",
                plan=worker_plan.to_json() if worker_plan is not None else None,
                image_mods=mods))
        warnings = [f"plan refused: {e}" for e in planned.errors] + unread_pin_warnings(job)
        return self._frontend_spec(job, recipe, fe, workers, procs, nodes, infra, warnings,
                                   port=o.port, host=o.host)

    def _frontend_spec(self, job: Job, recipe: Recipe, fe: FrontendFacts,
                       workers: list[WorkerSpec], procs: list[Process], nodes: int, infra: int,
                       warnings: list[str], *, port: int, host: str) -> LaunchSpec:
        """frontends/<type>.py start_frontends: one front on the head node (kvbench's --port
        its public port): its program and own arguments, the workers it routes to (an SGLang
        router's leaders by mode, with each prefill's bootstrap port), the recipe's
        frontend.args `--key value` in the recipe's order; none behind vLLM's own server."""
        ports = facts().ports
        argv: list[str] = []
        env: dict[str, str] = {}
        if fe.program:
            argv = [*fe.program]
            if fe.workers == "sglang-router":  # each endpoint's leader, the one with a port
                argv += router_worker_args([(w.role, w.url, p.bootstrap_port)
                                            for w, p in zip(workers, procs, strict=True)
                                            if p.rank == 0])
            argv += [str(expand(a, {"port": port}, "dynamo.yaml frontends")[0])
                     for a in fe.args]
            for key, value in (recipe.frontend.get("args") or {}).items():
                if value is True:
                    argv.append(f"--{key}")
                elif value is not False and value is not None:
                    argv += [f"--{key}", str(value)]
            if fe.workers == "discovery":
                env = {"ETCD_ENDPOINTS": f"http://{{node{infra}}}:{ports['etcd']}",
                       "NATS_SERVER": f"nats://{{node{infra}}}:{ports['nats']}"}
            env |= fe.env | ({k: str(v) for k, v in recipe.environment.items()}
                             if fe.recipe_env else {})
            env |= {k: str(v) for k, v in (recipe.frontend.get("env") or {}).items()}
        services = [ServiceSpec(name="etcd", argv=["etcd"], ready_url=None),
                    ServiceSpec(name="nats", argv=["nats-server", "-js"], ready_url=None)] \
            if fe.etcd_nats else []
        if recipe.backend.get("mooncake_kv_store"):
            services.append(ServiceSpec(name="mooncake-master", argv=[
                "mooncake_master", f"--port={ports['mooncake-master']}"]))
        if recipe.frontend.get("enable_multiple_frontends") and \
                recipe.frontend.get("num_additional_frontends"):
            warnings.append(f"the recipe runs {recipe.frontend['num_additional_frontends'] + 1}"
                            " frontends behind nginx; kvbench starts one")
        base = f"http://{host}:{port}"
        return LaunchSpec(
            engine=job.framework, argv=argv, program_len=len(fe.program), env=env,
            services=services, base_url=base,
            metrics_url=f"{base}{fe.metrics_path}" if fe.metrics_path else
            workers[0].metrics_url,
            health_url=f"{base}{fe.health_path}",
            served_model_name=served_name(recipe, workers[0].role, job.model),
            correlation_header=fe.correlation_header, workers=workers, nodes=nodes,
            warnings=warnings + [f"{w.role} {w.index}: {x}" for w in workers
                                 for x in w.warnings])
