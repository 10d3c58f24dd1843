"""What an adapter knows about one job while building its launch: the row's numbers, the
plan, the ports, and the facts that data-file rules match on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvbench.errors import EngineError
from kvbench.hardware import gpu_of_runner
from kvbench.plan.version import image_version
from kvbench.plan.workers import MTP_KEY as WORKER_MTP_KEY
from kvbench.plan.workers import ROLE_KEY as WORKER_ROLE_KEY

if TYPE_CHECKING:
    from kvbench.matrix import Job
    from kvbench.plan import Plan


@dataclass(slots=True)
class BuildContext:
    job: Job
    plan: Plan | None
    host: str
    port: int  # what the client talks to (the router's port when there is one)
    engine_port: int
    router: str | None
    accuracy: bool
    model_path: str
    served_model_name: str
    facts: dict[str, Any] = field(default_factory=dict)
    names: dict[str, Any] = field(default_factory=dict)

    @property
    def row(self) -> dict[str, Any]:
        return self.job.row

    @property
    def tp(self) -> int:
        return int(self.row.get("tp") or 1)

    @property
    def ep(self) -> int:
        return int(self.row.get("ep") or 1)

    @property
    def pp(self) -> int:
        return int(self.row.get("pp") or 1)

    @property
    def dp_attn(self) -> bool:
        return bool(self.row.get("dp-attn"))

    @property
    def conc(self) -> int:
        return int(self.job.conc)


def host_source(ctx: BuildContext) -> tuple[str, str]:
    """Servers bind to localhost unless the caller asked for another address."""
    if ctx.host == "127.0.0.1":
        return "default", "kvbench binds servers to localhost"
    return "override", "--host"


def single_node_row(job: Job, engine: str) -> None:
    if job.is_multinode:
        raise EngineError(
            f"{job.exp_name}: multi-node (prefill/decode) rows are not launched by the "
            f"{engine} adapter",
            hint="select single-node rows (--single-node); `kvbench run` runs multi-node rows, "
            "one adapter call per worker (docs/sweeps.md)",
        )
    for key in ("tp", "conc", "model"):
        if key not in job.row:
            raise EngineError(f"{job.exp_name}: row has no {key!r}; keys: {sorted(job.row)}")


def make_context(job: Job, plan: Plan | None, *, engine: str, host: str, port: int,
                 router: str | None, router_port_offset: int, model_path: str | None,
                 accuracy: bool | None, engine_version: str | None = None) -> BuildContext:
    single_node_row(job, engine)
    if not 0 < port < 65536:
        raise EngineError(f"port {port} is out of range 1..65535")
    row = job.row
    engine_port = port + router_port_offset if router else port
    acc = bool(row.get("eval-only")) if accuracy is None else accuracy
    backend = (row.get("kv-offload-backend") or {}).get("name")
    ctx = BuildContext(
        job=job, plan=plan, host=host, port=port, engine_port=engine_port, router=router,
        accuracy=acc, model_path=model_path or job.model, served_model_name=job.model,
    )
    hardware = plan.hardware if plan is not None and plan.hardware else gpu_of_runner(
        job.runner)
    ctx.facts = {
        "model_prefix": row.get("model-prefix"),
        "model": job.model,
        "hardware": hardware,
        "precision": row.get("precision"),
        "offload": backend or "none",
        "spec": row.get("spec-decoding") or "none",
        "dp_attn": ctx.dp_attn,
        "tp": ctx.tp,
        "ep": ctx.ep,
        "conc": ctx.conc,
        "accuracy": acc,
        "router": router is not None,
        "role": row.get(WORKER_ROLE_KEY),
        "version": (_parse_version(engine_version) if engine_version
                    else image_version(str(row.get("image", ""))).release),
    }
    dp = ctx.tp if ctx.dp_attn else 1
    ctx.names = {
        "conc": ctx.conc, "tp": ctx.tp, "ep": ctx.ep, "pp": ctx.pp, "dp": dp,
        "gpus": ctx.tp * ctx.pp * int(row.get("pcp-size") or 1),
        "port": port, "engine_port": engine_port, "host": host,
        "engine_url": f"http://{host}:{engine_port}",
        "model": job.model, "model_path": ctx.model_path,
        "mtp_size": int(row.get(WORKER_MTP_KEY) or 0),
    }
    return ctx


def _parse_version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.lstrip("v").split("."))
    except ValueError:
        raise EngineError(f"engine version {text!r} is not of the form 0.5.16") from None
