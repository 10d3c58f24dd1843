"""A recipe row's srt-slurm recipe comes from the InferenceX checkout its master config belongs
to (recipe/layout.py benchmark_folder, multinode_recipe_path), as the NVIDIA runners find it:
`recipes/<x>` and `benchmarks/multi_node/srt-slurm-recipes/<x>` are both the checkout's
`benchmarks/multi_node/srt-slurm-recipes/<x>`. Without the file the row is refused with one
line naming the path searched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from fixtures.inferencex import INFERENCEX, RUNNERS

from kvbench.cli import main
from kvbench.engines import get_adapter
from kvbench.errors import EngineError
from kvbench.matrix import Selection, select_jobs
from kvbench.recipe.layout import MULTI_NODE_RECIPES, benchmark_folder, multinode_recipe_path
from kvbench.sweep import build_specs
from kvbench.sweep.options import RunOptions

DATA = Path(__file__).resolve().parents[1] / "data"
KEY = "minimaxm3-fp4-gb300-dynamo-vllm-agentic-mtp-disagg"
EXP = "minimaxm3_p1x2_d1x4_conc20_kvdram-mooncake"
RECIPE = "vllm/minimax-m3/agentic/gb300-fp4/1p1d-tp2-tp4-c20-c24-agentic.yaml"


def test_the_benchmark_folder_of_each_layout(tmp_path):
    root = tmp_path / "InferenceX"
    assert benchmark_folder(root / "configs" / "nvidia-master.yaml") == root.resolve()
    assert benchmark_folder(root / ".github" / "configs" / "x.yaml") == root.resolve()
    e2e = root / "inferencex-e2e"
    assert benchmark_folder(e2e / "configs" / "nvidia-master.yaml") == e2e.resolve()
    # a copy of the configs outside a checkout: the folder it lies in
    assert benchmark_folder(INFERENCEX / "nvidia-master.yaml") == INFERENCEX


def test_both_spellings_name_the_checkouts_recipe(tmp_path):
    want = tmp_path / MULTI_NODE_RECIPES / "vllm" / "x.yaml"
    assert multinode_recipe_path("recipes/vllm/x.yaml", tmp_path) == want
    assert multinode_recipe_path(f"{MULTI_NODE_RECIPES}/vllm/x.yaml", tmp_path) == want


def _checkout(tmp_path: Path, name: str, with_recipe: bool = True) -> Path:
    """A classic checkout (configs/ at its root) holding the row's master config and, unless
    told otherwise, its one recipe."""
    root = tmp_path / name
    (root / "configs").mkdir(parents=True)
    for f in ("nvidia-master.yaml", "runners.yaml"):
        shutil.copy(INFERENCEX / f, root / "configs" / f)
    if with_recipe:
        dest = root / MULTI_NODE_RECIPES / RECIPE
        dest.parent.mkdir(parents=True)
        shutil.copy(INFERENCEX / MULTI_NODE_RECIPES / RECIPE, dest)
    return root


def _job(root: Path):
    selection = Selection(config_files=(root / "configs" / "nvidia-master.yaml",),
                          runner_config=root / "configs" / "runners.yaml", config_keys=(KEY,))
    return next(j for j in select_jobs(selection) if j.exp_name == EXP)


def test_the_row_reads_the_recipe_of_its_own_checkout(tmp_path):
    job = _job(_checkout(tmp_path, "a"))
    assert job.config_file == (tmp_path / "a" / "configs" / "nvidia-master.yaml").resolve()
    spec = get_adapter(job.framework, multinode=True).build(job, None, port=8000)
    argv = spec.workers[0].argv
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"
    # another checkout whose copy of the recipe says otherwise: its rows read its copy
    other = _checkout(tmp_path, "b")
    recipe = other / MULTI_NODE_RECIPES / RECIPE
    data = yaml.safe_load(recipe.read_text())
    data["backend"]["vllm_config"]["prefill"]["gpu-memory-utilization"] = 0.5
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = get_adapter(job.framework, multinode=True).build(_job(other), None, port=8000)
    argv = spec.workers[0].argv
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.5"


def test_a_missing_recipe_is_refused_naming_the_path_searched(tmp_path, capsys):
    root = _checkout(tmp_path, "c", with_recipe=False)
    job = _job(root)
    with pytest.raises(EngineError) as e:
        get_adapter(job.framework, multinode=True).build(job, None, port=8000)
    searched = root.resolve() / MULTI_NODE_RECIPES / RECIPE
    assert f"no srt-slurm recipe at {searched}" in e.value.message
    assert "\n" not in e.value.message
    # `kvbench launch` refuses it with that line
    with pytest.raises(SystemExit):
        main(["launch", "--dry-run", "--config-files",
              str(root / "configs" / "nvidia-master.yaml"), "--runner-config",
              str(root / "configs" / "runners.yaml"), "--config-keys", KEY, "--exp-name", EXP])
    err = "".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert f"{EXP}:CONFIG_FILErecipes/{RECIPE}:nosrt-slurmrecipeat{searched}(" in err, err


def test_a_row_made_without_its_master_config_is_refused():
    job = _job_from_repo()
    bare = type(job)(job.config_key, job.row, job.scenario)
    with pytest.raises(EngineError, match="names no master config file"):
        get_adapter(job.framework, multinode=True).build(bare, None, port=8000)


def _job_from_repo():
    selection = Selection(config_files=(INFERENCEX / "nvidia-master.yaml",),
                          runner_config=RUNNERS, config_keys=(KEY,))
    return next(j for j in select_jobs(selection) if j.exp_name == EXP)


def test_a_job_file_keeps_the_master_config_of_its_row(tmp_path):
    """`kvbench run-job` on a Slurm node rebuilds the job from job.json: the recipe is then
    found in the same checkout."""
    job = _job_from_repo()
    [spec] = build_specs([job], RunOptions())
    assert spec.config_file == str(INFERENCEX / "nvidia-master.yaml")
    spec.write(tmp_path / "job.json")
    again = type(spec).read(tmp_path / "job.json").job()
    assert again.config_file == job.config_file and again == job


def test_the_newer_layout_resolves_config_file_under_its_benchmark_folder(tmp_path, capsys):
    """inferencex-e2e/: the row's CONFIG_FILE is looked up under inferencex-e2e/benchmarks/
    (the subset ships no recipe: refused, naming where it looked)."""
    root = tmp_path / "InferenceX"
    shutil.copytree(DATA / "inferencex-e2e" / "configs", root / "inferencex-e2e" / "configs")
    configs = root / "inferencex-e2e" / "configs"
    with pytest.raises(SystemExit):  # none of the rows launches
        main(["launch", "--dry-run", "--config-files", str(configs / "nvidia-master.yaml"),
              "--runner-config", str(configs / "runners.yaml"), "--config-keys",
              "dsv4-fp4-gb300-dynamo-vllm-agentic-mtp-disagg"])
    err = "".join(capsys.readouterr().err.split())
    base = (root / "inferencex-e2e").resolve() / MULTI_NODE_RECIPES
    assert f"nosrt-slurmrecipeat{base}/dsv4/vllm/" in err, err
