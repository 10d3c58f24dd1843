"""LaunchSpec: everything needed to start one job's server, and where each value came from."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Source = Literal["job", "plan", "override", "default"]
Kind = Literal["arg", "env", "file", "router"]


class ArgSource(BaseModel):
    """One value of the launch and its provenance. `detail` names the field, rule or formula
    (`row.tp`, `sglang.yaml: qwen3.5 on b300`, `min(conc, 64) with conc=56`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    flag: str
    value: str | None
    source: Source
    kind: Kind = "arg"
    detail: str = ""
    # Lower-precedence values that this one replaced, as "value (source: detail)".
    shadowed: list[str] = Field(default_factory=list)


class ServiceSpec(BaseModel):
    """A process the engine needs before it starts (Mooncake's master): started first,
    ready when `ready_url` answers, stopped after the engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    argv: list[str]
    ready_url: str | None = None


class WorkerSpec(BaseModel):
    """One server of a multi-node row: its role (prefill, decode, or agg: an aggregated worker
    of an srt-slurm recipe), the nodes it spans (0-based ranks of the row's allocation), its
    command line, environment and files, and its own plan."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["prefill", "decode", "agg"]
    index: int  # within its role
    nodes: list[int]
    gpus: int = 0  # GPUs it takes on each of its nodes
    argv: list[str]
    program_len: int = 1
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    url: str  # what the router sends to: http://{node<rank>}:<port>
    metrics_url: str
    health_url: str
    plan: dict | None = None
    sources: list[ArgSource] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # what its recipe changes in the image before it starts (plan/image.py)
    image_mods: list[dict] = Field(default_factory=list)

    @property
    def engine_args(self) -> list[str]:
        return self.argv[self.program_len:]

    def to_json(self) -> dict:
        return {"role": self.role, "index": self.index, "nodes": self.nodes,
                "gpus": self.gpus, "argv": self.argv,
                "env": self.env, "files": self.files, "url": self.url,
                "metrics-url": self.metrics_url, "health-url": self.health_url,
                "plan": self.plan, "warnings": self.warnings,
                "image-mods": self.image_mods}


class LaunchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    argv: list[str]
    # How many leading argv items are the program (`python3 -m sglang.launch_server`): the
    # rest are the engine's own arguments, which is what its argument parser sees.
    program_len: int = 1
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    router_argv: list[str] | None = None
    services: list[ServiceSpec] = Field(default_factory=list)
    base_url: str
    metrics_url: str
    health_url: str
    router_health_url: str | None = None
    served_model_name: str
    correlation_header: str | None = None
    # per-request cached tokens the usage leaves out mean 0 (the engine reports only hits)
    absent_cached_tokens_are_zero: bool = False
    sources: list[ArgSource] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # A disaggregated row: its prefill and decode servers (argv is then the router's, which
    # starts when every worker is ready) and the node count of its allocation.
    workers: list[WorkerSpec] = Field(default_factory=list)
    nodes: int = 1
    # what the launcher changes in the engine image before the server starts (plan/image.py),
    # applied or refused by name at launch (launch/patcher.py); a multi-node row's are its
    # workers'
    image_mods: list[dict] = Field(default_factory=list)

    @property
    def engine_args(self) -> list[str]:
        return self.argv[self.program_len:]

    def node_gpus(self) -> dict[int, int]:
        """A disaggregated row: node rank -> the GPUs its workers take there."""
        out: dict[int, int] = {}
        for w in self.workers:
            for node in w.nodes:
                out[node] = out.get(node, 0) + w.gpus
        return out

    def to_json(self, *, exp_name: str, config_key: str) -> dict:
        """The dry-run object: contract keys first."""
        return {
            "exp-name": exp_name,
            "config-key": config_key,
            "engine": self.engine,
            "argv": self.argv,
            "env": self.env,
            "files": self.files,
            "router-argv": self.router_argv,
            "services": [{"name": x.name, "argv": x.argv, "ready-url": x.ready_url}
                         for x in self.services],
            "base-url": self.base_url,
            "metrics-url": self.metrics_url,
            "health-url": self.health_url,
            "router-health-url": self.router_health_url,
            "served-model-name": self.served_model_name,
            "correlation-header": self.correlation_header,
            "warnings": self.warnings,
            "image-mods": self.image_mods,
            **({"nodes": self.nodes, "workers": [w.to_json() for w in self.workers]}
               if self.workers else {}),
        }
