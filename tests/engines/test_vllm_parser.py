"""Every vLLM command line generated for the real InferenceX agentic rows is accepted by vLLM's
own `vllm serve` parser.

What is validated: the installed vllm (pinned in .ci/vllm-requirements.txt, with
VLLM_TARGET_DEVICE=cpu because no GPU platform is detected here) builds the parser of its
`serve` subcommand (`ServeSubcommand.subparser_init`, i.e. `make_arg_parser` over
`AsyncEngineArgs.add_cli_args`) and parses our arguments: flag names, types, choices and JSON
values such as --speculative-config and --kv-transfer-config. Building the engine config
(which needs the model's config and a GPU) is not run. Runs in a subprocess so that vllm's
process-wide state does not leak into the test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

SRC = Path(__file__).resolve().parents[2] / "src"

CHECK = textwrap.dedent("""
    import contextlib, io, json, sys
    from pathlib import Path
    import vllm
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from kvbench.engines import get_adapter
    from kvbench.matrix import Selection, select_jobs
    from kvbench.plan import plan_job

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))

    def parse(args):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                return parser.parse_args(args), None
        except SystemExit:
            return None, (err.getvalue().strip().splitlines() or ["?"])[-1]

    configs, runners = [Path(p) for p in sys.argv[1:-1]], Path(sys.argv[-1])
    jobs = select_jobs(Selection(config_files=tuple(configs), runner_config=runners,
                                 frameworks=("vllm",), single_node=True))
    result = {"vllm": vllm.__version__, "checked": 0, "failures": [], "mismatches": []}
    # Keys a row's nightly image accepts that the installed release lacks: InferenceX's
    # launchers ran them on that image (the launcher oracle's recordings), so they are
    # taken out before this release's parser sees them, on nightly rows only.
    # (dsv4_fp4_b200_vllm_mtp.sh:221,301 on vllm-openai nightly 426e59f)
    NIGHTLY_ONLY = {"--attention-config": ["use_fp4_indexer_cache"]}
    NIGHTLY_ONLY_CHOICES = {"--moe-backend": ["deep_gemm_amxf4_mega_moe"]}

    def without_nightly_keys(argv, image):
        if "nightly" not in image:
            return argv
        argv = list(argv)
        for flag, values in NIGHTLY_ONLY_CHOICES.items():
            if flag in argv and argv[argv.index(flag) + 1] in values:
                del argv[argv.index(flag):argv.index(flag) + 2]
        for flag, keys in NIGHTLY_ONLY.items():
            if flag in argv:
                value = json.loads(argv[argv.index(flag) + 1])
                for key in keys:
                    value.pop(key, None)
                argv[argv.index(flag) + 1] = json.dumps(value)
        return argv

    for job in jobs:
        plan = plan_job(job)
        spec = get_adapter("vllm").build(job, plan, port=8000)
        args, error = parse(without_nightly_keys(spec.argv[1:], str(job.row.get("image", ""))))
        result["checked"] += 1
        if error:
            result["failures"].append([job.exp_name, error])
            continue
        dp = bool(job.row.get("dp-attn"))
        # a block size the recipe leaves to vLLM stays unset (the model's backend picks it)
        block = None if "page-size" in plan.engine_defaults else plan.page_size_tokens
        want = {"model_tag": job.model, "block_size": block,
                "gpu_memory_utilization": plan.mem_fraction_static,
                "tensor_parallel_size": 1 if dp else job.row["tp"],
                "data_parallel_size": job.row["tp"] if dp else 1}
        for field, value in want.items():
            if getattr(args, field) != value:
                result["mismatches"].append([job.exp_name, field, getattr(args, field), value])
        if args.speculative_config is not None and not isinstance(args.speculative_config,
                                                                  dict):
            result["mismatches"].append([job.exp_name, "speculative_config", "not a dict"])
    _, bad_type = parse(["serve", "m", "--tensor-parallel-size", "two"])
    _, bad_flag = parse(["serve", "m", "--kv-offloading-sise", "10"])
    _, bad_json = parse(["serve", "m", "--speculative-config", "{not json"])
    result["negative"] = [bad_type, bad_flag, bad_json]
    print(json.dumps(result))
""")


@pytest.mark.slow
def test_real_rows_parse_with_vllms_own_parser(tmp_path):
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CACHE_ROOT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHECK, *map(str, CONFIGS), str(RUNNERS)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, (
        "vllm's parser could not be run (CI installs it from .ci/vllm-requirements.txt):\n"
        + proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["checked"] >= 100, result  # 120 single-node vLLM rows in the snapshot
    assert result["failures"] == []
    assert result["mismatches"] == []
    assert all(result["negative"]), result["negative"]
