"""The adapter skeleton shared by every engine: data-file rules, then the job, then the
plan, then user overrides, each value tagged with its source; a router for DP-attention."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

from kvbench.engines import lmcache, mooncake
from kvbench.engines.argv import Settings, render_value
from kvbench.engines.context import BuildContext, make_context
from kvbench.engines.rules import DATA_DIR, EngineData, Rule, load_engine_data
from kvbench.engines.spec import ArgSource, LaunchSpec, ServiceSpec, Source
from kvbench.errors import EngineError
from kvbench.expr import expand

if TYPE_CHECKING:
    from kvbench.matrix import Job
    from kvbench.plan import Plan

_FILE_SUFFIXES = (".json", ".yaml", ".yml", ".toml", ".cfg")
# plan.engine_config entry that is the --kv-transfer-config JSON (plan/sizers/vllm.py, the
# SimpleCPUOffloadConnector); the data file's rules add the launchers' other connector keys
KV_TRANSFER_KEY = "kv-transfer-config"


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """How a launch is built beyond its job and plan: where it listens, the model directory,
    the user's overrides, and (for adapters that plan their own workers) runners.yaml."""

    port: int
    host: str = "127.0.0.1"
    model_path: str | None = None
    work_dir: Path | None = None
    overrides: Sequence[str] = ()
    env_overrides: Mapping[str, str] | None = None
    accuracy: bool | None = None
    engine_version: str | None = None
    dummy_weights: bool = False
    runners: Any | None = None


class EngineAdapter:
    """Builds a LaunchSpec for one job. Subclasses add the flags derived from the job
    (`job_args`) and from the plan (`plan_args`); everything model- or hardware-specific comes
    from the data file."""

    name: ClassVar[str]
    data_name: ClassVar[str]
    # (page size, memory fraction, KV dtype) flag names, or None where the engine takes them
    # elsewhere (TRT-LLM's YAML config) or not at all
    sizing_flags: ClassVar[tuple[str, str, str] | None] = None
    # whether `build` returns a multi-node row whole: every worker in LaunchSpec.workers, the
    # router or frontend in front of them as the argv (sglang-disagg, the recipe rows)
    builds_workers: ClassVar[bool] = False

    @property
    def data(self) -> EngineData:
        return load_engine_data(self.data_name)

    def build(self, job: Job, plan: Plan | None = None, **options: Any) -> LaunchSpec:
        """The job's launch under `plan`; `options` are BuildOptions' fields (`port` at
        least). Adapters that assemble a launch their own way override `launch_spec`."""
        return self.launch_spec(job, plan, BuildOptions(**options))

    def launch_spec(self, job: Job, plan: Plan | None, o: BuildOptions) -> LaunchSpec:
        """Data-file rules, then the job, then the plan, then the user's overrides."""
        data = self.data
        router = self.router_name(job, data)
        offset = data.routers[router].engine_port_offset if router else 0
        ctx = make_context(job, plan, engine=self.name, host=o.host, port=o.port, router=router,
                           router_port_offset=offset, model_path=o.model_path,
                           accuracy=o.accuracy, engine_version=o.engine_version)
        args, env = Settings("arg"), Settings("env")
        config: dict[str, Any] = {}
        config_sources: list[ArgSource] = []
        warnings: list[str] = []
        self.job_args(ctx, args)
        rules = data.matching(ctx.facts)
        for rule in rules:
            self._apply_rule(rule, ctx, args, env, config, config_sources)
        self.plan_args(ctx, args, env, config, config_sources, warnings)
        if o.dummy_weights:
            self._dummy_weights(ctx, args)
        if o.overrides:
            args.set_tokens(list(o.overrides), "override", "--engine-arg")
        for k, v in (o.env_overrides or {}).items():
            env.set(k, v, "override", "--engine-env")
        files = self.files(ctx, args, config, o.work_dir, warnings)
        for rule in rules:
            for flag, name in rule.files.items():
                files[name] = (DATA_DIR / name).read_text()
                args.set(flag, str(o.work_dir / name) if o.work_dir is not None else name,
                         "default", f"{self.data_name}.yaml: {rule.name} (engines/data/{name})")
        services = self.services(ctx, config)
        program = list(data.program)
        argv = program + self.positional(ctx) + args.argv()
        router_argv, router_sources = self.router_argv(ctx, data)
        sources = args.sources() + env.sources() + config_sources + router_sources
        if data.model_flag is None:
            sources.insert(0, ArgSource(flag="<model>", value=ctx.model_path,
                                        source=self._model_source(o.model_path),
                                        detail=self._model_detail(o.model_path)))
        engine_url = f"http://{o.host}:{ctx.engine_port}"
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            program_len=len(program),
            env=env.env(),
            files=files,
            router_argv=router_argv,
            services=services,
            base_url=f"http://{o.host}:{o.port}",
            metrics_url=engine_url + data.metrics_path,
            health_url=engine_url + data.health_path,
            router_health_url=(f"http://{o.host}:{o.port}" + data.routers[router].health_path
                               if router else None),
            served_model_name=ctx.served_model_name,
            correlation_header=data.routers[router].correlation_header if router else None,
            absent_cached_tokens_are_zero=data.cache_report_omits_zero in argv,
            sources=sources,
            warnings=(([f"plan refused: {e}" for e in plan.errors] + list(plan.warnings))
                      if plan is not None else []) + warnings,
            image_mods=list(plan.image_mods) if plan is not None else [],
        )

    def _dummy_weights(self, ctx: BuildContext, args: Settings) -> None:
        flags = self.data.dummy_weights
        if flags is None:
            raise EngineError(f"engine {self.name!r} cannot serve dummy weights",
                              hint="--load-format dummy is for vllm and sglang rows")
        for flag, value in flags.items():
            args.set(flag, value, "override", "--load-format dummy")
        tok = self.data.tokenizer_flag
        if tok is not None and args.get(tok) not in (None, False, ctx.model_path):
            args.set(tok, ctx.model_path, "override",
                     "--load-format dummy: the model directory's own tokenizer")

    # -- hooks ---------------------------------------------------------------------------
    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        """Flags that follow from the row (parallelism, model, ports)."""

    def plan_args(self, ctx: BuildContext, args: Settings, env: Settings,
                  config: dict[str, Any], config_sources: list[ArgSource],
                  warnings: list[str]) -> None:
        """The plan's sizing flags (names in `sizing_flags`), offload flags and environment."""
        plan = ctx.plan
        if plan is None:
            return
        if self.sizing_flags is not None:
            # values the recipe leaves to the engine (plan.engine_defaults) get no flag
            page, mem, kv_dtype = self.sizing_flags
            if "page-size" not in plan.engine_defaults:
                args.set(page, plan.page_size_tokens, "plan", "plan.page_size_tokens")
            if "mem-fraction" not in plan.engine_defaults:
                args.set(mem, plan.mem_fraction_static, "plan", "plan.mem_fraction_static")
            if "kv-dtype" not in plan.engine_defaults:
                dtype = self.data.kv_dtype.get(plan.kv_dtype, plan.kv_dtype)
                args.set(kv_dtype, dtype, "plan", f"plan.kv_dtype={plan.kv_dtype}")
        if plan.engine_args:
            args.set_tokens(list(plan.engine_args), "plan", f"plan.engine_args ({plan.backend})")
        if lmcache.MP_KEY in plan.engine_config:
            args.set("--kv-transfer-config",
                     lmcache.connector_config(ctx, plan.engine_config[lmcache.MP_KEY]), "plan",
                     "plan.engine_config lmcache-mp: one LMCache server per rank")
        if KV_TRANSFER_KEY in plan.engine_config:
            args.set("--kv-transfer-config", copy.deepcopy(plan.engine_config[KV_TRANSFER_KEY]),
                     "plan", f"plan.engine_config {KV_TRANSFER_KEY} ({plan.backend})")
        for k, v in plan.engine_env.items():
            env.set(k, v, "plan", f"plan.engine_env ({plan.backend})")

    def positional(self, ctx: BuildContext) -> list[str]:
        return [] if self.data.model_flag else [ctx.model_path]

    def files(self, ctx: BuildContext, args: Settings, config: dict[str, Any],
              work_dir: Path | None, warnings: list[str]) -> dict[str, str]:
        """Config files of the plan (`engine_config` entries named like files)."""
        out: dict[str, str] = {}
        plan = ctx.plan
        if plan is None:
            return out
        for name, content in plan.engine_config.items():
            if name.endswith(_FILE_SUFFIXES):
                if name == mooncake.CONFIG_FILE:
                    content = mooncake.with_master_address(content, ctx)
                if isinstance(content, dict) and isinstance(config.get(name), dict):
                    # a data-file rule's keys for this file (a launcher's RDMA rail)
                    content = {**content, **config[name]}
                out[name] = dump_file(name, content)
        return out

    def services(self, ctx: BuildContext, config: dict[str, Any]) -> list[ServiceSpec]:
        """Processes the engine needs before it starts: a Mooncake plan's master, an LMCache
        MP plan's servers."""
        plan = ctx.plan
        if plan is None:
            return []
        if lmcache.MP_KEY in plan.engine_config:
            return lmcache.server_services(ctx, plan.engine_config[lmcache.MP_KEY])
        if mooncake.CONFIG_FILE not in plan.engine_config:
            return []
        # the plan's eviction ratios, then a data-file rule's (`config: {mooncake-master: ..}`)
        settings = {**plan.engine_config.get(mooncake.MASTER_KEY, {}),
                    **config.get(mooncake.MASTER_KEY, {})}
        return [mooncake.master_service(ctx, settings)]

    def router_name(self, job: Job, data: EngineData) -> str | None:
        """DP-attention rows get a router that pins each session to one DP rank."""
        if not job.row.get("dp-attn") or not data.routers:
            return None
        wanted = (job.row.get("router") or {}).get("name")
        if wanted is None:
            return next(iter(data.routers))
        if wanted not in data.routers:
            raise EngineError(
                f"{job.exp_name}: router {wanted!r} is not known to the {self.name} adapter; "
                f"known: {', '.join(data.routers)}")
        return wanted

    def router_argv(self, ctx: BuildContext, data: EngineData
                    ) -> tuple[list[str] | None, list[ArgSource]]:
        if ctx.router is None:
            return None, []
        spec = data.routers[ctx.router]
        rargs = Settings("router")
        for flag, raw in spec.args.items():
            value, used = expand(raw, ctx.names, f"{self.data_name}.yaml routers.{ctx.router}")
            rargs.set(flag, value, "default", _detail(f"routers.{ctx.router}", used, ctx))
        return list(spec.program) + rargs.argv(), rargs.sources()

    # -- helpers -------------------------------------------------------------------------
    def _apply_rule(self, rule: Rule, ctx: BuildContext, args: Settings, env: Settings,
                    config: dict[str, Any], config_sources: list[ArgSource]) -> None:
        where = f"{self.data_name}.yaml: {rule.name}"
        for flag, raw in rule.args.items():
            value, used = expand(raw, ctx.names, where)
            args.set(flag, value, "default", _detail(rule.name, used, ctx))
        for name, raw in rule.env.items():
            value, used = expand(raw, ctx.names, where)
            env.set(name, value, "default", _detail(rule.name, used, ctx))
        for old, new in rule.rename.items():
            args.rename(old, new, where)
        if rule.config:
            value, used = expand(rule.config, ctx.names, where)
            merge_config(config, value, "default", _detail(rule.name, used, ctx),
                         config_sources)

    def _model_source(self, model_path: str | None) -> Source:
        return "override" if model_path else "job"

    def _model_detail(self, model_path: str | None) -> str:
        return "--model-path" if model_path else "row.model"


def _detail(rule: str, used: list[str], ctx: BuildContext) -> str:
    base = f"{ctx.job.framework} data: {rule}"
    if not used:
        return base
    idents = {m for u in used for m in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", u)}
    shown = {k: v for k, v in ctx.names.items() if k in idents}
    return f"{base}; {', '.join(used)} with " + ", ".join(f"{k}={v}" for k, v in shown.items())


def merge_config(config: dict[str, Any], fragment: dict[str, Any], source: Source,
                 detail: str, sources: list[ArgSource], prefix: str = "") -> None:
    """Deep-merge `fragment` into `config`, recording each leaf key's source; a None value
    removes the key (a rule that replaces another's key by a different one)."""
    for key, value in fragment.items():
        path = f"{prefix}{key}"
        if value is None:
            config.pop(key, None)
            sources[:] = [s for s in sources if s.flag != path]
            continue
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge_config(config[key], value, source, detail, sources, path + ".")
            continue
        config[key] = value
        sources[:] = [s for s in sources if s.flag != path]
        sources.append(ArgSource(flag=path, value=render_value(value), source=source,
                                 kind="file", detail=detail))


def dump_file(name: str, content: Any) -> str:
    if isinstance(content, str):
        return content
    if name.endswith(".json"):
        return json.dumps(content, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump(content, sort_keys=False)
