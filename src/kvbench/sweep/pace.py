"""The quickstart's pace: how many repeats of its points fit its minute on this machine.

Two rounds of choosing a wall-clock time scale from a probe's client figures did not hold: on
two cores with one busy, the runs the probe's pace allowed were still flagged client-saturated,
or the minute asked for more than the probe said the client sustained (issue 27 item 10, issue
39). The quickstart now runs the embedded engine on its virtual clock (sim/lockstep.py): the
engine waits for every lane of the client, so its pace is the client's by construction and no
timing can be the client's lag. What this machine's speed decides is only how long the sweep
takes. The first pass (every point once) is the probe: it takes what any pass takes, and the
repeats that fit the budget after it are run, never fewer than two (a delta's interval needs
two runs per arm); the choice and its reason are printed, and kept in the results directory
so a resumed quickstart runs the same repeats."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from kvbench.files import read_json, write_json_atomic

PACE_FILE = "pace.json"  # in results/.kvbench: the repeats chosen by the first run
MIN_REPEATS = 2  # a delta's 95% interval needs two runs in each arm (results/compare.py)


@dataclass(frozen=True, slots=True)
class Pace:
    repeats: int
    reason: str

    def line(self) -> str:
        return f"pace: {self.repeats} repeats per point: {self.reason}"


def choose(*, pass_s: float, elapsed_s: float, wanted: int, budget_s: float,
           jobs: int) -> Pace:
    """The repeats to run after a first pass of `jobs` jobs that took `pass_s` (the sweep at
    `elapsed_s` since its start): `wanted`, or fewer where they would end past `budget_s`,
    never below MIN_REPEATS."""
    fits = 1 + math.floor(max(0.0, budget_s - elapsed_s) / pass_s) if pass_s > 0 else wanted
    chosen = max(min(wanted, MIN_REPEATS), min(wanted, fits))
    end_s = elapsed_s + (chosen - 1) * pass_s
    first = f"the first pass ({jobs} jobs) took {pass_s:.0f} s"
    if chosen >= wanted:
        return Pace(chosen, f"{first}; {wanted} passes end in about {end_s:.0f} s")
    if fits >= chosen:
        return Pace(chosen, f"this machine is slower than the quickstart's {budget_s:.0f} s "
                            f"need: {first}, so {wanted} would end at about "
                            f"{elapsed_s + (wanted - 1) * pass_s:.0f} s; running {chosen} "
                            f"(deltas from n={chosen}) instead")
    return Pace(chosen, f"this machine is too slow for the quickstart's {budget_s:.0f} s: "
                        f"{first}; running the fewest that give a delta its interval "
                        f"({chosen}), ending at about {end_s:.0f} s")


def saved(results: Path) -> Pace | None:
    """The pace an earlier run of this results directory chose, or None."""
    from kvbench.sweep.layout import SWEEP_DIR

    path = Path(results) / SWEEP_DIR / PACE_FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = read_json(path)
        return Pace(int(data["repeats"]), str(data["reason"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable (or an older kvbench's time scale): chosen again


def save(results: Path, pace: Pace) -> None:
    from kvbench.sweep.layout import sweep_dir

    write_json_atomic(sweep_dir(results) / PACE_FILE, asdict(pace))
