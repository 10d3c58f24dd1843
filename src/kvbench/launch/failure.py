"""The error a server start-up failure raises: what it was, and the evidence."""

from __future__ import annotations

from pathlib import Path

from kvbench.errors import LaunchError
from kvbench.launch.signatures import Match


class ServerStartError(LaunchError):
    """The server died or never became ready. Carries what is needed to explain it."""

    def __init__(self, message: str, *, hint: str | None, signature: Match | None,
                 log_tail: list[str], returncode: int | None, log_path: Path) -> None:
        super().__init__(message, hint=hint)
        self.signature = signature
        self.log_tail = log_tail
        self.returncode = returncode
        self.log_path = log_path

    def to_json(self) -> dict:
        return {
            "message": self.message.splitlines()[0],
            "signature": self.signature.name if self.signature else None,
            "signature-line": self.signature.line if self.signature else None,
            "returncode": self.returncode,
            "log-tail": self.log_tail,
            "log": str(self.log_path),
        }
