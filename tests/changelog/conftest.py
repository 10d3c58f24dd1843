from __future__ import annotations

from pathlib import Path

import pytest
from conftest import INFERENCEX

from kvbench.changelog import known_config_keys, parse_changelog

CHANGELOG = INFERENCEX / "perf-changelog.yaml"
MASTERS = [INFERENCEX / "amd-master.yaml", INFERENCEX / "nvidia-master.yaml"]


def split_at(raw: bytes, n_entries: int) -> bytes:
    """The file as it was with only its first `n_entries` entries (no trailing separator)."""
    parsed = parse_changelog(raw)
    lines = raw.split(b"\n")
    keep = lines[: parsed.start_lines[n_entries] - 1]
    while keep and not keep[-1].strip():
        keep.pop()
    return b"\n".join(keep) + b"\n"


@pytest.fixture(scope="session")
def real_raw() -> bytes:
    return CHANGELOG.read_bytes()


@pytest.fixture(scope="session")
def known_keys() -> set[str]:
    return known_config_keys(MASTERS)


@pytest.fixture(scope="session")
def base_raw(real_raw: bytes) -> bytes:
    """The real file minus its last two entries (clean appends naming existing keys)."""
    return split_at(real_raw, len(parse_changelog(real_raw).entries) - 2)


NEW_ENTRY = (
    "- config-keys:\n"
    "    - dsv4-fp4-b200-vllm-agentic-mtp\n"
    "  scenario-type:\n"
    "    - agentic-coding\n"
    "  description:\n"
    "    - \"Raise the TP8 concurrency list.\"\n"
    "  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2800\n"
)


def append(base: bytes, entry: str = NEW_ENTRY, sep: str = "\n") -> bytes:
    return base + sep.encode() + entry.encode()


def path_of(tmp_path: Path, name: str, raw: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(raw)
    return p
