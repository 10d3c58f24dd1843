"""select_jobs, Job and the selection errors, on the small fixture recipe."""

from __future__ import annotations

import pytest
from fixtures.recipes import MULTI, SINGLE, write_recipe

from kvbench.errors import MatrixError
from kvbench.matrix import Job, Selection, runner_config_path, select_jobs


@pytest.fixture
def recipe(tmp_path):
    return write_recipe(tmp_path)


def _select(recipe, **kw):
    return select_jobs(Selection(config_files=(recipe,), **kw))


def test_jobs_carry_key_row_and_scenario(recipe):
    jobs = _select(recipe, scenario_types=("agentic-coding", "fixed-seq-len"), no_evals=True)
    by_key = {j.config_key for j in jobs}
    assert by_key == {SINGLE, MULTI}
    single = [j for j in jobs if j.config_key == SINGLE and j.scenario == "agentic-coding"]
    assert [j.conc for j in single] == [1, 4, 8, 4, 8, 16, 32, 48]
    dram = single[-1]
    assert (dram.exp_name, dram.framework, dram.model, dram.runner, dram.is_multinode) == (
        "qwen3.5_tp2_conc48_kvdram-hicache_spec-mtp", "sglang", "Qwen/Qwen3.5-397B-A17B-FP8",
        "cluster:b300-nv", False)
    assert (dram.offload_backend, dram.total_cpu_dram_gb, dram.gpus) == ("hicache", 599, 2)
    multi = [j for j in jobs if j.config_key == MULTI]
    assert [j.conc for j in multi] == [16, 32]
    assert multi[0].is_multinode and multi[0].gpus == 12
    assert multi[0].total_cpu_dram_gb == 450  # prefill TP4 of a 4-GPU gb200 node at 0.5
    fixed = [j for j in jobs if j.scenario == "fixed-seq-len"]
    assert [j.conc for j in fixed] == [4, 8, 16, 32, 64]
    assert fixed[0].row["max-model-len"] == 8192 + 1024 + 256


def test_job_is_frozen_and_hashable(recipe):
    job = _select(recipe)[0]
    assert isinstance(job, Job)
    with pytest.raises(AttributeError):
        job.scenario = "x"  # type: ignore[misc]
    assert len({job, _select(recipe)[0]}) == 1


def test_runner_config_defaults_to_the_file_beside_the_recipe(recipe, tmp_path):
    assert runner_config_path(Selection(config_files=(recipe,))) == tmp_path / "runners.yaml"
    (tmp_path / "runners.yaml").unlink()
    with pytest.raises(MatrixError, match=r"no runners\.yaml beside"):
        runner_config_path(Selection(config_files=(recipe,)))


def test_config_key_globs(recipe):
    jobs = _select(recipe, config_keys=("dsv4-*",))
    assert {j.config_key for j in jobs} == {MULTI}
    with pytest.raises(MatrixError, match="matches no config key") as info:
        _select(recipe, config_keys=("nope-*",))
    assert SINGLE in info.value.hint


@pytest.mark.parametrize("kw,message", [
    ({"step_size": 1}, "--step-size must be greater than 1"),
    ({"min_conc": 8, "max_conc": 4}, "--min-conc \\(8\\) must be <= --max-conc \\(4\\)"),
    ({"runner_types": ("cluster:nope",)}, "unknown --runner-type"),
    ({"scenario_types": ("agentic",)}, "allowed: fixed-seq-len, agentic-coding"),
    ({"seq_lens": ("2k1k",)}, "allowed: 1k1k, 8k1k"),
    ({"no_evals": True, "all_evals": True}, "cannot be combined"),
])
def test_selection_errors(recipe, kw, message):
    with pytest.raises(MatrixError, match=message):
        _select(recipe, **kw)


def test_single_and_multi_node_filters(recipe):
    assert {j.is_multinode for j in _select(recipe, single_node=True)} == {False}
    assert {j.is_multinode for j in _select(recipe, multi_node=True)} == {True}


def test_missing_hardware_names_the_row(tmp_path):
    runners = {"labels": {"cluster:b300-nv": ["n"], "cluster:gb200-nv": ["m"]}, "hardware": {}}
    path = write_recipe(tmp_path, runners=runners)
    with pytest.raises(MatrixError, match=f"{SINGLE}.agentic-coding\\[0\\].search-space\\[2\\]"):
        select_jobs(Selection(config_files=(path,)))
