"""Secrets never reach a file: the launch records use the one redaction (kvbench.redaction),
by name and by value, before `env.json` and `command.json` are written or a dry run is
printed."""

from __future__ import annotations

from kvbench.redaction import (
    REDACTED,
    is_secret_name,
    is_secret_value,
    redact_argv,
    redact_env,
    redact_text,
)

__all__ = ["REDACTED", "is_secret_name", "is_secret_value", "redact_argv", "redact_env",
           "redact_text"]
