"""Every Dynamo row `kvbench launch` renders from its srt-slurm recipe passes the parsers the
stand-in (launch/stand_in.py) checks it with, as `kvbench run --stand-in sim` would on each
worker's node: the frontend by `dynamo.frontend`'s, each dynamo.vllm worker by Dynamo's own
(its flags, then vLLM's engine arguments), each dynamo.sglang worker by Dynamo's flag groups
then SGLang's. What the installed releases (ai-dynamo 1.6.1, vLLM 0.33.0, SGLang 0.5.23) do not
define and the rows' images do is set aside, each listed and counted here, never silently;
a flag no release defines is rejected with the parser's message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

pytestmark = pytest.mark.slow

# Run in a process of its own, as the stand-in runs on a worker's node: vLLM's parser picks
# its platform when first imported (VLLM_TARGET_DEVICE=cpu, which the check sets).
CHECK_ALL = """
import json, sys
from collections import Counter
from kvbench.launch.stand_in import CHECKS
WORKERS = {"dynamo.vllm": "dynamo-vllm", "dynamo.sglang": "dynamo-sglang"}
launched = json.load(open(sys.argv[1]))
checked, dropped, renamed, rejected = Counter(), Counter(), Counter(), []
def tally(name, exp, role, result):
    checked[name] += 1
    if not result["ok"]:
        rejected.append([exp, role, result["error"]])
        return
    sglang = name == "dynamo-sglang"
    dropped.update(d.split(" ")[0] if sglang else d for d in result.get("dropped", []))
    renamed.update(result.get("renamed", []))
for spec in launched:
    tally("dynamo-frontend", spec["exp-name"], "frontend",
          CHECKS["dynamo-frontend"](spec["argv"][3:]))
    for w in spec["workers"]:
        start = w["argv"].index("-m") + 1
        name = WORKERS[w["argv"][start]]
        tally(name, spec["exp-name"], w["role"], CHECKS[name](w["argv"][start + 1:]))
spec = next(s for s in launched if s["engine"] == "dynamo-vllm")
argv = spec["workers"][0]["argv"]
bad = [CHECKS["dynamo-vllm"]([*argv[argv.index("-m") + 2:], "--carrier-pigeon"]),
       CHECKS["dynamo-frontend"]([*spec["argv"][3:], "--carrier-pigeon"])]
print(json.dumps({"checked": checked, "dropped": dropped, "renamed": renamed,
                  "rejected": rejected, "bad": bad}))
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
         "--multi-node", "--framework", "dynamo-vllm", "--framework", "dynamo-sglang",
         "--runner-config", str(RUNNERS), "--config-files", *map(str, CONFIGS)],
        capture_output=True, text=True, check=True)
    launched = tmp_path_factory.mktemp("dynamo") / "launched.json"
    launched.write_text(out.stdout)
    out = subprocess.run([sys.executable, "-c", CHECK_ALL, str(launched)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_every_dynamo_command_line_passes_its_parser(checked):
    assert not checked["rejected"], checked["rejected"][:5]
    assert checked["checked"] == {"dynamo-frontend": 134, "dynamo-vllm": 245,
                                  "dynamo-sglang": 157}
    assert checked["dropped"] == {"--attention-config use_fp4_indexer_cache": 152,
                                  "--nsa-decode-backend": 79, "--nsa-prefill-backend": 79,
                                  "--router-reset-states": 64,
                                  "--mamba-scheduler-strategy": 14,
                                  "--prefill-round-robin-balance": 7}
    # SGLang 0.5.23 splits --cuda-graph-max-bs per phase (SGLANG_RENAMED)
    assert checked["renamed"] == {"--moe-backend deep_gemm_amxf4_mega_moe": 41,
                                  "--cuda-graph-max-bs": 138}


def test_a_flag_no_release_defines_is_rejected_with_the_parsers_message(checked):
    worker, front = checked["bad"]
    assert not worker["ok"] and "unrecognized arguments: --carrier-pigeon" in worker["error"]
    assert not front["ok"] and "--carrier-pigeon" in front["error"]
