"""Acceptance: every SGLang command line generated for the real InferenceX agentic rows is
accepted by SGLang's own parser, `sglang.srt.server_args.prepare_server_args`.

What is validated: the installed sglang (pinned in .ci/sglang-requirements.txt) builds its
argparse parser with `ServerArgs.add_cli_args` and parses our arguments (flag names, value
types, choices, required flags), then constructs `ServerArgs` from them. In this sglang
version construction defers the hardware- and checkpoint-dependent resolution to
`resolve_once()`, which needs a GPU and the model's config, so that part is not run. Rows
whose image is an older release (v0.5.12) are also built with the installed version's flag
spellings and checked the same way; their own spelling is checked in test_adapters.py.

The check runs in a subprocess: importing sglang sets process-wide state (cache paths,
logging) that must not leak into the test session."""

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
    import sglang
    from sglang.srt.server_args import prepare_server_args
    from kvbench.engines import get_adapter
    from kvbench.matrix import Selection, select_jobs
    from kvbench.plan import plan_job
    from kvbench.plan.version import image_version

    installed = sglang.__version__
    configs, runners = [Path(p) for p in sys.argv[1:-1]], Path(sys.argv[-1])
    jobs = select_jobs(Selection(config_files=tuple(configs), runner_config=runners,
                                 frameworks=("sglang",), single_node=True))

    def parse(args):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                return prepare_server_args(args), None
        except SystemExit:
            return None, (err.getvalue().strip().splitlines() or ["?"])[-1]

    result = {"sglang": installed, "checked": 0, "as_image": 0, "failures": [],
              "mismatches": []}
    for job in jobs:
        plan = plan_job(job)
        release = image_version(job.row["image"]).release
        version = installed if release is not None and release < (0, 5, 16) else None
        spec = get_adapter("sglang").build(job, plan, port=30000, engine_version=version)
        args, error = parse(spec.engine_args)
        result["checked"] += 1
        result["as_image"] += version is None
        if error:
            result["failures"].append([job.exp_name, error])
            continue
        # The parser read our values into the fields we meant.
        # a page the recipe leaves to SGLang stays unset until SGLang resolves it on the GPU
        page = None if "page-size" in plan.engine_defaults else plan.page_size_tokens
        want = {"tp_size": job.row["tp"], "page_size": page,
                "mem_fraction_static": plan.mem_fraction_static,
                "enable_dp_attention": bool(job.row.get("dp-attn")),
                "enable_hierarchical_cache": plan.backend == "hicache",
                # None where the launcher leaves it to SGLang (qwen3.5 on H100/H200)
                "max_running_requests": int(spec.argv[spec.argv.index(
                    "--max-running-requests") + 1])
                if "--max-running-requests" in spec.argv else None}
        for field, value in want.items():
            if getattr(args, field) != value:
                result["mismatches"].append([job.exp_name, field, getattr(args, field), value])
    # Negative controls: the parser really rejects what it should.
    _, bad_choice = parse(["--model-path", "m", "--hicache-write-policy", "write_sometimes"])
    _, bad_flag = parse(["--model-path", "m", "--hicache-sise", "10"])
    _, bad_type = parse(["--model-path", "m", "--tp-size", "two"])
    result["negative"] = [bad_choice, bad_flag, bad_type]
    print(json.dumps(result))
""")


@pytest.mark.slow
def test_real_rows_parse_with_sglangs_own_parser(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
        "SGLANG_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", CHECK, *map(str, CONFIGS), str(RUNNERS)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, (
        "sglang's parser could not be run (CI installs it from .ci/sglang-requirements.txt):\n"
        + proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["checked"] >= 300, result  # 322 single-node sglang rows in the snapshot
    assert result["as_image"] >= result["checked"] - 20
    assert result["failures"] == []
    assert result["mismatches"] == []
    bad_choice, bad_flag, bad_type = result["negative"]
    assert bad_choice and "invalid choice" in bad_choice
    assert bad_flag and "unrecognized arguments" in bad_flag
    assert bad_type and "invalid int value" in bad_type
