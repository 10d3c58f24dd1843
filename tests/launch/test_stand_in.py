"""The stand-in's router check is sglang-router's own parser: it accepts the command line the
sglang-disagg adapter builds (with the recipes' 0.3.2 `consistent_hashing` policy) and
rejects what that parser rejects. (SGLang's own check is exercised end to end, acceptance
and rejection, on real Slurm in tests/sweep/test_slurm_disagg.py.)"""

from __future__ import annotations

from conftest import REPO

from kvbench.engines import get_adapter
from kvbench.launch.stand_in import check_router
from kvbench.matrix import Selection, select_jobs
from kvbench.recipe import load_runners

RECIPE = REPO / "tests" / "sweep" / "data" / "sglang-disagg-qwen3.yaml"
RUNNERS = REPO / "examples" / "runners.yaml"


def _router_args() -> list[str]:
    [job] = select_jobs(Selection(config_files=(RECIPE,), runner_config=RUNNERS))
    spec = get_adapter("sglang-disagg").build(job, None, port=30000,
                                              runners=load_runners(RUNNERS))
    return [a.replace("{node0}", "10.0.0.1").replace("{node1}", "10.0.0.2")
            for a in spec.argv[spec.program_len:]]


def test_the_adapters_router_command_line_parses():
    result = check_router(_router_args())
    assert result["ok"], result
    assert result["args"]["pd_disaggregation"] and result["args"]["port"] == 30000
    assert result["args"]["prefill"] == [["http://10.0.0.1:30001"]]
    assert result["args"]["decode"] == [["http://10.0.0.2:30001"]]
    assert result["args"]["policy"] == "consistent_hashing"


def test_the_router_parser_rejects_what_it_should():
    args = _router_args()
    bad_policy = [*args[:args.index("--policy") + 1], "coin_flip",
                  *args[args.index("--policy") + 2:]]
    result = check_router(bad_policy)
    assert not result["ok"] and "coin_flip" in result["error"]
    result = check_router([*args, "--no-such-flag"])
    assert not result["ok"] and "--no-such-flag" in result["error"]
