"""What every row of one config key shares: identity fields, runners, component metadata."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EntryContext:
    key: str
    raw: dict[str, Any]
    runners: tuple[str, ...]  # runner values to emit rows for (label, or filtered nodes)

    @property
    def is_multinode(self) -> bool:
        return bool(self.raw.get("multinode", False))

    @property
    def disagg(self) -> bool:
        return bool(self.raw.get("disagg", False))

    def head(self, runner: str) -> dict[str, Any]:
        """The leading keys of every row, in the reference's order."""
        raw = self.raw
        return {
            "image": raw["image"],
            "model": raw["model"],
            "model-prefix": raw["model-prefix"],
            "precision": raw["precision"],
            "framework": raw["framework"],
            "runner": runner,
        }

    def components(self, row: dict[str, Any]) -> dict[str, Any]:
        """router / kv-p2p-transfer from the row, else from the top level (never both)."""
        out = {}
        for field in ("router", "kv-p2p-transfer"):
            value = row.get(field, self.raw.get(field))
            if value is not None:
                out[field] = copy.deepcopy(value)
        return out


def with_worker_defaults(worker: dict[str, Any]) -> dict[str, Any]:
    """A worker copy with pp / dcp-size / pcp-size made explicit (kept in place if written)."""
    return {
        **copy.deepcopy(worker),
        "pp": worker.get("pp", 1),
        "dcp-size": worker.get("dcp-size", 1),
        "pcp-size": worker.get("pcp-size", 1),
    }
