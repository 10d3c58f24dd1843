"""`changelog jobs`: the rows of the keys the new entries name, via the real generator."""

from __future__ import annotations

import json

import pytest
from changelog.conftest import MASTERS, NEW_ENTRY, append, path_of
from changelog.test_cli import kvbench
from conftest import INFERENCEX

from kvbench.changelog import check_change, expand_keys, known_config_keys
from kvbench.changelog.jobs import rows_for_change
from kvbench.matrix import Selection, generate_rows

RUNNERS = INFERENCEX / "runners.yaml"


def rows_of(keys: tuple[str, ...], scenarios=("agentic-coding",)) -> list[dict]:
    return generate_rows(Selection(config_files=tuple(MASTERS), runner_config=RUNNERS,
                                   scenario_types=scenarios, config_keys=keys, no_evals=True))


@pytest.mark.slow
def test_rows_of_the_real_last_two_entries(base_raw, real_raw, known_keys):
    report = check_change(base_raw, real_raw, known_keys)
    rows = rows_for_change(report, MASTERS, RUNNERS)
    want = rows_of(("minimaxm3-fp4-b300-trtllm-agentic-mtp",)) + rows_of(
        ("dsv4-fp4-b200-vllm-agentic-mtp",))
    assert rows == want
    assert len([r for r in rows if r["model-prefix"] == "minimaxm3"]) == 11  # reference count
    trimmed = rows_for_change(report, MASTERS, RUNNERS, trim_conc=True)
    assert len(trimmed) < len(rows)
    assert all(r["conc"] == min(o["conc"] for o in rows if
                                {k: v for k, v in o.items() if k not in ("conc", "exp-name")} ==
                                {k: v for k, v in r.items() if k not in ("conc", "exp-name")})
               for r in trimmed)


@pytest.mark.slow
def test_jobs_cli_with_glob_entry(tmp_path, real_raw):
    entry = NEW_ENTRY.replace("dsv4-fp4-b200-vllm-agentic-mtp", "dsv4-fp4-*-agentic*")
    base = path_of(tmp_path, "old.yaml", real_raw)
    head = path_of(tmp_path, "new.yaml", append(real_raw, entry))
    out = kvbench("changelog", "jobs", "--base-file", str(base), "--head-file", str(head),
                  "--config-files", str(MASTERS[0]), "--config-files", str(MASTERS[1]),
                  "--runner-config", str(RUNNERS))
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    keys = expand_keys(["dsv4-fp4-*-agentic*"], known_config_keys(MASTERS))
    assert len(keys) >= 2, keys
    assert rows == rows_of(tuple(keys))
    assert {r["framework"] for r in rows} >= {"vllm"}
