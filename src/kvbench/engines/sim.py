"""The embedded engine (`kvbench serve-sim`, sim/server.py): any single-node row can
run on it, sized from the same plan that would size the real engine."""

from __future__ import annotations

import sys
from typing import Any

from kvbench.engines.argv import Settings
from kvbench.engines.base import BuildOptions, EngineAdapter
from kvbench.engines.context import BuildContext, host_source
from kvbench.engines.spec import ArgSource, LaunchSpec
from kvbench.recipe.fields import WRITE_POLICIES
from kvbench.units import GB


class SimAdapter(EngineAdapter):
    name = "sim"
    data_name = "sim"

    def launch_spec(self, job, plan, o: BuildOptions) -> LaunchSpec:
        spec = super().launch_spec(job, plan, o)
        # The data file names the interpreter as `python`: run serve-sim with this one, so it
        # works from a source checkout (PYTHONPATH) as well as from an installed kvbench.
        spec.argv = [sys.executable if a == "python" else a for a in spec.argv]
        return spec

    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        args.set("--model", ctx.model_path, "job" if ctx.model_path == ctx.job.model
                 else "override", "row.model")
        args.set("--served-model-name", ctx.served_model_name, "job", "row.model")
        args.set("--hardware", ctx.facts["hardware"], "job", f"row.runner={ctx.job.runner}")
        args.set("--tp", ctx.tp, "job", "row.tp")
        args.set("--host", ctx.host, *host_source(ctx))
        args.set("--port", ctx.engine_port, "override", "--port")

    def plan_args(self, ctx: BuildContext, args: Settings, env: Settings,
                  config: dict[str, Any], config_sources: list[ArgSource],
                  warnings: list[str]) -> None:
        plan = ctx.plan
        if plan is None:
            return
        args.set("--page-size", plan.page_size_tokens, "plan", "plan.page_size_tokens")
        if plan.gpu_kv_tokens > 0:
            args.set("--gpu-tokens", plan.gpu_kv_tokens, "plan", "plan.gpu_kv_tokens")
        tokens = list(plan.engine_args)
        if "--hicache-size" in tokens:
            gb = tokens[tokens.index("--hicache-size") + 1]
            args.set("--host-cache-gb", gb, "plan", "plan.engine_args --hicache-size")
        elif plan.host_pools:
            per_rank = sum(p.bytes_per_rank for p in plan.host_pools if p.inside_configured_size)
            args.set("--host-cache-gb", round(per_rank / GB, 3), "plan",
                     "plan.host_pools (inside the configured size), bytes per rank / 1e9")
        # the embedded engine models each of SGLang's policies (sim/cache.py)
        if (policy := plan.hicache_write_policy) in WRITE_POLICIES:
            args.set("--write-policy", policy, "plan", "plan.engine_args")
