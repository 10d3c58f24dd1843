"""Property: whatever a random edit does to a valid recipe, loading it and expanding it raise
nothing but kvbench's own errors (never a traceback from inside the schema or generator)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from fixtures.recipes import valid_recipe, write_recipe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.errors import KvbenchError, RecipeError
from kvbench.matrix import Selection, generate_rows
from kvbench.recipe import load_master_configs

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.floats(-2, 2, allow_nan=False),
    st.sampled_from(["", "dram", "none", "mtp", "hicache", "cluster:b300-nv", "image:x",
                     "tp", "conc-list", "A=B"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["tp", "name", "x", "conc-list"]),
                                            inner, max_size=3)),
    max_leaves=6,
)
keys = st.sampled_from(["tp", "ep", "pp", "dcp-size", "kv-offloading", "kv-offload-backend",
                        "router", "prefill", "decode", "conc-list", "conc-start", "conc-end",
                        "dram-utilization", "num-worker", "multinode", "disagg", "name",
                        "version", "hardware", "kv-p2p-transfer", "bogus"])


def _containers(node, out):
    if isinstance(node, dict | list):
        out.append(node)
        for child in (node.values() if isinstance(node, dict) else node):
            _containers(child, out)
    return out


@st.composite
def mutated(draw):
    data = valid_recipe()
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(_containers(data, [])))
        action = draw(st.sampled_from(["set", "delete", "add"]))
        if isinstance(target, list):
            if not target:
                target.append(draw(values))
            elif action == "delete":
                target.pop(draw(st.integers(0, len(target) - 1)))
            else:
                target[draw(st.integers(0, len(target) - 1))] = draw(values)
        elif action == "add" or not target:
            target[draw(keys)] = draw(values)
        else:
            key = draw(st.sampled_from(sorted(target, key=str)))
            if action == "delete":
                del target[key]
            else:
                target[key] = draw(values)
    return data


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_random_mutations_raise_only_recipe_errors(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_recipe(Path(tmp), data)
        try:
            entries = load_master_configs([path])
        except RecipeError as e:
            assert e.errors and all(isinstance(line, str) and line for line in e.errors)
            return
        assert set(entries) <= set(data)
        try:
            rows = generate_rows(Selection(config_files=(path,),
                                           scenario_types=("agentic-coding", "fixed-seq-len")))
        except KvbenchError as e:
            assert e.message
            return
        assert all(row["exp-name"] and row["conc"] for row in rows)


def test_unmutated_recipe_loads(tmp_path):
    path = write_recipe(tmp_path)
    assert list(load_master_configs([path])) == list(yaml.safe_load(path.read_text()))
