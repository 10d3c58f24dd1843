"""`changelog jobs`: the job document CI's workflow reads, its pieces on small inputs, and the
CLI on the real configs (the byte-for-byte comparison with InferenceX: test_ci_gate.py)."""

from __future__ import annotations

import json

import pytest
import yaml
from changelog.conftest import MASTERS, NEW_ENTRY, append, path_of
from changelog.test_cli import kvbench
from conftest import INFERENCEX

from kvbench.changelog import JobFlags, Revision, gate
from kvbench.changelog.diff import added_between_files
from kvbench.changelog.jobs import trim_conc
from kvbench.errors import ChangelogError
from kvbench.matrix import Selection, generate_rows
from kvbench.matrix.fingerprint import recipe_fingerprint

RUNNERS = INFERENCEX / "runners.yaml"


def test_trim_conc_keeps_each_single_node_curve_lowest_and_every_multi_node_row():
    single = [{"tp": 8, "conc": c, "exp-name": f"x_conc{c}"} for c in (16, 4, 8)]
    other = {"tp": 4, "conc": 32, "exp-name": "x_conc32"}
    multi = [{"prefill": {"tp": 8}, "conc": [64, 8, 16]}, {"prefill": {"tp": 4}, "conc": [2]}]
    out = trim_conc([*single, other, *multi])
    assert out == [single[1], other, {"prefill": {"tp": 8}, "conc": [8]}, multi[1]]


def test_fingerprint_ignores_the_point_fields_only():
    row = {"model": "m", "tp": 8, "conc": 4, "exp-name": "a"}
    assert recipe_fingerprint(row) == recipe_fingerprint({**row, "conc": 64, "exp-name": "b"})
    assert recipe_fingerprint(row) != recipe_fingerprint({**row, "tp": 4})
    assert len(recipe_fingerprint(row)) == 64


@pytest.mark.slow
def test_jobs_cli_with_glob_entry(tmp_path, real_raw):
    entry = NEW_ENTRY.replace("dsv4-fp4-b200-vllm-agentic-mtp", "dsv4-fp4-*-agentic*")
    base = path_of(tmp_path, "old.yaml", real_raw)
    head = path_of(tmp_path, "new.yaml", append(real_raw, entry))
    out = kvbench("changelog", "jobs", "--base-file", str(base), "--head-file", str(head),
                  "--config-files", str(MASTERS[0]), "--config-files", str(MASTERS[1]),
                  "--runner-config", str(RUNNERS))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = generate_rows(Selection(config_files=tuple(MASTERS), runner_config=RUNNERS,
                                   config_keys=("dsv4-fp4-*-agentic*",), no_evals=True))
    agentic = doc["single_node"]["agentic"] + doc["multi_node"]["agentic"]
    assert len(agentic) == len(rows) > 2
    assert {r["exp-name"] for r in agentic} == {r["exp-name"] for r in rows}
    assert doc["changelog_metadata"]["head_ref"] == str(head)
    assert doc["changelog_metadata"]["entries"][0]["config-keys"] == ["dsv4-fp4-*-agentic*"]


def test_a_kvbench_extension_cannot_reach_ci(tmp_path, real_raw):
    """A row CI's workflow would refuse (here a kvbench-only `size-gb-per-rank`) is refused
    with one line naming the field, not handed on."""
    key = "dsv4-fp4-b200-vllm-agentic-mtp"
    master = yaml.safe_load(MASTERS[1].read_text())[key]
    for row in master["scenarios"]["agentic-coding"][0]["search-space"]:
        row["kv-offload-backend"]["size-gb-per-rank"] = 100.0
    configs = tmp_path / "nvidia-master.yaml"
    configs.write_text(yaml.safe_dump({key: master}, sort_keys=False))
    base = path_of(tmp_path, "old.yaml", real_raw)
    head = path_of(tmp_path, "new.yaml", append(real_raw))
    with pytest.raises(ChangelogError, match="size-gb-per-rank") as refused:
        gate(head.read_bytes(), added_between_files(base, head),
             Revision((configs,), RUNNERS), None, base_ref="a", head_ref="b",
             flags=JobFlags())
    assert "cannot go to InferenceX's CI" in (refused.value.hint or "")
