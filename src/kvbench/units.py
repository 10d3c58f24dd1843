"""Unit constants and conversions. Values carry their unit in their name (`_bytes`, `_ns`)."""

from __future__ import annotations

import re

from kvbench.errors import KvbenchError

KB = 1_000
MB = 1_000_000
GB = 1_000_000_000
TB = 1_000_000_000_000
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

# The most concurrent session lanes any command accepts (recipe conc-list, replay and simulate
# --concurrency): 4x the largest concurrency in the real master configs (16,384), so that a
# typo like 2**63-1 is an error at once instead of a replay creating lanes forever.
MAX_SESSION_LANES = 65_536
# replay worker processes: more than the cores of any one client host is a typo
MAX_REPLAY_WORKERS = 256

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": KB, "mb": MB, "gb": GB, "tb": TB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size_bytes(text: str | int | float) -> int:
    """Parse '64GiB', '2.5 GB', '1000' (bytes) into bytes. GB is decimal, GiB binary."""
    if isinstance(text, int | float):
        return int(text)
    m = _SIZE_RE.match(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _SIZE_UNITS:
        raise KvbenchError(
            f"cannot parse size {text!r}",
            hint=f"use a number with one of the units {', '.join(u for u in _SIZE_UNITS if u)}",
        )
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def bytes_to_gb(n_bytes: float) -> float:
    return n_bytes / GB


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / GiB


def ns_to_ms(n_ns: float) -> float:
    return n_ns / NS_PER_MS


def ns_to_s(n_ns: float) -> float:
    return n_ns / NS_PER_S
