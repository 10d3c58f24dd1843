"""The one exception root. Library code raises these; only the CLI formats them."""

from __future__ import annotations

import reprlib


def shown(value: object, limit: int = 60) -> str:
    """A value as an error message quotes it: a repr cut to `limit` characters and a few levels
    and items (reprlib), so that a huge value (a 400 MB string, an expanded YAML alias bomb)
    never floods the terminal or takes long to format; an integer too long for `str` is
    described, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong = 3, limit, limit, limit
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 6
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_message(e: Exception, where: object) -> str:
    """A pydantic ValidationError as one line: `where: field.path: problem (got value)` for
    its first error, and how many more there are (never pydantic's multi-line text)."""
    errors = e.errors() if hasattr(e, "errors") else []
    if not errors:
        return f"{where}: {' '.join(str(e).split())[:300]}"
    first = errors[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
    msg = first.get("msg", "invalid").removeprefix("Value error, ")
    got = f" (got {shown(first['input'])})" if "input" in first and not isinstance(
        first["input"], dict) else ""
    more = f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(
        errors) > 1 else ""
    return f"{where}: {loc}: {msg}{got}{more}"


class KvbenchError(Exception):
    """Root of every error kvbench raises on purpose. `hint` says what to do about it."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class RecipeError(KvbenchError):
    """A recipe, runner file or other user-written YAML is invalid."""

    def __init__(self, message: str, *, errors: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.errors = errors or [message]


class MatrixError(KvbenchError):
    """The selection or expansion of recipe rows into jobs failed."""


class ModelError(KvbenchError):
    """A model profile is missing or malformed."""


class PlanError(KvbenchError):
    """A job cannot be planned (for example its host footprint exceeds the budget)."""


class EngineError(KvbenchError):
    """An engine adapter cannot build a command line for a job."""


class LaunchError(KvbenchError):
    """A server process failed to start, became unhealthy or could not be stopped."""

    exit_code = 3


class WorkloadError(KvbenchError):
    """A trace file or synthetic workload specification is invalid."""


class PatchError(KvbenchError):
    """An engine-image patch cannot be applied: its file or anchor is not where the recipe
    says (the engine's source moved). Bad input, so exit 2, not a launch failure."""


class ReplayError(KvbenchError):
    """The replay client could not run (not a per-request failure: those are records)."""

    exit_code = 3


class ReplayInterrupted(ReplayError):
    """Ctrl-C ended a replay; what finished was summarised (the message says where)."""

    exit_code = 130


class ReplayOptionError(ReplayError):
    """A replay option contradicts what the server says about itself (bad input: exit 2)."""

    exit_code = 2


class OutputError(KvbenchError):
    """A user-given output path cannot be written as asked (a directory, a block device, a
    FIFO nobody reads, a full device)."""


class MetricsError(KvbenchError):
    """Server metrics or telemetry could not be read or interpreted."""


class ResultError(KvbenchError):
    """A result file is missing, malformed or fails validation."""


class SweepError(KvbenchError):
    """A sweep or one of its executors failed."""

    exit_code = 3


class SweepOptionError(SweepError):
    """A `kvbench run` option that cannot mean anything (bad input: exit 2)."""

    exit_code = 2


class ChangelogError(KvbenchError):
    """The perf changelog violates its rules."""


class SimError(KvbenchError):
    """The embedded engine was configured wrongly."""


class CalibrateError(KvbenchError):
    """Hardware calibration could not run."""


class CapacityError(KvbenchError):
    """A capacity search was asked something it cannot answer (bad SLO, bad host grid)."""
