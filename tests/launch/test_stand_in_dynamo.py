"""Every Dynamo and multi-node vLLM row `kvbench launch` renders from its srt-slurm recipe
passes the parsers the stand-in (launch/stand_in.py) checks it with, as `kvbench run
--stand-in sim` would on each worker's node, by its program (PROGRAM_CHECKS): the Dynamo
frontend by `dynamo.frontend`'s, each dynamo.vllm worker by Dynamo's own (its flags, then
vLLM's engine arguments), each dynamo.sglang worker by Dynamo's flag groups then SGLang's;
behind a recipe's `frontend.type: sglang` the router by sglang-router's parser and each
`sglang.launch_server` by SGLang's, behind `frontend.type: vllm` each `vllm serve` rank (no
front) by vLLM's. What the installed releases (ai-dynamo 1.6.1, vLLM 0.33.0, SGLang 0.5.23,
sglang-router 0.3.2) do not define and the rows' images do is set aside, each listed and
counted here, never silently; a flag no release defines is rejected with the parser's
message."""

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
from kvbench.launch.stand_in import CHECKS, PROGRAM_CHECKS
launched = json.load(open(sys.argv[1]))
checked, dropped, renamed, rejected = Counter(), Counter(), Counter(), []
def check(argv):
    start = next(i for i, a in enumerate(argv) if a in PROGRAM_CHECKS)
    name = PROGRAM_CHECKS[argv[start]]
    return name, CHECKS[name](argv[start + 1:])
def tally(exp, role, argv):
    name, result = check(argv)
    checked[name] += 1
    if not result["ok"]:
        rejected.append([exp, role, result["error"]])
        return
    sglang = name in ("dynamo-sglang", "sglang")
    dropped.update(d.split(" ")[0] if sglang else d for d in result.get("dropped", []))
    renamed.update(result.get("renamed", []))
for spec in launched:
    if spec["argv"]:  # none behind vLLM's own server
        tally(spec["exp-name"], "frontend", spec["argv"])
    for w in spec["workers"]:
        tally(spec["exp-name"], w["role"], w["argv"])
def with_pigeon(program, pick):
    spec = next(s for s in launched if program in pick(s))
    return check([*pick(spec), "--carrier-pigeon"])[1]
bad = [with_pigeon(p, pick) for p, pick in [
    ("dynamo.vllm", lambda s: s["workers"][0]["argv"]),
    ("dynamo.frontend", lambda s: s["argv"]),
    ("sglang.launch_server", lambda s: s["workers"][0]["argv"]),
    ("sglang_router.launch_router", lambda s: s["argv"]),
    ("serve", lambda s: s["workers"][-1]["argv"])]]
print(json.dumps({"checked": checked, "dropped": dropped, "renamed": renamed,
                  "rejected": rejected, "bad": bad}))
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
         "--multi-node", "--framework", "dynamo-vllm", "--framework", "dynamo-sglang",
         "--framework", "vllm",
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
    # 134 rows behind Dynamo's frontend, 23 behind SGLang's router (one aggregated worker
    # each), 55 Kimi-K3 rows behind vLLM's own server (190 `vllm serve` node ranks)
    assert checked["checked"] == {"dynamo-frontend": 134, "dynamo-vllm": 245,
                                  "dynamo-sglang": 157, "sglang-router": 23, "sglang": 23,
                                  "vllm": 190}
    assert checked["dropped"] == {"--attention-config use_fp4_indexer_cache": 152,
                                  "--nsa-decode-backend": 79, "--nsa-prefill-backend": 79,
                                  "--router-reset-states": 64,
                                  "--mamba-scheduler-strategy": 28,
                                  "--prefill-round-robin-balance": 7}
    # SGLang 0.5.23 splits --cuda-graph-max-bs per phase (SGLANG_RENAMED)
    assert checked["renamed"] == {"--moe-backend deep_gemm_amxf4_mega_moe": 41,
                                  "--cuda-graph-max-bs": 161}


def test_a_flag_no_release_defines_is_rejected_with_the_parsers_message(checked):
    # dynamo.vllm, dynamo.frontend, sglang.launch_server, sglang-router, vllm serve
    for result in checked["bad"]:
        assert not result["ok"] and "--carrier-pigeon" in result["error"], result
