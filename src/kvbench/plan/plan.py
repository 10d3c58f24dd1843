"""`Plan`: what one job will allocate on the host, the flags that make it so, and why."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench.units import GB

# Plans are written to plan.json and read back by engines and results: unknown keys are typos.
_STRICT = ConfigDict(extra="forbid")


class HostPool(BaseModel):
    """One host pool of one rank. `inside_configured_size` is False for pools the engine
    allocates beyond the size it was given (DSA indexer, sidecar draft KV, staging buffers)."""

    model_config = _STRICT
    name: str
    bytes_per_rank: int
    inside_configured_size: bool
    note: str = ""
    # The engine's own units where the sizer knows them: `units` tokens (or request slots) of
    # `unit_bytes` each, sized from `configured_gb` (this pool's part of the configured size;
    # None for a sidecar that mirrors the KV pool's token count).
    units: int = 0
    unit_bytes: int = 0
    configured_gb: float | None = None


class Plan(BaseModel):
    model_config = _STRICT

    exp_name: str
    config_key: str
    framework: str
    backend: str | None
    hardware: str
    gpus: int
    budget_gb: int
    kv_dtype: str
    page_size_tokens: int
    mem_fraction_static: float
    gpu_kv_tokens: int
    # a hybrid model's device state pool (SGLang's Mamba slots); 0 for a model without one
    gpu_state_slots: int = 0
    host_kv_tokens: int = 0
    host_pools: list[HostPool] = Field(default_factory=list)
    projected_host_bytes: int = 0
    headroom_bytes: int = 0
    within_budget: bool = True
    engine_args: list[str] = Field(default_factory=list)
    engine_env: dict[str, str] = Field(default_factory=dict)
    engine_config: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    arithmetic: list[str] = Field(default_factory=list)
    # Additions beyond the contract: where the numbers came from.
    model: str = ""
    ranks_on_node: int = 0
    semantics: str | None = None
    # Sizing values the recipe leaves to the engine ("page-size", "kv-dtype"): sized with the
    # value the engine resolves, passed as no flag. `settings_sources`: the launchers read.
    engine_defaults: list[str] = Field(default_factory=list)
    settings_sources: list[str] = Field(default_factory=list)
    # Which sizing gave the host pools (None: no host pool): `launcher` (the InferenceX
    # launcher's arithmetic: its knob, source, formula, value, measurement in `launcher`, the
    # budget plan's size in `budget_sizing`) or `budget` (the launcher's size, where one
    # sizes the row, in `launcher_sizing`); `forced`: over the budget and run anyway
    sizing: str | None = "budget"
    launcher: dict[str, Any] | None = None
    budget_sizing: dict[str, Any] | None = None
    launcher_sizing: dict[str, Any] | None = None
    forced: bool = False
    # what the launcher changes in the engine image before the server starts (plan/image.py:
    # id, kind, source and the kind's fields), applied or refused by the launch stage
    image_mods: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def hicache_write_policy(self) -> str | None:
        """The HiCache write policy the plan starts SGLang with (`--hicache-write-policy`);
        None where it names none (SGLang's default, or no HiCache)."""
        args = self.engine_args
        if "--hicache-write-policy" in args[:-1]:
            return args[args.index("--hicache-write-policy") + 1]
        return None

    @property
    def is_refused(self) -> bool:
        return bool(self.errors)

    @property
    def accepted(self) -> bool:
        """Runnable: no error, and within the budget or forced over it (--force)."""
        return not self.errors and (self.within_budget or self.forced)

    def to_json(self) -> dict[str, Any]:
        """The plan.json object: contract keys in kebab case, then everything else."""
        return {
            "exp-name": self.exp_name,
            "config-key": self.config_key,
            "framework": self.framework,
            "backend": self.backend,
            "model": self.model,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "ranks-on-node": self.ranks_on_node,
            "total-cpu-dram-gb": self.budget_gb,
            "kv-dtype": self.kv_dtype,
            "page-size-tokens": self.page_size_tokens,
            "mem-fraction-static": self.mem_fraction_static,
            "gpu-kv-tokens": self.gpu_kv_tokens,
            **({"gpu-state-slots": self.gpu_state_slots} if self.gpu_state_slots else {}),
            "host-kv-tokens": self.host_kv_tokens,
            "semantics": self.semantics,
            "engine-defaults": list(self.engine_defaults),
            "settings-sources": list(self.settings_sources),
            "host-pools": [
                {
                    "name": p.name,
                    "bytes-per-rank": p.bytes_per_rank,
                    "inside-configured-size": p.inside_configured_size,
                    "note": p.note,
                    "units": p.units,
                    "unit-bytes": p.unit_bytes,
                    "configured-gb": p.configured_gb,
                }
                for p in self.host_pools
            ],
            "projected-host-bytes": self.projected_host_bytes,
            "projected-host-gb": round(self.projected_host_bytes / GB, 2),
            "headroom-bytes": self.headroom_bytes,
            "within-budget": self.within_budget,
            "engine-args": list(self.engine_args),
            "engine-env": dict(self.engine_env),
            "engine-config": self.engine_config,
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            "arithmetic": list(self.arithmetic),
            "sizing": self.sizing,
            "image-mods": [dict(m) for m in self.image_mods],
            **({"launcher": self.launcher, "budget-sizing": self.budget_sizing,
                "forced": self.forced} if self.sizing == "launcher" else {}),
            **({"launcher-sizing": self.launcher_sizing} if self.launcher_sizing else {}),
        }


def sizing_summary(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """Which sizing gave a plan.json its host pools, its node bytes, and the other sizing's
    bytes beside it (result.json `host_sizing`, the dashboard); None without a host pool."""
    if not plan or not plan.get("sizing"):
        return None
    launcher = plan["sizing"] == "launcher"
    other = plan.get("budget-sizing") if launcher else plan.get("launcher-sizing")
    return {
        "sizing": plan["sizing"],
        "projected-host-bytes": plan.get("projected-host-bytes"),
        "within-budget": plan.get("within-budget"),
        "source": (plan.get("launcher") or {}).get("source") if launcher else None,
        "other": None if not other else {
            "sizing": "budget" if launcher else "launcher",
            "projected-host-bytes": other.get("projected-host-bytes"),
            "within-budget": other.get("within-budget")},
    }

