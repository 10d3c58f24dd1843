"""The newer InferenceX layout (inferencex-e2e/, fabe70b7): its schema, its runners.yaml and
`kvbench validate` on its configs/ folder, next to the classic layout."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from kvbench.cli import main
from kvbench.errors import RecipeError
from kvbench.recipe import load_master_configs, load_runners
from kvbench.recipe.layout import find_checkout, kind_of

DATA = Path(__file__).resolve().parents[1] / "data"
E2E = DATA / "inferencex-e2e" / "configs"
MASTER = E2E / "nvidia-master.yaml"
RUNNERS = E2E / "runners.yaml"


def _master() -> dict:
    return yaml.safe_load(MASTER.read_text())


def _errors(tmp_path: Path, data: dict) -> list[str]:
    path = tmp_path / "nvidia-master.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RecipeError) as info:
        load_master_configs([path])
    return info.value.errors


def test_the_subset_validates_with_every_new_feature():
    entries = load_master_configs([MASTER])
    assert len(entries) == 10
    agg = entries["dsv4-fp4-b200-dynamo-sglang-agentic-agg"].raw
    row = agg["scenarios"]["agentic-coding"][0]["search-space"][0]
    assert row["num-nodes"] == 1 and row["worker"]["tp"] == 8
    flash = entries["dsv41flash-fp4-h200-sglang-agentic-dspark"].raw
    assert flash["scenarios"]["agentic-coding"][0]["search-space"][0]["srt-recipe"].endswith(
        "agentic.yaml")


def test_new_runners_layout_gives_node_facts_per_cluster_label():
    runners = load_runners(RUNNERS)
    assert runners.layout == "e2e"
    hw = runners.hardware_for("cluster:b300-dsxe")
    assert (hw.gpus_per_node, hw.available_cpu_dram_mib) == (8, 3_977_095)
    assert runners.gpus_per_node("cluster:gb300-nv") == 4
    assert runners.nodes_for("partition:batch_3") == ["gb300-nv_18"]


def test_classic_runners_layout_is_unchanged():
    runners = load_runners(DATA / "inferencex" / "runners.yaml")
    assert runners.layout == "classic"
    assert runners.gpus_per_node("cluster:b300-nv") == 8


@pytest.mark.parametrize("edit,expected", [
    (lambda d: d["clusters"].pop("gb300-nv"),
     "'cluster:<id>' labels without a clusters entry: ['gb300-nv']"),
    (lambda d: d["labels"]["cluster:b300-dsxe"].append("gb300-nv_00"),
     "runners listed under several clusters"),
    (lambda d: d["labels"].__setitem__("partition:batch_9", ["gb300-nv_00"]),
     "selects partition 'batch_9', which cluster 'gb300-nv' does not declare"),
    (lambda d: d["clusters"]["b300-dsxe"].__setitem__("arch", "arm64"),
     "clusters.b300-dsxe.arch: 'arm64' is not allowed"),
    (lambda d: d.__setitem__("hardware", {"cluster:x": {"gpus-per-node": 8,
                                                        "available-cpu-dram-mib": 1}}),
     "not both"),
    # once a traceback (TypeError from the partition check): found by the plain schema's test
    (lambda d: d["clusters"]["gb300-nv"]["slurm"].__setitem__("partitions", 5),
     "clusters.gb300-nv.slurm.partitions: 'partitions' is a list of Slurm partition names"),
    (lambda d: d["clusters"]["gb300-nv"]["slurm"]["partitions"].append(["batch_9"]),
     "'partitions' is a list of Slurm partition names (got ['batch_1', 'batch_3', "),
])
def test_runners_inventory_rules(tmp_path, edit, expected):
    data = yaml.safe_load(RUNNERS.read_text())
    edit(data)
    path = tmp_path / "runners.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError) as info:
        load_runners(path)
    assert any(expected in line for line in info.value.errors), info.value.errors


def _agg_row(data: dict) -> dict:
    return data["dsv4-fp4-b200-dynamo-sglang-agentic-agg"]["scenarios"]["agentic-coding"][0][
        "search-space"][0]


def test_aggregated_worker_needs_num_nodes(tmp_path):
    data = _master()
    del _agg_row(data)["num-nodes"]
    (line,) = _errors(tmp_path, data)
    assert "needs 'num-nodes'" in line and "search-space[0]" in line


def test_aggregated_worker_refused_on_a_disagg_entry(tmp_path):
    data = _master()
    data["dsv4-fp4-b200-dynamo-sglang-agentic-agg"]["disagg"] = True
    data["dsv4-fp4-b200-dynamo-sglang-agentic-agg"]["kv-p2p-transfer"] = "nixl"
    (line,) = _errors(tmp_path, data)
    assert "needs 'disagg: false'" in line and "search-space[0].worker" in line


def test_worker_and_prefill_together_refused(tmp_path):
    data = _master()
    row = _agg_row(data)
    row["prefill"] = copy.deepcopy(row["worker"])
    row["decode"] = copy.deepcopy(row["worker"])
    (line,) = _errors(tmp_path, data)
    assert "exactly one topology" in line


def test_require_power_only_on_8k1k(tmp_path):
    data = _master()
    block = data["dsr1-fp4-b200-dynamo-trt"]["scenarios"]["fixed-seq-len"][0]
    block["require-power"] = True
    load_master_configs([_write(tmp_path, data)])
    block["isl"] = 1024
    (line,) = _errors(tmp_path, data)
    assert "'require-power' is supported only for isl 8192 / osl 1024" in line


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "nvidia-master.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def e2e_checkout(tmp_path: Path) -> Path:
    """A newer checkout root: inferencex-e2e/configs/ with the real subset, ci-priority.yaml,
    and the non-recipe neighbours the real folder has (CONFIGS.md, deprecated/, srt-recipes/)."""
    configs = tmp_path / "inferencex-e2e" / "configs"
    shutil.copytree(E2E, configs)
    (configs / "CONFIGS.md").write_text("# Configs\n")
    (configs / "deprecated").mkdir()
    shutil.copy(MASTER, configs / "deprecated" / "old-master.yaml")
    (configs / "srt-recipes").mkdir()
    (configs / "srt-recipes" / "agentic-single.yaml").write_text("schema: 2\nroles: {}\n")
    return tmp_path


def test_validate_names_each_non_recipe_and_passes(e2e_checkout, capsys, monkeypatch):
    monkeypatch.chdir(e2e_checkout / "inferencex-e2e")
    configs = sorted(Path("configs").iterdir())
    main(["validate", *map(str, configs)])
    out, err = capsys.readouterr()
    assert "skip configs/ci-priority.yaml (the CI priority policy" in out
    assert "skip configs/CONFIGS.md (documentation" in out
    assert "skip configs/deprecated/ (retired configs" in out
    assert "skip configs/srt-recipes/ (srt-slurm launch recipes" in out
    assert "ok  configs/nvidia-master.yaml (master config)" in out
    assert "ok  configs/runners.yaml (runners file)" in out
    assert out.rstrip().endswith("10 config keys valid")
    # this checkout has no validation module refusing CONFIG_FILE=: nothing retired, no warning
    assert "selects a launch recipe" not in err


RETIRING = '"""Stands for a checkout validation that refuses launch-recipe settings."""\n' \
    'RECIPE_SETTINGS = {"CONFIG_FILE": "srt-recipe", "EVAL_CONFIG_FILE": "eval-srt-recipe"}\n'
KEEPING = '"""Stands for a checkout validation that does not look at worker settings."""\n' \
    'FIELDS = {"srt-recipe": "srt-recipe"}\n'


@pytest.mark.parametrize("module,warnings", [(RETIRING, 7), (KEEPING, 0)])
def test_retired_recipe_setting_warning_follows_the_checkouts_validation(
        e2e_checkout, capsys, monkeypatch, module, warnings):
    """The CONFIG_FILE= spelling is retired where the checkout's own validation module rules
    on it (InferenceX from 07db303e): one warning per config key, the entry still valid."""
    infx = e2e_checkout / "inferencex-e2e" / "infx" / "matrix"
    infx.mkdir(parents=True)
    (infx / "validation.py").write_text(module)
    monkeypatch.chdir(e2e_checkout / "inferencex-e2e")
    main(["validate", "configs/nvidia-master.yaml", "configs/runners.yaml"])
    out, err = capsys.readouterr()
    assert out.rstrip().endswith("10 config keys valid")
    assert err.count("CONFIG_FILE= selects a launch recipe") == warnings
    if warnings:
        assert "infx/matrix/validation.py) refuses" in err


def test_classic_checkout_keeps_config_file(tmp_path, capsys, monkeypatch):
    """843c6254f selects every srt-slurm recipe with CONFIG_FILE= and its validation
    (utils/matrix_logic/validation.py) never names it: the 82 keys doing so get no warning."""
    (tmp_path / "configs").mkdir()
    for name in ("amd-master.yaml", "nvidia-master.yaml", "runners.yaml"):
        shutil.copy(DATA / "inferencex" / name, tmp_path / "configs" / name)
    (tmp_path / "utils" / "matrix_logic").mkdir(parents=True)
    (tmp_path / "utils" / "matrix_logic" / "validation.py").write_text(KEEPING)
    monkeypatch.chdir(tmp_path)
    main(["validate"])
    out, err = capsys.readouterr()
    assert out.rstrip().endswith("208 config keys valid")
    assert "selects a launch recipe" not in err


def test_validate_without_files_finds_the_checkout(e2e_checkout, capsys, monkeypatch):
    monkeypatch.chdir(e2e_checkout)
    main(["validate"])
    out = capsys.readouterr().out
    assert "inferencex-e2e/configs/nvidia-master.yaml (master config)" in out
    assert out.rstrip().endswith("10 config keys valid")


def test_find_checkout_in_both_layouts(e2e_checkout, tmp_path):
    new = find_checkout(e2e_checkout)
    assert new is not None and new.layout == "e2e"
    assert new.base == (e2e_checkout / "inferencex-e2e").resolve()
    assert find_checkout(e2e_checkout / "inferencex-e2e" / "configs").base == new.base
    classic = tmp_path / "classic"
    (classic / "configs").mkdir(parents=True)
    shutil.copy(DATA / "inferencex" / "runners.yaml", classic / "configs")
    old = find_checkout(classic)
    assert old is not None and old.layout == "classic" and old.changelog == (
        classic.resolve() / "perf-changelog.yaml")
    assert find_checkout(tmp_path / "a" / "b") is None


def test_kind_of_by_name():
    assert kind_of(Path("configs/ci-priority.yaml")) == "ci-priority"
    assert kind_of(Path("configs/deprecated/x.yaml")) == "deprecated"
    assert kind_of(Path("configs/srt-recipes/tuning/x.yaml")) == "srt-recipes"
    assert kind_of(Path("perf-changelog.yaml")) == "changelog"
    assert kind_of(Path("configs/nvidia-master.yaml")) is None
