"""The records of the tiered cache: a tree node (a run of pages) and what an admission did."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass


class Node:
    """A run of pages. A plain slotted class: tens of thousands are made per simulated hour."""

    __slots__ = ("children", "device", "host", "keys", "lock", "page", "parent", "ready_s",
                 "tokens")

    def __init__(self, keys: list, page: int, parent: Node | None) -> None:
        self.keys = keys
        self.page = page
        self.tokens = len(keys) * page
        self.parent = parent
        self.children: dict[Hashable, Node] | None = None  # created with the first child
        self.device = True
        self.host = False
        self.lock = 0
        self.ready_s = 0.0  # when its host copy is complete (asynchronous backups)


def common_prefix(a: list, b: Sequence, start: int) -> int:
    """Number of leading entries of `a` equal to b[start:]."""
    n = min(len(a), len(b) - start)
    i = 0
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


@dataclass(slots=True)
class Admission:
    """What admitting one request did to the cache (returned by `TieredCache.admit`)."""

    node: Node  # the deepest node of the request's path
    device_hit_tokens: int
    host_hit_tokens: int
    new_tokens: int
    private_tokens: int
    sync_backup_tokens: int  # write-back copies on the critical path of this admission


@dataclass(slots=True)
class CacheCounters:
    backup_tokens: int = 0  # asynchronous write-through copies device -> host
    sync_backup_tokens: int = 0  # write-back copies made while evicting
    load_tokens: int = 0  # host -> device load-backs
    device_evicted_tokens: int = 0
    host_evicted_tokens: int = 0
    dropped_tokens: int = 0  # evicted from device with no host copy
    backup_failed_tokens: int = 0  # host full of pinned copies: backup skipped
    backup_late_tokens: int = 0  # evicted from device before its backup reached the host
