"""AMD ATOM (`python3 -m atom.entrypoints.openai_server`), the ROCm engine of InferenceX's
MI355X ATOM rows. ATOM installs only on ROCm, so its options are compared by spelling
(`--kv_cache_dtype` and `--kv-cache-dtype` read alike) with the launchers' recordings
(tests/engines/test_launcher_oracle.py)."""

from __future__ import annotations

from typing import Any

from kvbench.engines.argv import Settings
from kvbench.engines.base import EngineAdapter
from kvbench.engines.context import BuildContext, host_source
from kvbench.engines.spec import ArgSource


class ATOMAdapter(EngineAdapter):
    name = "atom"
    data_name = "atom"
    # ATOM's flags (atom/model_engine/arg_utils.py): block size in tokens, the fraction of
    # HBM for weights + KV, and the KV dtype (bf16 | fp8)
    sizing_flags = ("--block-size", "--gpu-memory-utilization", "--kv-cache-dtype")

    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        args.set("--model", ctx.model_path, "job" if ctx.model_path == ctx.job.model
                 else "override", "row.model")
        # the client and the results name the row's model, not the checkpoint directory
        args.set("--served-model-name", ctx.served_model_name, "job", "row.model")
        args.set("--host", ctx.host, *host_source(ctx))
        args.set("--server-port", ctx.engine_port, "override", "--port")
        args.set("--tensor-parallel-size", ctx.tp, "job", "row.tp")
        if ctx.dp_attn:
            args.set("--enable-dp-attention", True, "job", "row.dp-attn")
        if ctx.ep > 1:
            args.set("--enable-expert-parallel", True, "job", f"row.ep={ctx.ep}")


    def plan_args(self, ctx: BuildContext, args: Settings, env: Settings,
                  config: dict[str, Any], config_sources: list[ArgSource],
                  warnings: list[str]) -> None:
        super().plan_args(ctx, args, env, config, config_sources, warnings)
        # A rule's `rename` spells a plan flag as that launcher's image does (older ATOM
        # builds define only `--kv_cache_dtype`): rules run before the plan, so apply again.
        for rule in self.data.matching(ctx.facts):
            for old, new in rule.rename.items():
                args.rename(old, new, f"{self.data_name}.yaml: {rule.name}")
