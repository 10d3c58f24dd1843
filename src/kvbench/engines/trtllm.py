"""TensorRT-LLM (`trtllm-serve MODEL --config trtllm-config.yaml`). Most settings live in
the YAML config file the adapter writes: the data file's `config` keys, the job's batch sizes
and the plan's `engine_config` (host cache size in bytes per rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.engines.argv import Settings
from kvbench.engines.base import EngineAdapter, dump_file, merge_config
from kvbench.engines.context import BuildContext, host_source
from kvbench.engines.spec import ArgSource


class TRTLLMAdapter(EngineAdapter):
    name = "trtllm"
    data_name = "trtllm"

    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        args.set("--host", ctx.host, *host_source(ctx))
        args.set("--port", ctx.engine_port, "override", "--port")
        args.set("--tp_size", ctx.tp, "job", "row.tp")
        if ctx.ep > 1:
            args.set("--ep_size", ctx.ep, "job", "row.ep")
        if ctx.pp > 1:
            args.set("--pp_size", ctx.pp, "job", "row.pp")

    def plan_args(self, ctx: BuildContext, args: Settings, env: Settings,
                  config: dict[str, Any], config_sources: list[ArgSource],
                  warnings: list[str]) -> None:
        plan = ctx.plan
        if plan is not None:
            dtype = self.data.kv_dtype.get(plan.kv_dtype, plan.kv_dtype)
            merge_config(config, {"kv_cache_config": {
                "free_gpu_memory_fraction": plan.mem_fraction_static,
                "tokens_per_block": plan.page_size_tokens,
                "dtype": dtype,
            }}, "plan", "plan.mem_fraction_static, page_size_tokens, kv_dtype", config_sources)
            fragment = {k: v for k, v in plan.engine_config.items() if "." not in k}
            if fragment:
                merge_config(config, fragment, "plan", f"plan.engine_config ({plan.backend})",
                             config_sources)
        super().plan_args(ctx, args, env, config, config_sources, warnings)

    def files(self, ctx: BuildContext, args: Settings, config: dict[str, Any],
              work_dir: Path | None, warnings: list[str]) -> dict[str, str]:
        out = super().files(ctx, args, config, work_dir, warnings)
        name = self.data.config_file or "trtllm-config.yaml"
        out[name] = dump_file(name, config)
        path = str(work_dir / name) if work_dir is not None else name
        args.set("--config", path, "default", "written by kvbench into the job directory")
        return out
