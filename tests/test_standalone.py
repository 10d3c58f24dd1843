"""The suite stands alone: no test reaches outside the repository for data (a fresh clone has
nothing beside it; the data lives in tests/data with its attribution)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
OUTSIDE = re.compile(r"""\.parent\s*/\s*["']shared["']|["']\.\./shared""")


def test_no_test_reads_beside_the_repository():
    offenders = [f"{p.relative_to(TESTS)}:{n}" for p in TESTS.rglob("*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if OUTSIDE.search(line) and p.name != "test_standalone.py"]
    assert offenders == []


def test_the_committed_data_is_attributed():
    readme = (TESTS / "data" / "README.md").read_text()
    for path in sorted((TESTS / "data").rglob("*")):
        if any((d / "ATTRIBUTION.md").is_file() for d in path.parents
               if d.is_relative_to(TESTS / "data")):
            continue  # a directory with its own attribution file
        if path.is_file() and path.name != "README.md":
            top = path.relative_to(TESTS / "data").parts
            named = path.name if top[0] == "inferencex" else "/".join(top[:-1])
            assert named in readme or path.name in readme, path


def test_ci_runs_the_readmes_test_command():
    """.ci/run runs the README's test command verbatim (its line after the install)."""
    repo = TESTS.parent
    readme = (repo / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("bash .ci/install"))
    assert command in (repo / ".ci" / "run").read_text().splitlines()
