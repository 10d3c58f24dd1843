"""Fixtures every test area may use. Area fixtures live in tests/<area>/conftest.py;
fixtures shared across areas live in tests/fixtures/<name>.py (importable as `fixtures.<name>`)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Real data the tests need, committed with its attribution (tests/data/README.md), so that a
# fresh clone runs the suite with nothing beside it.
DATA = REPO / "tests" / "data"
INFERENCEX = DATA / "inferencex"
TRACES = DATA / "traces"
FAST_SSE_SERVER = DATA / "bench" / "fast_sse_server.py"
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="session", autouse=True)
def _recipe_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The recipe parse cache (recipe/cache.py) lives in a temporary folder, never in the
    user's ~/.cache."""
    import os

    os.environ["KVBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("recipe-cache"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The committed copy of the real data (the fixture keeps its historical name)."""
    return DATA


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests leave files worth keeping (screenshots, dashboards)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# ---- the suite in parallel (pytest-xdist: the README's `-n 4`) ------------------------------
# Which tests share a worker (`--dist loadgroup`): a module whose tests share a module-scoped
# fixture (a server, a parse of every real row, a fuzz tally) or a real Slurm cluster (a
# session fixture, tests/fixtures/slurm.py) stays on one worker, so the fixture is built once
# per module at most. Modules with a slow test go first, so that the longest work starts early
# and no worker is left with it at the end.
SLURM_FIXTURES = ("slurm_cluster", "slurm_cluster_2n")


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(name in SLURM_FIXTURES or d.scope in ("module", "class", "package")
               for name, defs in info.name2fixturedefs.items() for d in defs)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shared = {item.path for item in items if _shares_a_fixture(item)}
    for item in items:
        if item.path in shared and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(str(item.path.relative_to(REPO))))
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: each module keeps its order


@pytest.fixture(autouse=True)
def _alone(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[None]:
    """A readers-writer lock over the run's workers (flock on two files in the run's shared
    temporary folder): every test holds the lock shared, an `alone` test exclusively. The
    gate, taken exclusively by a waiting `alone` test, lets no new test start, so the test
    waits only for those already running."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    root = tmp_path_factory.getbasetemp().parent  # <run>/popen-gwN -> <run>, shared
    alone = request.node.get_closest_marker("alone") is not None
    with open(root / "alone.gate", "a") as gate, open(root / "alone.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
