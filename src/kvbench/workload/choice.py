"""Which workload a command replays, from its `--trace` values: trace files or directories
(kv-cache-tester / weka JSON or JSONL, Mooncake JSONL), or one of the words

- `agentx`: the AgentX-shaped corpus (workload/corpus.py), the default of every predicting
  command: as many sessions as the row's lanes need (at least AgentX's 393), with the
  row's context variant (1M tokens for the model families InferenceX gives the full corpus,
  256K otherwise);
- `bundled`: kvbench's own Claude Code sessions (data/claude-code; may be given with files);
- `synthetic`: the seeded synthetic generator (workload/synthetic.py).

`WorkloadSource` is what a command resolved (picklable: worker processes build the sessions
from it), with the description a result records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvbench.errors import WorkloadError
from kvbench.workload.corpus import AGENTX_TRACES, CorpusSpec, context_variant_tokens
from kvbench.workload.session import Session
from kvbench.workload.synthetic import SyntheticSpec, generate_sessions

# Real Claude Code sessions shipped with kvbench (see data/ATTRIBUTION.md).
BUNDLED_TRACES = Path(__file__).resolve().parent / "data" / "claude-code"
TRACE_WORDS = ("agentx", "bundled", "synthetic")


def bundled_traces() -> list[Path]:
    return sorted(BUNDLED_TRACES.glob("*.json.gz"))


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    """`kind`: corpus | traces | synthetic. Traces: `paths` (the bundled ones first when
    `bundled`). Corpus: at least `sessions` sessions of `seed` (default AgentX's 393), more
    when a row's lanes need them. Synthetic: `synthetic`."""

    kind: str
    paths: tuple[Path, ...] = ()
    bundled: bool = False
    synthetic: SyntheticSpec | None = None
    seed: int = 0
    sessions: int | None = None

    @property
    def trace_paths(self) -> list[Path] | None:
        if self.kind != "traces":
            return None
        return [*bundled_traces(), *self.paths] if self.bundled else list(self.paths)

    def context_tokens(self, model_prefix: str | None) -> int | None:
        """The corpus variant a row of this model replays (None: not a corpus)."""
        if self.kind != "corpus":
            return None
        return context_variant_tokens(model_prefix or "")

    def corpus_sessions(self, concurrency: int) -> int:
        return max(self.sessions or AGENTX_TRACES, concurrency)

    def sessions_for(self, model_prefix: str | None = None, concurrency: int = 1
                     ) -> list[Session]:
        """The sessions a row of this model prefix and concurrency replays (loaded or drawn
        once per process)."""
        if self.kind == "traces":
            return _loaded(tuple(self.trace_paths or ()))
        if self.kind == "synthetic":
            return _synthetic(self.synthetic)
        return _corpus(self.seed, self.context_tokens(model_prefix),
                       self.corpus_sessions(concurrency))

    def describe(self, model_prefix: str | None = None, concurrency: int = 1) -> dict:
        """What a result records of the workload."""
        if self.kind == "traces":
            paths = self.trace_paths or []
            return {"traces": [str(p) for p in paths], "bundled": self.bundled,
                    "sessions": len(self.sessions_for())}
        if self.kind == "synthetic":
            return {"synthetic": self.synthetic.model_dump(), "sessions":
                    self.synthetic.num_sessions}
        spec = CorpusSpec(sessions=self.corpus_sessions(concurrency), seed=self.seed,
                          context_tokens=self.context_tokens(model_prefix))
        return spec.describe()

    def label(self, model_prefix: str | None = None, concurrency: int = 1) -> str:
        """One line for a terminal: what is replayed."""
        if self.kind == "traces":
            n = len(self.sessions_for())
            what = "kvbench's bundled Claude Code sessions" if self.bundled and not self.paths \
                else ", ".join(str(p) for p in (self.trace_paths or []))
            return f"{what} ({n} sessions)"
        if self.kind == "synthetic":
            return f"{self.synthetic.num_sessions} synthetic sessions (seed {self.seed})"
        ctx = self.context_tokens(model_prefix)
        return (f"the AgentX-shaped corpus ({self.corpus_sessions(concurrency)} sessions drawn "
                f"from Claude Code traces, seed {self.seed}, {ctx // 1000}K-token context "
                "variant)")


def parse_trace(values: Sequence[Path | str] | None, *, synthetic_sessions: int = 64,
                synthetic_scale: float = 1.0, seed: int = 0,
                corpus_sessions: int | None = None, default: str = "agentx"
                ) -> WorkloadSource:
    """The workload named by `--trace` values (none: `default`)."""
    raw = [str(v) for v in (values or [])] or [default]
    words = [v for v in raw if v in TRACE_WORDS]
    files = tuple(Path(v) for v in raw if v not in TRACE_WORDS)
    if words and (len(words) > 1 or (files and words != ["bundled"])):
        raise WorkloadError(
            f"--trace {' '.join(raw)}: a word ({', '.join(TRACE_WORDS)}) stands alone "
            "(only bundled may be given with trace files)")
    word = words[0] if words else None
    if word == "synthetic":
        if synthetic_sessions < 1 or synthetic_scale <= 0:
            raise WorkloadError(f"synthetic sessions must be >= 1 and their scale > 0, got "
                                f"{synthetic_sessions} and {synthetic_scale:g}")
        return WorkloadSource("synthetic", seed=seed, synthetic=SyntheticSpec(
            num_sessions=synthetic_sessions, seed=seed, scale=synthetic_scale))
    if word == "agentx":
        if corpus_sessions is not None and corpus_sessions < 1:
            raise WorkloadError(f"corpus sessions must be >= 1, got {corpus_sessions}")
        return WorkloadSource("corpus", seed=seed, sessions=corpus_sessions)
    if word == "bundled" and not bundled_traces():
        raise WorkloadError(f"the bundled traces are missing from {BUNDLED_TRACES}",
                            hint="reinstall kvbench (the package data holds them)")
    return WorkloadSource("traces", paths=files, bundled=word == "bundled", seed=seed)


@lru_cache(maxsize=8)
def _loaded(paths: tuple[Path, ...]) -> list[Session]:
    from kvbench.workload.loader import load_trace

    return load_trace(list(paths))


@lru_cache(maxsize=4)
def _synthetic(spec: SyntheticSpec) -> list[Session]:
    return generate_sessions(spec)


_CORPORA: dict[tuple[int, int | None], list[Session]] = {}


def _corpus(seed: int, context_tokens: int | None, n: int) -> list[Session]:
    """The first `n` sessions of a corpus, drawn once per process and extended as rows need
    more (session i depends only on the seed and i)."""
    from kvbench.workload.corpus import generate_corpus

    have = _CORPORA.get((seed, context_tokens))
    if have is None or len(have) < n:
        spec = CorpusSpec(sessions=n, seed=seed, context_tokens=context_tokens)
        have = _CORPORA[(seed, context_tokens)] = generate_corpus(spec)
    return have[:n]


# -- the older interface, for `capacity`'s synthetic flags ------------------------------------
@dataclass(slots=True)
class WorkloadChoice:
    """The sessions, what they are (for the result's `workload`), and where they came from:
    the trace paths or the synthetic spec (one of the two is None)."""

    sessions: list[Session]
    describe: dict
    paths: list[Path] | None
    synthetic: SyntheticSpec | None


def first_turns(sessions: list[Session], max_turns: int | None) -> list[Session]:
    """Each session's first `max_turns` turns: a shorter replay of the same requests in both
    executors (the replay's own bounds would recycle sessions, which the simulator does not)."""
    if max_turns is None:
        return sessions
    if max_turns < 1:
        raise WorkloadError(f"--max-turns must be >= 1, got {max_turns}")
    return [Session(s.session_id, s.turns[:max_turns], s.namespace, s.source, dict(s.meta))
            for s in sessions]
