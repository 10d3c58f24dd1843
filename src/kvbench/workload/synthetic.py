"""A seeded synthetic agentic workload: coding-agent sessions whose context grows turn by turn.

Defaults are fitted to the 100 real Claude Code sessions in `tests/data/traces/claude-code`
(4,524 requests); lognormal parameters are the mean and standard deviation of ln(x) there:

| quantity | fitted | real median / p90 |
|---|---|---|
| turns per session | mu 3.431, sigma 0.962 | 34.5 / 100 |
| first prompt (tokens, incl. shared prefix) | mu 10.794, sigma 1.074 | 51,307 / 218,035 |
| context growth per turn (tokens) | mu 6.703, sigma 1.179 | 695 / 4,158 |
| output tokens | mu 5.562, sigma 0.936 | 211 / 941 |
| think time (s, tool + user) | mu 2.780, sigma 1.532; 3.0 % zero | 10 / 157 |
| shared system + tool prefix | 2,731 + 12,207 tokens (medians) | |
| context compaction | 0.54 % of turns, context x 0.40 | |

Subagents do not occur in that sample; `subagent_prob` and `subagent_turns_mu` are plausible
guesses (the weka corpora have them), not fits. Long-tail contexts are capped at
`max_context_tokens` (the real maximum is 838,246)."""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict, Field

from kvbench.workload.blocks import Blocks, FreshIds
from kvbench.workload.session import Session, Turn


class SyntheticSpec(BaseModel):
    """Parameters of the generator (strict: a typo in a field name is an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_sessions: int = Field(64, ge=1)
    seed: int = 0
    block_tokens: int = Field(64, ge=1)
    shared_prefix_tokens: int = Field(14_938, ge=0)
    turns_mu: float = 3.431
    turns_sigma: float = Field(0.962, ge=0)
    max_turns: int = Field(200, ge=1)
    first_context_mu: float = 10.794
    first_context_sigma: float = Field(1.074, ge=0)
    growth_mu: float = 6.703
    growth_sigma: float = Field(1.179, ge=0)
    output_mu: float = 5.562
    output_sigma: float = Field(0.936, ge=0)
    think_mu: float = 2.780
    think_sigma: float = Field(1.532, ge=0)
    zero_think_frac: float = Field(0.030, ge=0, le=1)
    compaction_prob: float = Field(0.0054, ge=0, le=1)
    compaction_ratio: float = Field(0.40, gt=0, le=1)
    subagent_prob: float = Field(0.02, ge=0, le=1)
    subagent_turns_mu: float = 1.6
    max_context_tokens: int = Field(200_000, ge=1)
    max_output_tokens: int = Field(8192, ge=1)
    scale: float = Field(1.0, gt=0, description="multiplies every token count (tiny test runs)")


def _lognormal(rng: random.Random, mu: float, sigma: float, scale: float) -> int:
    return max(1, round(rng.lognormvariate(mu, sigma) * scale))


def _think(rng: random.Random, spec: SyntheticSpec) -> float:
    if rng.random() < spec.zero_think_frac:
        return 0.0
    return round(rng.lognormvariate(spec.think_mu, spec.think_sigma), 3)


def _turns(rng: random.Random, spec: SyntheticSpec, ids: FreshIds, prefix: Blocks,
           num_turns: int, first_tokens: int, agent: str | None) -> list[Turn]:
    bs = spec.block_tokens
    cap = max(int(spec.max_context_tokens * spec.scale), len(prefix) * bs + 1)
    own_tokens = max(1, first_tokens - len(prefix) * bs)
    context = len(prefix) * bs + own_tokens
    own = Blocks([ids.take(own_tokens // bs)])
    turns: list[Turn] = []
    for k in range(num_turns):
        if k:
            if rng.random() < spec.compaction_prob:
                context = max(len(prefix) * bs + 1, int(context * spec.compaction_ratio))
                own = Blocks([ids.take((context - len(prefix) * bs) // bs)])
            grown = context + _lognormal(rng, spec.growth_mu, spec.growth_sigma, spec.scale)
            context = min(grown, cap)
            need = (context - len(prefix) * bs) // bs
            if need > len(own):
                own = own.extended(*ids.take(need - len(own)))
        context = min(context, cap)
        blocks = Blocks([*prefix.runs, *own.prefix(max(0, context // bs - len(prefix))).runs])
        out = min(_lognormal(rng, spec.output_mu, spec.output_sigma, spec.scale),
                  spec.max_output_tokens)
        turns.append(Turn(context, out, blocks, bs,
                          think_time_s=_think(rng, spec) if k else 0.0, agent=agent))
    return turns


def generate_sessions(spec: SyntheticSpec) -> list[Session]:
    """`spec.num_sessions` sessions; identical for identical specs."""
    rng = random.Random(spec.seed)
    bs = spec.block_tokens
    prefix_blocks = round(spec.shared_prefix_tokens * spec.scale) // bs
    ids = FreshIds(prefix_blocks)
    prefix = Blocks([(0, prefix_blocks)])
    sessions = []
    for s in range(spec.num_sessions):
        n = min(spec.max_turns, _lognormal(rng, spec.turns_mu, spec.turns_sigma, 1.0))
        first = _lognormal(rng, spec.first_context_mu, spec.first_context_sigma, spec.scale)
        turns = _turns(rng, spec, ids, prefix, n, first, None)
        merged: list[Turn] = []
        for k, turn in enumerate(turns):
            merged.append(turn)
            if k + 1 < len(turns) and rng.random() < spec.subagent_prob:
                # a subagent forks: it starts from the shared prefix plus a task, runs a few
                # turns of its own, and the parent continues after it returns
                m = max(1, round(math.exp(rng.gauss(spec.subagent_turns_mu, 0.6))))
                task = len(prefix) * bs + _lognormal(rng, 7.0, 0.8, spec.scale)
                merged += _turns(rng, spec, ids, prefix, min(m, spec.max_turns), task,
                                 f"synthetic-{s}-sa{k}")
        sessions.append(Session(f"synthetic-{s}", merged, "synthetic", "synthetic",
                                {"format": "synthetic", "seed": spec.seed}))
    return sessions
