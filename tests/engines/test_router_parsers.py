"""Router command lines of DP-attention rows, accepted by the routers' own parsers
(`parse_router_args` of sglang-router 0.3.2, smg 1.13 and vllm-router 0.1.14, pinned in
.ci/router-requirements.txt). Runs in a subprocess to keep their logging setup out of the
test session."""

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
TESTS = Path(__file__).resolve().parents[1]

CHECK = textwrap.dedent("""
    import contextlib, importlib, io, json, sys
    from pathlib import Path
    from fixtures.engines_rows import make_job
    from kvbench.engines import get_adapter
    from kvbench.matrix import Selection, select_jobs
    from kvbench.plan import plan_job

    MODULES = {"sglang_router.launch_router": "sglang-router", "smg.launch_router": "smg",
               "vllm_router.launch_router": "vllm-router"}

    def module_of(argv):
        return argv[2] if argv[:2] == ["python3", "-m"] else {
            "vllm-router": "vllm_router.launch_router"}[argv[0]]

    # What the router in InferenceX's SGLang images accepts beyond the PyPI sglang-router 0.3.2
    # installed here: the launchers at 843c6254f run `--policy consistent_hashing
    # --connect-timeout-secs 900` with it (tests/engines/data/launcher_oracle/ records the
    # command). Those two are set aside; everything else is checked by 0.3.2's parser.
    IMAGE_ONLY = {"--connect-timeout-secs": None, "--policy": "consistent_hashing"}

    def without_image_only(args):
        out, i = [], 0
        while i < len(args):
            flag = args[i]
            if flag in IMAGE_ONLY and IMAGE_ONLY[flag] in (None, args[i + 1]):
                i += 2
                continue
            out.append(flag)
            i += 1
        return out

    def parse(argv):
        mod = importlib.import_module(module_of(argv))
        args = argv[3:] if argv[:2] == ["python3", "-m"] else argv[1:]
        if module_of(argv) == "sglang_router.launch_router":
            args = without_image_only(args)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                return mod.parse_router_args(args), None
        except SystemExit:
            return None, (err.getvalue().strip().splitlines() or ["?"])[-1]

    configs, runners = [Path(p) for p in sys.argv[1:-1]], Path(sys.argv[-1])
    jobs = [j for j in select_jobs(Selection(config_files=tuple(configs),
                                             runner_config=runners, single_node=True))
            if j.row.get("dp-attn") and j.framework in ("sglang", "vllm")]
    specs = [(j.exp_name, get_adapter(j.framework).build(j, plan_job(j), port=8888))
             for j in jobs]
    smg_job = make_job(tp=4, ep=4, dp_attn=True, router={"name": "smg", "version": "1.13.0"})
    specs.append(("literal-smg", get_adapter("sglang").build(smg_job, None, port=8888)))
    result = {"checked": {}, "failures": [], "mismatches": []}
    for name, spec in specs:
        args, error = parse(spec.router_argv)
        key = MODULES[module_of(spec.router_argv)]
        result["checked"][key] = result["checked"].get(key, 0) + 1
        if error:
            result["failures"].append([name, error])
            continue
        engine = spec.metrics_url.removesuffix("/metrics")
        if args.worker_urls != [engine] or args.port != 8888:
            result["mismatches"].append([name, args.worker_urls, args.port])
    print(json.dumps(result))
""")


@pytest.mark.slow
def test_router_argv_of_real_dp_attention_rows_parse(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHECK, *map(str, CONFIGS), str(RUNNERS)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, (
        "router parsers could not be run (CI installs them from "
        ".ci/router-requirements.txt):\n" + proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["checked"].get("sglang-router", 0) >= 10, result
    assert result["checked"].get("vllm-router", 0) >= 10, result
    assert result["checked"].get("smg") == 1, result
    assert result["failures"] == []
    assert result["mismatches"] == []
