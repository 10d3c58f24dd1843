"""SGLang prefill/decode (PD) disaggregation: a multi-node row as its prefill and decode
servers, each planned on its own, behind sglang-router in `--pd-disaggregation` mode.

InferenceX's AMD launch chain (benchmarks/multi_node/amd_utils/server_sglang.sh at 843c6254f)
starts, per row: `num-worker` prefill servers, each on ceil(tp / gpus-per-node) nodes of its
own, then the decode servers on the nodes after them, each `python3 -m sglang.launch_server
--disaggregation-mode prefill|decode` with the row's KV transfer backend
(`kv-p2p-transfer`: mori), and the router on node 0 once every server answers. Only the
prefill side offloads KV to host DRAM (HiCache; the decode mirrors its page size): the
generator budgets `total-cpu-dram-gb` per node for the prefill role alone.

Each worker is built as a single-node SGLang server from a worker row (the row with the
role's tp/ep/dp-attn, `disagg-role` and `disagg-mtp-size`) and planned from it, so the data
file `data/sglang_disagg.yaml` and `plan/data/settings.yaml` can match on `role`. The row is
refused (warning `plan refused: ...`, as for single-node rows) when any worker's plan is, or
when the workers put on one node need more GPUs or host memory than it has.

Worker addresses are not known before the allocation: URLs read `http://{node<rank>}:port`,
rank counting the row's nodes from 0 (the Slurm runner fills them in)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.engines.argv import Settings
from kvbench.engines.base import EngineAdapter
from kvbench.engines.context import WORKER_MTP_KEY, WORKER_ROLE_KEY, BuildContext
from kvbench.engines.expr import expand
from kvbench.engines.rules import EngineData
from kvbench.engines.sglang import SGLangAdapter
from kvbench.engines.spec import LaunchSpec, WorkerSpec
from kvbench.errors import EngineError
from kvbench.units import GB

if TYPE_CHECKING:
    from kvbench.matrix import Job
    from kvbench.plan import Plan

ROLES = ("prefill", "decode")
ROUTER = "sglang-router"
_MTP_SETTING = re.compile(r"^DECODE_MTP_SIZE=(\d+)$")


class SGLangWorkerAdapter(SGLangAdapter):
    """One prefill or decode server: SGLang's flags for the worker row, from the PD data."""

    data_name = "sglang_disagg"

    def router_name(self, job: Job, data: EngineData) -> str | None:
        return None  # the PD router fronts the row, not one worker

    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        super().job_args(ctx, args)
        backend = ctx.row.get("kv-p2p-transfer")
        if backend:
            args.set("--disaggregation-transfer-backend", backend, "job", "row.kv-p2p-transfer")


def mtp_size(job: Job) -> int:
    """The decode's speculative steps: InferenceX's `DECODE_MTP_SIZE=` setting (default 0,
    no speculative flags on either role; server_sglang.sh build_server_config)."""
    for setting in (job.row["decode"].get("additional-settings") or []):
        if m := _MTP_SETTING.match(str(setting)):
            return int(m.group(1))
    return 0


def worker_job(job: Job, role: str) -> Job:
    """The single-node-shaped row of one `role` worker of a disaggregated row."""
    from kvbench.matrix import Job

    worker = job.row[role]
    row = {k: v for k, v in job.row.items() if k not in ROLES}
    steps = mtp_size(job)
    row |= {
        "tp": int(worker["tp"]), "ep": int(worker.get("ep") or 1),
        "dp-attn": bool(worker.get("dp-attn")), "pp": int(worker.get("pp") or 1),
        "pcp-size": int(worker.get("pcp-size") or 1), "dcp-size": int(worker.get("dcp-size") or 1),
        "conc": job.conc, WORKER_ROLE_KEY: role, WORKER_MTP_KEY: steps,
        # without DECODE_MTP_SIZE the launcher passes no speculative flags at all
        "spec-decoding": row.get("spec-decoding", "none") if steps else "none",
    }
    if role == "decode":
        # the decode keeps its KV on the GPU (server_sglang.sh: "applied to prefill only")
        row |= {"kv-offloading": "none", "kv-offload-backend": None}
    return Job(config_key=job.config_key, row=row, scenario=job.scenario)


@dataclass(slots=True)
class _Node:
    gpus: int = 0
    host_bytes: int = 0
    workers: tuple[str, ...] = ()


class SGLangDisaggAdapter(EngineAdapter):
    """A `sglang-disagg` row: the router's command line, with every worker in `workers`."""

    name = "sglang-disagg"
    data_name = "sglang_disagg"

    def build(  # type: ignore[override]
        self,
        job: Job,
        plan: Plan | None = None,
        *,
        port: int,
        host: str = "127.0.0.1",
        model_path: str | None = None,
        work_dir: Path | None = None,
        overrides: Sequence[str] = (),
        env_overrides: Mapping[str, str] | None = None,
        accuracy: bool | None = None,
        engine_version: str | None = None,
        dummy_weights: bool = False,
        runners: Any | None = None,
    ) -> LaunchSpec:
        """`plan` (the row's, sized for its prefill) is replaced by one plan per worker."""
        from kvbench.plan import plan_job

        if not job.is_multinode:
            raise EngineError(f"{job.exp_name}: a {self.name} row has prefill and decode "
                              "workers; this one has neither")
        worker_port = port + self.data.routers[ROUTER].engine_port_offset
        gpn = _gpus_per_node(job, runners)
        nodes: dict[int, _Node] = {}
        workers: list[WorkerSpec] = []
        errors: list[str] = []
        next_node = 0
        for role in ROLES:
            wjob = worker_job(job, role)
            wplan = plan_job(wjob, runners)
            gpus = int(wjob.row["tp"]) * int(wjob.row["pp"]) * int(wjob.row["pcp-size"])
            count = int(job.row[role].get("num-worker") or 1)
            layout = _layout(count, gpus, gpn, _role_nodes(job.row[role], role))
            for index, offsets in enumerate(layout):
                ranks = [next_node + o for o in offsets]
                name = f"{role} {index}"
                # workers sharing a node listen on successive ports
                wport = worker_port + len(nodes.get(ranks[0], _Node()).workers)
                spec = SGLangWorkerAdapter().build(
                    wjob, wplan, port=wport, host=host, model_path=model_path,
                    work_dir=work_dir, overrides=overrides, env_overrides=env_overrides,
                    accuracy=accuracy, engine_version=engine_version,
                    dummy_weights=dummy_weights)
                url = f"http://{{node{ranks[0]}}}:{wport}"
                workers.append(WorkerSpec(
                    role=role, index=index, nodes=ranks, argv=spec.argv,
                    program_len=spec.program_len, env=spec.env, files=spec.files, url=url,
                    metrics_url=url + self.data.metrics_path,
                    health_url=url + self.data.health_path, plan=wplan.to_json(),
                    sources=spec.sources, warnings=spec.warnings))
                errors += [f"{name}: {e}" for e in wplan.errors]
                for rank in ranks:
                    node = nodes.setdefault(rank, _Node())
                    node.gpus += -(-gpus // len(ranks))
                    node.host_bytes += wplan.projected_host_bytes
                    node.workers += (name,)
            next_node += max((o for offsets in layout for o in offsets), default=-1) + 1
        errors += _oversubscribed(nodes, gpn, int(job.row.get("total-cpu-dram-gb") or 0))
        return self._router_spec(job, workers, nodes, errors, port=port, host=host,
                                 accuracy=accuracy, engine_version=engine_version)

    def _router_spec(self, job: Job, workers: list[WorkerSpec], nodes: dict[int, _Node],
                     errors: list[str], *, port: int, host: str, accuracy: bool | None,
                     engine_version: str | None) -> LaunchSpec:
        router = self.data.routers[ROUTER]
        names = {"host": host, "port": port}
        rargs = Settings("router")
        for flag, raw in router.args.items():
            value, used = expand(raw, names, f"{self.data_name}.yaml routers.{ROUTER}")
            rargs.set(flag, value, "default", f"{self.data_name}.yaml routers.{ROUTER}"
                      + (f"; {', '.join(used)}" if used else ""))
        argv = list(router.program) + rargs.argv()
        for w in workers:  # server_sglang.sh PREFILL_ARGS / DECODE_ARGS, one flag per worker
            argv += [f"--{w.role}", w.url]
        prefill = next(w for w in workers if w.role == "prefill")
        served = job.model
        return LaunchSpec(
            engine=self.name, argv=argv, program_len=len(router.program),
            base_url=f"http://{host}:{port}", metrics_url=prefill.metrics_url,
            health_url=f"http://{host}:{port}{router.health_path}",
            served_model_name=served, correlation_header=router.correlation_header,
            absent_cached_tokens_are_zero=all(
                self.data.cache_report_omits_zero in w.argv for w in workers),
            sources=rargs.sources(), workers=workers, nodes=len(nodes),
            warnings=[f"plan refused: {e}" for e in errors] + [
                f"{w.role} {w.index}: {x}" for w in workers for x in w.warnings
                if not x.startswith("plan refused: ")],
        )


def _role_nodes(worker: dict[str, Any], role: str) -> int | None:
    """The row's `<ROLE>_NODES=` setting: the nodes all of a role's workers share
    (amd_utils/submit.sh: PREFILL_TP_SIZE = PREFILL_NODES * PREFILL_TP / PREFILL_WORKERS)."""
    pattern = re.compile(rf"^{role.upper()}_NODES=(\d+)$")
    for setting in worker.get("additional-settings") or []:
        if m := pattern.match(str(setting)):
            return int(m.group(1))
    return None


def _layout(count: int, gpus: int, gpn: int, role_nodes: int | None) -> list[list[int]]:
    """Node offsets of each of `count` workers of `gpus` GPUs: whole nodes of their own
    (ceil(gpus / gpus-per-node)) unless `<ROLE>_NODES=` packs the role onto fewer nodes, in
    which case workers share them in order (server_sglang.sh, one server per node rank)."""
    span = max(1, math.ceil(gpus / gpn))
    total = role_nodes if role_nodes is not None else span * count
    if total >= count:
        each = max(1, total // count)
        return [list(range(i * each, (i + 1) * each)) for i in range(count)]
    return [[i * total // count] for i in range(count)]


def _gpus_per_node(job: Job, runners: Any | None) -> int:
    from kvbench.hardware import load_hardware

    facts = runners.node_facts().get(job.runner, {}) if runners is not None else {}
    return int(facts.get("gpus-per-node") or load_hardware(job.runner).gpus_per_node)


def _oversubscribed(nodes: dict[int, _Node], gpn: int, budget_gb: int) -> list[str]:
    """Each node's GPUs and projected host memory against what one node has: the workers
    placed on it, their GPUs and their plans' host footprints."""
    out = []
    for rank, node in sorted(nodes.items()):
        who = ", ".join(node.workers)
        if node.gpus > gpn:
            out.append(f"node {rank} ({who}): {node.gpus} GPUs > {gpn} per node")
        if budget_gb and node.host_bytes > budget_gb * GB:
            out.append(f"node {rank} ({who}): projected host {node.host_bytes / GB:,.0f} GB > "
                       f"{budget_gb:,} GB budget (row total-cpu-dram-gb, per node)")
    return out

