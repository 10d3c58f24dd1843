"""The clock handshake: a server whose clock runs faster than wall time (the embedded engine's
--time-scale) says so in a response header; replay reads it before the first turn and reports
every timing in the server's clock. A --time-scale that contradicts the server is refused: a
TPOT in compressed wall time would look 20x better than the engine it describes.

A server whose clock is virtual (`serve-sim --clock virtual`, sim/lockstep.py) says so in
another header: its clock waits for the client's lanes, and replay records the times the
server stamps on each event instead of its own."""

from __future__ import annotations

import math

from kvbench.bounds import TIME_SCALE
from kvbench.errors import ReplayError, ReplayOptionError
from kvbench.replay.http import DIRECT

# sim/server.py sends the same name (a test ties the two)
TIME_SCALE_HEADER = "X-Kvbench-Time-Scale"
# sim/lockstep.py sends the same name and value (a test ties the two)
CLOCK_HEADER = "X-Kvbench-Clock"
VIRTUAL = "virtual"
PROBE_TIMEOUT_S = 10.0


def advertised_clock(base_url: str) -> tuple[float | None, bool]:
    """(the scale the server at `base_url` advertises on GET /v1/models or None, whether its
    clock is virtual). None and False for a real engine, an older serve-sim, or no answer
    (the run itself will say what is wrong)."""
    base = base_url.rstrip("/").removesuffix("/v1")
    try:
        with DIRECT.open(f"{base}/v1/models", timeout=PROBE_TIMEOUT_S) as r:
            raw, clock = r.headers.get(TIME_SCALE_HEADER), r.headers.get(CLOCK_HEADER)
    except Exception:  # no answer here is not this module's failure to report
        return None, False
    if clock == VIRTUAL:
        return None, True
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None, False
    ok = value is not None and math.isfinite(value) and value > 0
    return (value if ok else None), False


def resolve_time_scale(given: float | None, advertised: float | None,
                       virtual: bool = False) -> tuple[float, str]:
    """(scale, source): the server's when it advertises one, else the user's, else 1. A
    virtual clock stamps its own times: the scale is 1 (they are the server's already). An
    advertised scale outside bounds.TIME_SCALE makes the server unusable: a clock of 1e-300
    turns every think time into a sleep no lane wakes from."""
    if virtual:
        if given is not None and given != 1.0:
            raise ReplayOptionError(
                f"--time-scale {given:g} contradicts the server, whose clock is virtual "
                f"({CLOCK_HEADER}: {VIRTUAL}): it stamps every event with its own time",
                hint="drop --time-scale: replay records the server's times by itself")
        return 1.0, "server"
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


def virtual_config(cfg, virtual: bool):
    """`cfg` (a ReplayConfig) for the server's clock: with a virtual one, the lanes it waits
    for (the run's, kept when a shard's config already names them); refused where the run
    needs a wall clock."""
    if not virtual or cfg.virtual_lanes is not None:
        return cfg
    if cfg.session_rate is not None:
        raise ReplayOptionError(
            "--session-rate against a virtual-clock server: an open loop's arrivals follow "
            "wall time, and a virtual clock follows closed-loop lanes",
            hint="a closed loop (--concurrency), or serve-sim --clock wall (kvbench run: "
                 "--time-scale N)")
    wall_only = {"--system-idle-cap": cfg.system_idle_cap_s is not None,
                 "--tree-idle-cap": cfg.tree_idle_cap_s is not None,
                 "--start sampled": cfg.start == "sampled",
                 "--warmup-per-lane": bool(cfg.warmup_per_lane)}
    given = [flag for flag, on in wall_only.items() if on]
    if given:
        raise ReplayOptionError(
            f"{', '.join(given)} against a virtual-clock server: idle caps shift think times "
            "the client sleeps and the harness's warm-up phase runs on wall time, while a "
            "virtual clock's times are the server's (sim/lockstep.py)",
            hint="leave them out, or serve-sim --clock wall (kvbench run: --time-scale N)")
    return cfg.model_copy(update={"virtual_lanes": cfg.concurrency})
