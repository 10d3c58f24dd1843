"""An AgentX-shaped corpus: Claude Code sessions drawn from distributions fitted to real
traces, the default workload of every predicting command (`simulate-jobs`, `plan --predict`,
`capacity`, the quickstart's forecast).

InferenceX's AgentX points replay 393 Claude Code traces (`semianalysis_cc_traces_weka_062126`,
weka v7: a main agent whose prompt grows turn by turn, subagent trees, recorded think times)
at up to 512 session lanes a node; that corpus is not public here, so its shape is drawn from
distributions fitted to the public Claude Code traces of callanjfox/kv-cache-tester (the fit,
its sources and its distances on held-out traces: `data/corpus/claude-code.json`,
`corpus_fit.py`, docs/performance.md). Per session:

- a system + tool prefix, then `turns` main-agent turns: the first prompt, then each turn's
  prompt the previous one plus a growth (the conversation appended; the session's growth
  scale, turns and first prompt drawn together), or with `trim_prob` cut to `trim_ratio` of
  it; where it would pass the session's window (a `compact_at` threshold, or 1M tokens for
  the `large_context_frac` of sessions in a 1M window) it is compacted to `compact_ratio` of
  it, the prefix kept; an output length and the idle gap before each turn (think time,
  `zero_think_frac` of them none);
- after a main turn, with `spawn_prob`, `fanout` subagents, each its own prompt (the prefix
  that a session's subagents share, a task) growing over `sub_turns` turns, inline in the
  parent's lane as the weka loader places them (`Turn.agent`), ids in the session's scope.

Hash ids are local to a session (as the weka corpus's `hash_id_scope: local`): sessions share
nothing, a session's turns share their prefixes, its subagents the subagent prefix. The
context variant follows InferenceX: turns whose prompt + output exceed it are dropped, as
the 256k corpus drops them (`--repo-256k`). Session i depends only on (seed, i), so two
corpora of one seed share their first sessions whatever their sizes."""

from __future__ import annotations

import math
import random
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field

from kvbench.errors import WorkloadError
from kvbench.workload.blocks import Blocks, FreshIds
from kvbench.workload.session import Session, Turn

PARAMS = Path(__file__).resolve().parent / "data" / "corpus" / "claude-code.json"

# InferenceX's AgentX corpus: 393 session roots (aiperf docs, cc-traces-weka-062126).
AGENTX_TRACES = 393
# InferenceX benchmarks/benchmark_lib.sh resolve_trace_source (843c6254f): model families
# with a 1M-token default context replay the unfiltered corpus, the others its 256k variant
# (requests with in + out > 256,000 dropped).
FULL_CONTEXT_PREFIXES = ("dsv4", "glm5.2", "minimaxm3", "kimik3")
FULL_CONTEXT_TOKENS = 1_000_000
CAPPED_CONTEXT_TOKENS = 256_000


def context_variant_tokens(model_prefix: str) -> int:
    """The corpus variant a row of this model prefix replays, in tokens (prompt + output)."""
    full = any(model_prefix.startswith(p) for p in FULL_CONTEXT_PREFIXES)
    return FULL_CONTEXT_TOKENS if full else CAPPED_CONTEXT_TOKENS


class Table(BaseModel):
    """A fitted distribution: values at the parameter file's quantile knots."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(ge=1, description="samples it was fitted on")
    q: list[float]


class Copula(BaseModel):
    """Per-session draws that share a Gaussian copula (corpus_fit.py says why)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[str]
    n: int = Field(ge=1, description="sessions it was fitted on")
    correlation: list[list[float]]


class CorpusParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: dict[str, str | list[str]]
    block_tokens: int = Field(ge=1)
    knots: list[float]
    tables: dict[str, Table]
    scalars: dict[str, float]
    copula: Copula


@lru_cache(maxsize=4)
def load_params(path: Path = PARAMS) -> CorpusParams:
    import orjson

    try:
        return CorpusParams.model_validate(orjson.loads(path.read_bytes()))
    except (OSError, ValueError) as e:
        raise WorkloadError(f"{path}: cannot read corpus parameters: {e}") from e


class _Draw:
    """Inverse-CDF draws from the fitted tables: a uniform draw between two knots is
    interpolated in log space (the quantities are positive and heavy-tailed)."""

    __slots__ = ("chol", "knots", "logs", "names", "rng", "s")

    def __init__(self, params: CorpusParams) -> None:
        self.rng = random.Random()
        self.knots = params.knots
        self.logs = {k: [math.log(max(v, 1e-9)) for v in t.q] for k, t in params.tables.items()}
        self.s = params.scalars
        self.names = params.copula.names
        self.chol = _cholesky(params.copula.correlation)

    def joint(self) -> dict[str, float]:
        """One correlated draw of each of the copula's distributions."""
        eps = [self.rng.gauss(0.0, 1.0) for _ in self.names]
        cdf = _PHI.cdf
        return {name: self(name, cdf(sum(row[j] * eps[j] for j in range(i + 1))))
                for i, (name, row) in enumerate(zip(self.names, self.chol, strict=True))}

    def __call__(self, name: str, u: float | None = None) -> float:
        if u is None:
            u = self.rng.random()
        knots, logs = self.knots, self.logs[name]
        i = 1
        while i < len(knots) - 1 and knots[i] < u:
            i += 1
        lo, hi = knots[i - 1], knots[i]
        w = (u - lo) / (hi - lo) if hi > lo else 0.0
        return math.exp(logs[i - 1] + w * (logs[i] - logs[i - 1]))

    def count(self, name: str) -> int:
        return max(1, round(self(name)))

    def chance(self, name: str) -> bool:
        return self.rng.random() < self.s[name]


_PHI = NormalDist()


def _cholesky(a: list[list[float]]) -> list[list[float]]:
    """Lower-triangular L with L L^T = a (a correlation matrix)."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = a[i][j] - sum(low[i][k] * low[j][k] for k in range(j))
            if i == j:
                if s <= 0:
                    raise WorkloadError("corpus parameters: the copula's correlation is not "
                                        "positive definite")
                low[i][i] = math.sqrt(s)
            else:
                low[i][j] = s / low[j][j]
    return low


def _grow(ctx: Blocks, tokens: int, bs: int, ids: FreshIds) -> Blocks:
    """The context's blocks once it holds `tokens` (fresh ids appended as needed)."""
    need = tokens // bs - len(ctx)
    if need > 0:
        a, b = ids.take(need)
        ctx = ctx.extended(a, b)
    return ctx


def _think(draw: _Draw, table: str, zero: str) -> float:
    return 0.0 if draw.chance(zero) else round(draw(table), 3)


def _subagent(draw: _Draw, ids: FreshIds, prefix: tuple[int, int], bs: int, agent: str,
              t_s: float) -> list[Turn]:
    prefix_tokens = (prefix[1] - prefix[0]) * bs
    tokens = max(round(draw("sub_first_input_tokens")), prefix_tokens + 1)
    ctx = _grow(Blocks([prefix]), tokens, bs, ids)
    turns = []
    for k in range(draw.count("sub_turns")):
        think = 0.0
        if k:
            tokens += round(draw("sub_growth_tokens"))
            ctx = _grow(ctx, tokens, bs, ids)
            think = _think(draw, "sub_think_s", "sub_zero_think_frac")
        t_s += think
        turns.append(Turn(tokens, draw.count("sub_output_tokens"), ctx.prefix(tokens // bs),
                          bs, think, t_s=t_s, agent=agent))
    return turns


def _session(draw: _Draw, bs: int, seed: int, index: int, context_tokens: int) -> Session:
    draw.rng.seed(f"kvbench-corpus:{seed}:{index}")
    ids = FreshIds()
    prefix_tokens = round(draw("prefix_tokens"))
    prefix = ids.take(prefix_tokens // bs)
    whole = draw.joint()
    scale = whole["growth_scale"]
    tokens = max(round(whole["first_input_tokens"]), prefix_tokens + 1)
    ctx = _grow(Blocks([prefix]), tokens, bs, ids)
    sub_prefix: tuple[int, int] | None = None
    n = max(1, round(whole["turns"]))
    large = draw.chance("large_context_frac")
    window = FULL_CONTEXT_TOKENS if large else draw("compact_at")
    sid = f"agentx-{seed}-{index}"
    turns: list[Turn] = []
    t_s = 0.0
    agents = 0
    for k in range(n):
        think = 0.0
        if k:
            grown = tokens + round(scale * draw("growth_rel"))
            if draw.chance("trim_prob"):  # the conversation's end rewritten
                tokens = max(prefix_tokens + bs, round(tokens * draw("trim_ratio")))
                ctx = _grow(ctx.prefix(tokens // bs), tokens, bs, ids)
            elif grown > window:  # compacted: the prefix, then a summary
                tokens = max(prefix_tokens + bs, round(tokens * draw("compact_ratio")))
                ctx = _grow(Blocks([prefix]), tokens, bs, ids)
                window = FULL_CONTEXT_TOKENS if large else draw("compact_at")
            else:
                tokens = grown
                ctx = _grow(ctx, tokens, bs, ids)
            think = _think(draw, "think_s", "zero_think_frac")
        t_s += think
        turns.append(Turn(tokens, draw.count("output_tokens"), ctx.prefix(tokens // bs), bs,
                          think, t_s=t_s))
        if k + 1 < n and draw.chance("spawn_prob"):
            if sub_prefix is None:
                sub_prefix = ids.take(round(draw("sub_prefix_tokens")) // bs)
            for _ in range(draw.count("fanout")):
                agents += 1
                turns += _subagent(draw, ids, sub_prefix, bs, f"agent_{agents:03d}", t_s)
    kept = [t for t in turns if t.input_tokens + t.output_tokens <= context_tokens]
    return Session(sid, kept, sid, "corpus", {"format": "corpus", "seed": seed,
                                              "block_size": bs})


class CorpusSpec(BaseModel):
    """Which corpus: how many sessions, the seed, and the context variant (tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sessions: int = Field(AGENTX_TRACES, ge=1)
    seed: int = 0
    context_tokens: int = Field(CAPPED_CONTEXT_TOKENS, ge=1)
    # Tokens per hash block. The weka corpus names 64-token blocks; at AgentX's 100K-1M-token
    # prompts that is 1.5K-16K keys a request, which the simulator's prefix matching walks
    # per request. 256-token blocks cut that 4x for at most 255 tokens (0.1-0.3% of such a
    # prompt) of each prompt's unnamed tail that can never hit, instead of at most 63.
    block_tokens: int = Field(256, ge=1)

    def describe(self) -> dict:
        """What a result records of the workload (with the parameters' source)."""
        params = load_params()
        return {"corpus": self.model_dump(), "fitted": params.source}


def generate_corpus(spec: CorpusSpec, params: CorpusParams | None = None) -> list[Session]:
    """`spec.sessions` sessions (a drawn session with no turn within the context variant is
    passed over, as the corpus variant leaves it out)."""
    params = params or load_params()
    draw = _Draw(params)
    out: list[Session] = []
    index = 0
    while len(out) < spec.sessions:
        session = _session(draw, spec.block_tokens, spec.seed, index, spec.context_tokens)
        index += 1
        if session.turns:
            out.append(session)
        elif index > 100 * spec.sessions:
            raise WorkloadError(f"corpus: no session fits a {spec.context_tokens:,}-token "
                                "context", hint="a context variant of at least 16,384 tokens")
    return out
