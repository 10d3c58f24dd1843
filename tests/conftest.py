"""Fixtures every test area may use. Area fixtures live in tests/<area>/conftest.py;
fixtures shared across areas live in tests/fixtures/<name>.py (importable as `fixtures.<name>`)."""

from __future__ import annotations

import signal
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

# A suite started from a background job (`pytest ... &` in a non-interactive shell) inherits
# SIGINT ignored (POSIX), and so would every kvbench it starts: Python then installs no
# KeyboardInterrupt handler and the Ctrl-C tests wait in vain (issue 39). The suite takes
# SIGINT back, so the processes it starts begin with the default disposition, either way.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _recipe_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The recipe parse cache (recipe/cache.py) lives in a temporary folder, never in the
    user's ~/.cache."""
    import os

    os.environ["KVBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("recipe-cache"))


@pytest.fixture(autouse=True)
def _forget_secrets():
    """Secrets redaction remembers (kvbench/redaction.py remember_secret) last for a process,
    as one command's do; each test is a command of its own, so one test's planted secrets
    never redact another's text."""
    yield
    from kvbench import redaction

    redaction._forget_all()


@pytest.fixture(autouse=True)
def _fresh_urlopen():
    """urllib.request builds its global opener on the first urlopen of a process and keeps
    the proxies the environment had then (CPython 3.11 urllib/request.py `urlopen`,
    `ProxyHandler.__init__` -> getproxies()). A test that opens a URL while it sets
    http_proxy (tests/launch/conftest.py points it at a dead port) left every later test of
    its xdist worker going through that proxy: servers that answered looked dead. Dropped
    after each test, so the next builds one from the environment it runs in."""
    yield
    import urllib.request

    urllib.request.install_opener(None)


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
# Which tests share a worker (`--dist loadgroup`, in the order collected: addopts has
# --no-loadscope-reorder): a module whose tests share a module-scoped fixture (a server, a
# parse of every real row, a fuzz tally) or a real Slurm cluster (a session fixture,
# tests/fixtures/slurm.py) stays on one worker, so the fixture is built once per module at
# most. The modules with a slow test go first, so that the longest work starts early and no
# worker is left with it at the end. No test needs the machine to itself: none asserts on its
# load, pace or speed (those are measurements, in benchmarks/).
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
        if item.get_closest_marker("xdist_group") is None and item.path in shared:
            item.add_marker(pytest.mark.xdist_group(str(item.path.relative_to(REPO))))
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: each module keeps its order
