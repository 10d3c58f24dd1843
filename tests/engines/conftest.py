"""All real single-node agentic rows of the InferenceX snapshot, as jobs."""

from __future__ import annotations

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.matrix import Job, Selection, select_jobs


@pytest.fixture(scope="session")
def real_single_node_jobs() -> list[Job]:
    selection = Selection(config_files=CONFIGS, runner_config=RUNNERS, single_node=True)
    return select_jobs(selection)
