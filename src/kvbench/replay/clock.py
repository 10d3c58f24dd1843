"""The clock handshake: a server whose clock runs faster than wall time (the embedded engine's
--time-scale) says so in a response header; replay reads it before the first turn and reports
every timing in the server's clock. A --time-scale that contradicts the server is refused: a
TPOT in compressed wall time would look 20x better than the engine it describes."""

from __future__ import annotations

import math
import urllib.request

from kvbench.bounds import TIME_SCALE
from kvbench.errors import ReplayError, ReplayOptionError

# sim/server.py sends the same name (a test ties the two)
TIME_SCALE_HEADER = "X-Kvbench-Time-Scale"
PROBE_TIMEOUT_S = 10.0


def advertised_time_scale(base_url: str) -> float | None:
    """The scale the server at `base_url` advertises on GET /v1/models, or None (a real
    engine, an older serve-sim, or no answer: the run itself will say what is wrong)."""
    base = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{base}/v1/models", timeout=PROBE_TIMEOUT_S) as r:
            raw = r.headers.get(TIME_SCALE_HEADER)
    except Exception:  # no answer here is not this module's failure to report
        return None
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def resolve_time_scale(given: float | None, advertised: float | None) -> tuple[float, str]:
    """(scale, source): the server's when it advertises one, else the user's, else 1. An
    advertised scale outside bounds.TIME_SCALE makes the server unusable: a clock of 1e-300
    turns every think time into a sleep no lane wakes from."""
    if advertised is not None:
        TIME_SCALE.check(advertised, f"the server's clock ({TIME_SCALE_HEADER})", ReplayError)
        if given is not None and not math.isclose(given, advertised, rel_tol=1e-6):
            raise ReplayOptionError(
                f"--time-scale {given:g} contradicts the server, whose clock runs "
                f"{advertised:g}x wall time ({TIME_SCALE_HEADER})",
                hint="drop --time-scale: replay reports in the server's clock by itself")
        return advertised, "server"
    if given is not None:
        return given, "option"
    return 1.0, "default"
