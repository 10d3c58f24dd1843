"""vLLM (`vllm serve MODEL`). DP-attention rows run one engine with `--data-parallel-size`
behind vllm-router. Checked in CI by vLLM's own `vllm serve` parser
(tests/engines/test_vllm_parser.py; vLLM installs on CPU with --no-deps)."""

from __future__ import annotations

import math
from typing import Any

from kvbench.engines.argv import Settings
from kvbench.engines.base import EngineAdapter
from kvbench.engines.context import BuildContext, host_source
from kvbench.engines.spec import ArgSource


class VLLMAdapter(EngineAdapter):
    name = "vllm"
    data_name = "vllm"
    sizing_flags = ("--block-size", "--gpu-memory-utilization", "--kv-cache-dtype")

    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        args.set("--served-model-name", ctx.served_model_name, "job", "row.model")
        args.set("--host", ctx.host, *host_source(ctx))
        port_why = ("router's port + 1 (the router takes the client port)" if ctx.router
                    else "--port")
        args.set("--port", ctx.engine_port, "default" if ctx.router else "override", port_why)
        if ctx.dp_attn:
            args.set("--tensor-parallel-size", 1, "job", "row.dp-attn: attention DP, TP 1")
            args.set("--data-parallel-size", ctx.tp, "job", "row.dp-attn: dp = row.tp")
        else:
            args.set("--tensor-parallel-size", ctx.tp, "job", "row.tp")
        if ctx.pp > 1:
            args.set("--pipeline-parallel-size", ctx.pp, "job", "row.pp")
        # the row's ep, also under DP attention: with ep 1 vLLM shards the experts across the
        # DP x TP ranks as it does under TP (dsv4_fp4_mi355x_vllm_mtp.sh:364-367 passes
        # --enable-expert-parallel only when EP_SIZE > 1)
        if ctx.ep > 1:
            args.set("--enable-expert-parallel", True, "job", f"row.ep={ctx.ep}")

    def plan_args(self, ctx: BuildContext, args: Settings, env: Settings,
                  config: dict[str, Any], config_sources: list[ArgSource],
                  warnings: list[str]) -> None:
        if ctx.dp_attn and (2 * ctx.conc) % ctx.tp:
            warnings.append(
                f"--max-num-seqs: 2 x conc = {2 * ctx.conc} is not divisible by the "
                f"{ctx.tp} DP ranks; each rank gets {math.ceil(2 * ctx.conc / ctx.tp)}")
        super().plan_args(ctx, args, env, config, config_sources, warnings)
