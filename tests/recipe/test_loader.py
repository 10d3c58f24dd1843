"""Loading the real files, files as a whole (duplicates, YAML syntax), and runners.yaml."""

from __future__ import annotations

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.recipes import SINGLE, valid_recipe, write_recipe

from kvbench.errors import RecipeError
from kvbench.recipe import (
    AgenticRow,
    MultiNodeMasterEntry,
    SingleNodeMasterEntry,
    load_master_configs,
    load_runners,
)


def test_real_master_configs_load(shared_data):
    entries = load_master_configs(CONFIGS)
    assert len(entries) == 208
    qwen = entries["qwen3.5-fp8-b300-sglang-agentic-mtp"]
    assert isinstance(qwen, SingleNodeMasterEntry)
    block = qwen.scenarios.agentic_coding[0]
    assert block.dram_utilization == 0.80
    row = block.search_space[2]
    assert isinstance(row, AgenticRow)
    assert (row.tp, row.ep, row.kv_offloading, row.kv_offload_backend.name) == (
        2, 2, "dram", "hicache")
    assert qwen.source == CONFIGS[1]
    multinode = [e for e in entries.values() if isinstance(e, MultiNodeMasterEntry)]
    assert multinode and all(e.multinode for e in multinode)


def test_real_runners_load(shared_data):
    runners = load_runners(RUNNERS)
    b300 = runners.hardware["cluster:b300-nv"]
    assert (b300.available_cpu_dram_mib, b300.gpus_per_node) == (2_964_436, 8)
    assert runners.hardware["cluster:gb200-nv"].gpus_per_node == 4
    assert "h100-dgxc-slurm_07" in runners.labels["h100"]


def test_duplicate_key_across_files(tmp_path):
    first = write_recipe(tmp_path, name="a.yaml")
    second = write_recipe(tmp_path, name="b.yaml")
    with pytest.raises(RecipeError) as info:
        load_master_configs([first, second])
    assert any(f"config key '{SINGLE}' is already defined in {first}" in e
               for e in info.value.errors)


def test_duplicate_key_inside_a_file(tmp_path):
    path = tmp_path / "dup.yaml"
    body = yaml.safe_dump(valid_recipe(), sort_keys=False)
    path.write_text(body + body.split("\n", 1)[0] + " {}\n")
    with pytest.raises(RecipeError) as info:
        load_master_configs([path])
    assert any(f"duplicate key '{SINGLE}' (YAML keeps only the last)" in e
               for e in info.value.errors)


def test_glob_characters_in_keys_are_reserved(tmp_path):
    data = {"qwen*-b300": valid_recipe()[SINGLE]}
    with pytest.raises(RecipeError, match="reserved for key globs"):
        load_master_configs([write_recipe(tmp_path, data)])


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("a:\n  b: [1, 2\n  c: 3\n")
    with pytest.raises(RecipeError, match=r"broken\.yaml:\d+: not valid YAML"):
        load_master_configs([path])


def test_missing_file(tmp_path):
    with pytest.raises(RecipeError, match="file not found"):
        load_master_configs([tmp_path / "nope.yaml"])


def test_offload_size_extension_is_optional_and_flows_into_rows(tmp_path):
    from kvbench.matrix import Selection, generate_rows

    data = valid_recipe()
    row = data[SINGLE]["scenarios"]["agentic-coding"][0]["search-space"][2]
    row["kv-offload-backend"]["size-gb-per-rank"] = 120
    path = write_recipe(tmp_path, data)
    entry = load_master_configs([path])[SINGLE]
    assert entry.scenarios.agentic_coding[0].search_space[2].kv_offload_backend \
        .size_gb_per_rank == 120
    rows = generate_rows(Selection(config_files=(path,), config_keys=(SINGLE,)))
    assert rows[-1]["kv-offload-backend"] == {"name": "hicache", "size-gb-per-rank": 120}


def test_runners_rules(tmp_path):
    path = tmp_path / "runners.yaml"
    path.write_text(yaml.safe_dump({
        "labels": {"a": [], "b": "not-a-list"},
        "hardware": {"cluster:x": {"available-cpu-dram-mib": 0, "gpus-per-node": 8}},
    }))
    with pytest.raises(RecipeError) as info:
        load_runners(path)
    text = "\n".join(info.value.errors)
    assert "labels.b: expected a list, got 'not-a-list' (str)" in text
    assert "hardware.cluster:x.available-cpu-dram-mib: must be > 0, got 0" in text
