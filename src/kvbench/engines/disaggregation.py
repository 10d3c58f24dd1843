"""SGLang prefill/decode (PD) disaggregation: a multi-node row as its prefill and decode
servers, each planned on its own, behind sglang-router in `--pd-disaggregation` mode.

InferenceX's AMD launch chain (benchmarks/multi_node/amd_utils/server_sglang.sh at 843c6254f)
starts, per row: `num-worker` prefill servers, each on ceil(tp / gpus-per-node) nodes of its
own, then the decode servers on the nodes after them, each `python3 -m sglang.launch_server
--disaggregation-mode prefill|decode` with the row's KV transfer backend
(`kv-p2p-transfer`: mori), and the router on node 0 once every server answers. Only the
prefill side offloads KV to host DRAM (HiCache; the decode mirrors its page size): the
generator budgets `total-cpu-dram-gb` per node for the prefill role alone.

The planner places and plans every worker (`kvbench.plan.workers.plan_workers`: a worker row
per role, its own plan, the row refused when a node is oversubscribed); this adapter builds
each worker as a single-node SGLang server from its worker row and plan, with the data file
`data/sglang_disagg.yaml` (rules match on `role`), and the router over them. A refusal is the
warning `plan refused: ...`, as for single-node rows.

Worker addresses are not known before the allocation: URLs read `http://{node<rank>}:port`,
rank counting the row's nodes from 0 (the Slurm runner fills them in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kvbench.engines.argv import Settings
from kvbench.engines.base import BuildOptions, EngineAdapter
from kvbench.engines.context import BuildContext
from kvbench.engines.rules import EngineData
from kvbench.engines.sglang import SGLangAdapter
from kvbench.engines.spec import LaunchSpec, WorkerSpec
from kvbench.errors import EngineError
from kvbench.expr import expand

if TYPE_CHECKING:
    from kvbench.matrix import Job
    from kvbench.plan import Plan

ROUTER = "sglang-router"


def router_worker_args(workers: Sequence[tuple[str, str, int | str | None]]) -> list[str]:
    """sglang-router's arguments naming its workers, each (role, URL, prefill bootstrap port or
    None): in PD mode (any prefill or decode worker) `--pd-disaggregation`, `--prefill URL
    [PORT]` per prefill worker, `--decode URL` per decode worker; else its regular mode over
    the aggregated ones, `--worker-urls URL ...`. The same lists in InferenceX's AMD chain
    (server_sglang.sh PREFILL_ARGS / DECODE_ARGS, no bootstrap port), srtctl's SGLang
    frontend (srt-slurm v1.0.38 frontends/sglang.py:113-133) and the Slurm stand-in
    (sweep/multinode.py `router_argv`)."""
    if not any(role in ("prefill", "decode") for role, _, _ in workers):
        return ["--worker-urls", *(url for _, url, _ in workers)]
    out = ["--pd-disaggregation"]
    for want in ("prefill", "decode"):
        for role, url, bootstrap in workers:
            if role == want:
                out += [f"--{role}", url, *([str(bootstrap)] if bootstrap is not None else [])]
    return out


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


class SGLangDisaggAdapter(EngineAdapter):
    """A `sglang-disagg` row: the router's command line, with every worker in `workers`."""

    name = "sglang-disagg"
    data_name = "sglang_disagg"
    builds_workers = True

    def launch_spec(self, job: Job, plan: Plan | None, o: BuildOptions) -> LaunchSpec:
        """`plan` (the row's, sized for its prefill) gives way to one plan per worker."""
        from kvbench.plan.workers import plan_workers

        if not job.is_multinode:
            raise EngineError(f"{job.exp_name}: a {self.name} row has prefill and decode "
                              "workers; this one has neither")
        worker_port = o.port + self.data.routers[ROUTER].engine_port_offset
        planned = plan_workers(job, o.runners)
        workers: list[WorkerSpec] = []
        for wp in planned.workers:
            wport = worker_port + wp.slot  # workers sharing a node listen on successive ports
            spec = SGLangWorkerAdapter().launch_spec(wp.job, wp.plan,
                                                     replace(o, port=wport, runners=None))
            url = f"http://{{node{wp.nodes[0]}}}:{wport}"
            gpus = int(wp.job.row["tp"]) * int(wp.job.row["pp"]) * int(wp.job.row["pcp-size"])
            workers.append(WorkerSpec(
                role=wp.role, index=wp.index, nodes=list(wp.nodes),
                gpus=-(-gpus // len(wp.nodes)), argv=spec.argv,
                program_len=spec.program_len, env=spec.env, files=spec.files, url=url,
                metrics_url=url + self.data.metrics_path, health_url=url + self.data.health_path,
                plan=wp.plan.to_json(), sources=spec.sources, warnings=spec.warnings,
                image_mods=spec.image_mods))
        return self._router_spec(job, workers, len(planned.nodes), list(planned.errors),
                                 port=o.port, host=o.host)

    def _router_spec(self, job: Job, workers: list[WorkerSpec], nodes: int, errors: list[str],
                     *, port: int, host: str) -> LaunchSpec:
        router = self.data.routers[ROUTER]
        where = f"{self.data_name}.yaml routers.{ROUTER}"
        rargs = Settings("router")
        for flag, raw in router.args.items():
            value, used = expand(raw, {"host": host, "port": port}, where)
            rargs.set(flag, value, "default", where + (f"; {', '.join(used)}" if used else ""))
        argv = [*router.program, *rargs.argv(),
                *router_worker_args([(w.role, w.url, None) for w in workers])]
        prefill = next(w for w in workers if w.role == "prefill")
        return LaunchSpec(
            engine=self.name, argv=argv, program_len=len(router.program),
            base_url=f"http://{host}:{port}", metrics_url=prefill.metrics_url,
            health_url=f"http://{host}:{port}{router.health_path}",
            served_model_name=job.model, correlation_header=router.correlation_header,
            absent_cached_tokens_are_zero=all(
                self.data.cache_report_omits_zero in w.argv for w in workers),
            sources=rargs.sources(), workers=workers, nodes=nodes,
            warnings=[f"plan refused: {e}" for e in errors] + [
                f"{w.role} {w.index}: {x}" for w in workers for x in w.warnings
                if not x.startswith("plan refused: ")],
        )
