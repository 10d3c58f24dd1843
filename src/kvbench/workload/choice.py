"""Which workload a command replays: trace files, kvbench's bundled Claude Code sessions, or
synthetic agentic sessions, with the description every result records. Shared by `capacity`,
`plan --predict` and `simulate-jobs --prune` (and the sweep's bundled traces)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvbench.errors import WorkloadError
from kvbench.workload.loader import load_trace
from kvbench.workload.session import Session
from kvbench.workload.synthetic import SyntheticSpec, generate_sessions

# Real Claude Code sessions shipped with kvbench (see data/ATTRIBUTION.md).
BUNDLED_TRACES = Path(__file__).resolve().parent / "data" / "claude-code"


def bundled_traces() -> list[Path]:
    return sorted(BUNDLED_TRACES.glob("*.json.gz"))


@dataclass(slots=True)
class WorkloadChoice:
    """The sessions, what they are (for the result's `workload`), and where they came from:
    the trace paths or the synthetic spec (one of the two is None)."""

    sessions: list[Session]
    describe: dict
    paths: list[Path] | None
    synthetic: SyntheticSpec | None


def choose_workload(trace: list[Path] | None, bundled: bool, sessions: int, scale: float,
                    seed: int) -> WorkloadChoice:
    """Traces (with the bundled ones first when `bundled`), else `sessions` synthetic ones
    whose token counts are multiplied by `scale`."""
    paths = list(trace or [])
    if bundled:
        paths = [*bundled_traces(), *paths]
    if paths:
        loaded = load_trace(paths)
        return WorkloadChoice(loaded, {"traces": [str(p) for p in paths],
                                       "sessions": len(loaded)}, paths, None)
    if sessions < 1 or scale <= 0:
        raise WorkloadError(f"--synthetic-sessions must be >= 1 and --synthetic-scale > 0, got "
                            f"{sessions} and {scale:g}")
    spec = SyntheticSpec(num_sessions=sessions, seed=seed, scale=scale)
    return WorkloadChoice(generate_sessions(spec),
                          {"synthetic": spec.model_dump(), "sessions": sessions}, None, spec)


def first_turns(sessions: list[Session], max_turns: int | None) -> list[Session]:
    """Each session's first `max_turns` turns: a shorter replay of the same requests in both
    executors (the replay's own bounds would recycle sessions, which the simulator does not)."""
    if max_turns is None:
        return sessions
    if max_turns < 1:
        raise WorkloadError(f"--max-turns must be >= 1, got {max_turns}")
    return [Session(s.session_id, s.turns[:max_turns], s.namespace, s.source, dict(s.meta))
            for s in sessions]
