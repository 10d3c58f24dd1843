"""The quickstart's pace: the embedded engine's time scale this machine's client sustains.

At 50x the engine sends a second of its tokens every 20 ms of wall time; on two busy cores the
client fell behind (17 of 18 quickstart runs flagged client-saturated, issue 27 item 10). A
probe job (the heaviest point of the sweep, a few requests, at the default scale) measures the
client's loop lag, send lateness and CPU against the saturation limits (replay/health.py).
The client's work per wall second grows with the scale, so the scale is lowered in proportion
to how close the probe came to a limit, but never below what keeps the sweep within its time
budget; the choice and its reason are printed and kept in the results directory, so a resumed
quickstart runs at the same scale (the scale is part of every job's fingerprint)."""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from kvbench.files import read_json, write_json_atomic
from kvbench.replay.health import CPU_LIMIT, LAG_MS_LIMIT, LATENESS_MS_LIMIT

PACE_FILE = "pace.json"  # in results/.kvbench: the scale chosen by the first run
PROBE_REQUESTS = 24  # three turns per lane at conc 8: past the first turns' cold prefill
WARM_UP_REQUESTS = 4  # a short run before the probe, which pays the process's first imports
# the probe's pressure (its figure / the limit, the worst of the three) the chosen scale
# aims at: repeats vary, and a run at the limit is flagged half the time
TARGET_PRESSURE = 0.5
MIN_TIME_SCALE = 10.0
STEP = 5.0  # scales are chosen in steps of 5x: 50, 45, ... (a readable, repeatable choice)


@dataclass(frozen=True, slots=True)
class Pace:
    time_scale: float
    reason: str
    probe: dict  # the probe job's client figures, at the scale it ran

    def line(self) -> str:
        return f"time scale {self.time_scale:g}x: {self.reason}"


def pressure(client: dict) -> float:
    """How close the client came to being flagged saturated: the worst of its loop lag p99,
    send lateness p99 and CPU, each over its limit (1.0: at the limit)."""
    parts = [(client.get("loop_lag_ms_p99"), LAG_MS_LIMIT),
             (client.get("send_lateness_ms_p99"), LATENESS_MS_LIMIT),
             (client.get("cpu_cores"), CPU_LIMIT)]
    return max((v / limit for v, limit in parts if v is not None), default=0.0)


def choose(probe: dict, *, probe_scale: float, jobs: int, requests_per_job: int,
           budget_s: float, replay_units: float | None = None) -> Pace:
    """The scale for `jobs` jobs of `requests_per_job` requests, from a probe job's figures
    (`client`: the replay summary's client block; `replay_s`, `job_s`: the probe's replay and
    whole-job wall times; `requests`: the requests it sent). `replay_units`: the sweep's
    replays in units of the probe's (their engine-clock seconds over the probe's,
    sweep/forecast.py); without it every job's requests take as long as the probe's."""
    p = pressure(probe["client"])
    # the client's work per wall second is proportional to the scale
    wanted = probe_scale if p <= TARGET_PRESSURE else probe_scale * TARGET_PRESSURE / p
    wanted = max(MIN_TIME_SCALE, math.floor(wanted / STEP) * STEP)
    # the budget: each job costs its fixed part (launch, ready, stop, result) and a replay
    # that takes probe_scale / scale times the probe's per-request wall time
    overhead_s = max(0.0, probe["job_s"] - probe["replay_s"])
    sweep_replay_at_probe_s = probe["replay_s"] * replay_units if replay_units else (
        probe["replay_s"] / max(1, probe["requests"]) * requests_per_job * jobs)
    room_s = budget_s - jobs * overhead_s
    floor = (math.inf if room_s <= 0 else sweep_replay_at_probe_s * probe_scale / room_s)
    floor = min(probe_scale, math.ceil(floor / STEP) * STEP if math.isfinite(floor) else
                probe_scale)
    figures = (f"loop lag p99 {_ms(probe['client'].get('loop_lag_ms_p99'))}, send lateness "
               f"p99 {_ms(probe['client'].get('send_lateness_ms_p99'))}, "
               f"{probe['client'].get('cpu_cores') or 0:.2f} cores at {probe_scale:g}x "
               f"(limits {LAG_MS_LIMIT:g} ms, {LATENESS_MS_LIMIT:g} ms, {CPU_LIMIT:g})")
    if wanted >= probe_scale:
        return Pace(probe_scale, f"the client sustains it: {figures}", probe)
    if wanted >= floor:
        return Pace(wanted, f"the client fell behind at {probe_scale:g}x ({figures}); "
                            f"{wanted:g}x brings it to about {TARGET_PRESSURE:.0%} of its "
                            "limits", probe)
    slow_s = jobs * overhead_s + sweep_replay_at_probe_s * probe_scale / wanted
    return Pace(floor, f"the client would need {wanted:g}x ({figures}), but {jobs} jobs "
                       f"within {budget_s:.0f} s need at least {floor:g}x: runs may be flagged "
                       f"client-saturated (--time-scale {wanted:g} would take about "
                       f"{slow_s:.0f} s)", probe)


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} ms"


def saved(results: Path) -> Pace | None:
    """The pace an earlier run of this results directory chose, or None."""
    from kvbench.sweep.layout import SWEEP_DIR

    path = Path(results) / SWEEP_DIR / PACE_FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = read_json(path)
        return Pace(float(data["time_scale"]), str(data["reason"]), dict(data["probe"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: probe again


def save(results: Path, pace: Pace) -> None:
    from kvbench.sweep.layout import sweep_dir

    write_json_atomic(sweep_dir(results) / PACE_FILE, asdict(pace))


def probe(spec, *, run_job) -> dict:
    """Run `spec` (one job, few requests) in a scratch directory; its client figures and
    timings. `run_job` is kvbench.sweep.job.run_job."""
    from kvbench.errors import SweepError
    from kvbench.sweep.layout import RESULT_FILE

    scratch = Path(tempfile.mkdtemp(prefix="kvbench-pace-"))
    outcome = None
    try:
        outcome = run_job(spec, scratch)
        job_dir = scratch / spec.dir_name
        if outcome.status != "ok":  # its directory is kept for the diagnosis
            raise SweepError(f"the time-scale probe failed at {outcome.phase}: "
                             f"{outcome.reason}", hint=f"see {job_dir / RESULT_FILE}")
        summary = read_json(job_dir / "summary.json")
        return {"client": summary["client"], "replay_s": summary["run"]["elapsed_s"],
                "job_s": outcome.elapsed_s, "requests": summary["requests"]["total"],
                "conc": spec.job().conc}
    finally:
        if outcome is None or outcome.status == "ok":
            shutil.rmtree(scratch, ignore_errors=True)
