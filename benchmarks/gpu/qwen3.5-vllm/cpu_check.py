"""Issue 37 item 6 on CPU, against vLLM 0.26's own code (run by cpu_check.sh with the unzipped
vllm-0.26.0 wheel first on PYTHONPATH): the argv kvbench renders for each arm (`kvbench launch
--dry-run --format json`) through vLLM 0.26's `vllm serve` parser (FlexibleArgumentParser +
ServeSubcommand.subparser_init, i.e. make_arg_parser), then `EngineArgs.from_cli_args(...)
.create_engine_config()` on the dummy model directory: what vLLM decides before it touches a GPU
(mamba cache mode, block size, the MTP draft's class, the connector and its bytes, whether the
hybrid KV cache manager stays on). The platform is vLLM's CpuPlatform (no GPU here); it keeps the
hybrid KV cache manager as CUDA does (platforms/cpu.py:419-420, cuda.py:657-658).

    python cpu_check.py DRY_RUN_JSON [--engine-arg FLAG]..."""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import vllm
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with open(argv[0]) as f:
        (spec,) = json.load(f)
    extra = argv[1:]
    root = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(root.add_subparsers(dest="subparser"))
    args = root.parse_args([*spec["argv"][1:], *extra])  # exits 2 on a flag vLLM rejects
    args.model = args.model_tag or args.model  # what `vllm serve` does (cli/serve.py cmd)
    cfg = EngineArgs.from_cli_args(args).create_engine_config()
    c, s, t = cfg.cache_config, cfg.speculative_config, cfg.kv_transfer_config
    print(json.dumps({
        "vllm": vllm.__version__, "exp-name": spec["exp-name"], "extra": extra,
        "parsed": {"block_size": args.block_size, "enable_prefix_caching":
                   args.enable_prefix_caching, "kv_cache_memory_bytes":
                   args.kv_cache_memory_bytes, "max_model_len": args.max_model_len},
        "block_size": c.block_size, "mamba_cache_mode": c.mamba_cache_mode,
        "mamba_block_size": c.mamba_block_size, "prefix_caching": c.enable_prefix_caching,
        "mamba_ssm_cache_dtype": c.mamba_ssm_cache_dtype,
        "speculative": s and {"method": s.method, "tokens": s.num_speculative_tokens,
                              "rejection": s.rejection_sample_method,
                              "synthetic_rates": s.synthetic_acceptance_rates,
                              "draft": s.draft_model_config.architectures,
                              "draft_model_type": s.draft_model_config.hf_config.model_type},
        "connector": t and {"name": t.kv_connector, "extra": t.kv_connector_extra_config},
        "hybrid_kv_cache_manager": not cfg.scheduler_config.disable_hybrid_kv_cache_manager,
        "additional_config": cfg.additional_config, "enforce_eager": cfg.model_config.enforce_eager,
        "is_hybrid": cfg.model_config.is_hybrid, "max_model_len": cfg.model_config.max_model_len,
    }, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
