"""Fixtures every test area may use. Area fixtures live in tests/<area>/conftest.py;
fixtures shared across areas live in tests/fixtures/<name>.py (importable as `fixtures.<name>`)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATA = SHARED / "data"
INFERENCEX = DATA / "inferencex"
TRACES = DATA / "traces"
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not DATA.is_dir():
        pytest.fail(f"shared data not found at {DATA}: tests need ../shared beside the repo")
    return DATA


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests leave files worth keeping (screenshots, dashboards)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
