"""SGLang (`python3 -m sglang.launch_server`). Flags are validated in CI by SGLang's own
parser (tests/engines/test_sglang_parser.py)."""

from __future__ import annotations

from kvbench.engines.argv import Settings
from kvbench.engines.base import EngineAdapter
from kvbench.engines.context import BuildContext, host_source


class SGLangAdapter(EngineAdapter):
    name = "sglang"
    data_name = "sglang"
    sizing_flags = ("--page-size", "--mem-fraction-static", "--kv-cache-dtype")

    def job_args(self, ctx: BuildContext, args: Settings) -> None:
        src = "override" if ctx.model_path != ctx.job.model else "job"
        args.set("--model-path", ctx.model_path, src,
                 "--model-path" if src == "override" else "row.model")
        args.set("--served-model-name", ctx.served_model_name, "job", "row.model")
        args.set("--host", ctx.host, *host_source(ctx))
        port_why = ("router's port + 1 (the router takes the client port)" if ctx.router
                    else "--port")
        args.set("--port", ctx.engine_port, "default" if ctx.router else "override", port_why)
        args.set("--tp-size", ctx.tp, "job", "row.tp")
        if ctx.ep > 1:
            args.set("--ep-size", ctx.ep, "job", "row.ep")
        if ctx.pp > 1:
            args.set("--pp-size", ctx.pp, "job", "row.pp")
        if ctx.dp_attn:
            # Attention data-parallel across all TP ranks: each rank owns its KV/radix/HiCache.
            args.set("--dp-size", ctx.tp, "job", "row.dp-attn: dp-size = tp")
            args.set("--enable-dp-attention", True, "job", "row.dp-attn")
