from __future__ import annotations

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS


@pytest.fixture(scope="session")
def real_files(shared_data):
    return CONFIGS, RUNNERS
