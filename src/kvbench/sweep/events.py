"""What a running job reports to whoever displays the sweep (see progress.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

PHASES = ("plan", "launch", "ready", "replay", "stop", "result")


@dataclass(slots=True)
class JobOutcome:
    """How one job ended: ok, failed (with the phase and reason) or skipped (resumed)."""

    dir_name: str
    status: str  # ok | failed | skipped
    phase: str | None = None
    reason: str | None = None
    elapsed_s: float = 0.0
    result_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"job": self.dir_name, "status": self.status, "phase": self.phase,
                "reason": self.reason, "elapsed-s": round(self.elapsed_s, 3),
                "result": self.result_path}


class JobEvents(Protocol):
    def phase(self, name: str) -> None: ...

    def replay_progress(self, counters: Any, elapsed_s: float) -> None: ...


class NullEvents:
    def phase(self, name: str) -> None:
        pass

    def replay_progress(self, counters: Any, elapsed_s: float) -> None:
        pass
