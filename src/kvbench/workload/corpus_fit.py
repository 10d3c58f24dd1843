"""Fitting the corpus generator (workload/corpus.py) to real agentic sessions, and measuring
how far a corpus is from a set of sessions, distribution by distribution.

What is measured per session, from the sessions as the loader reads them (workload/weka.py:
a subagent's turns inline at its position, `Turn.agent` naming it):

- `turns`: main-agent turns per session; `first_input_tokens`: the first turn's prompt;
- `growth_tokens`: prompt growth from one main turn to the next (where it does not shrink);
  `growth_scale`: a session's mean growth, `growth_rel`: each growth over its session's mean;
- `compact_at`, `compact_ratio`: a compaction (the next prompt below half the previous): the
  prompt before it, in sessions that stay within a 200K window, and next / previous;
- `trim_ratio`: next / previous where it shrinks less (a trimmed tool result); `trim_prob`
  per transition;
- `output_tokens`; `think_s`: the idle gap before a main turn (but the first), where > 0,
  `zero_think_frac` of them none;
- `prefix_tokens`: the system + tool prefix (the trace header's system_tokens + tool_tokens);
- `fanout`: subagents started between two main turns, `spawn_prob` per main transition;
  `sub_turns`, `sub_first_input_tokens`, `sub_growth_tokens`, `sub_output_tokens`,
  `sub_think_s`, `sub_zero_think_frac`: as above, for subagents; `sub_prefix_tokens`: the
  prefix sibling subagents share (their first prompts' common blocks).

A fitted distribution is its quantile table (`Table`: values at fixed probabilities, linear
interpolation of the empirical quantiles); `distances` compares two sets of samples with the
two-sample Kolmogorov-Smirnov statistic and the relative error of the median and p90.

Sessions differ as wholes: a long session starts small, a short one is often a resumed one
that starts large (normal-score correlation of turns and first prompt -0.42 in the fit set), and
some grow fast (reading files) and some slowly. Drawn independently, turns and first prompt
put the largest prompts 25% too high at p90 on held-out sessions; so the three per-session
draws (turns, first prompt, growth scale) share a Gaussian copula: `copula` is the
correlation of their normal scores.

Prompts pile up below Claude's 200K-token context window: 29% of the held-out sessions peak
at 140-160K tokens, where Claude Code compacts (their compactions start from 136-159K at
p10-p90). A session either stays within that window and compacts when its next prompt would
pass a threshold (`compact_at`), or runs in a 1M window (`large_context_frac` of the
sessions that reach the threshold's range go past 200K)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from itertools import pairwise
from statistics import NormalDist

from kvbench.workload.session import Session

# Quantile table knots: dense in the tails, where the working set and the long turns live.
KNOTS = (0.0, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6,
         0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 1.0)
TABLES = ("turns", "first_input_tokens", "growth_tokens", "growth_scale", "growth_rel",
          "compact_at", "compact_ratio", "trim_ratio", "output_tokens",
          "think_s", "prefix_tokens", "fanout", "sub_turns", "sub_first_input_tokens",
          "sub_growth_tokens", "sub_output_tokens", "sub_think_s", "sub_prefix_tokens")
SCALARS = ("trim_prob", "large_context_frac", "zero_think_frac", "spawn_prob",
           "sub_zero_think_frac")
COPULA = ("turns", "first_input_tokens", "growth_scale")
# a next prompt below this share of the previous one is a compaction, not a trim
COMPACTION_BELOW = 0.5
# Claude's standard context window (the traces are Claude Code's): a session whose prompt
# passes it runs in the 1M-token window
STANDARD_WINDOW_TOKENS = 200_000


def quantile(sorted_values: list[float], p: float) -> float:
    """The linear-interpolated empirical quantile (numpy's default, 'linear')."""
    n = len(sorted_values)
    x = p * (n - 1)
    i = math.floor(x)
    if i >= n - 1:
        return float(sorted_values[-1])
    return sorted_values[i] + (sorted_values[i + 1] - sorted_values[i]) * (x - i)


def _lcp(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def samples(sessions: Iterable[Session], joint: list[tuple] | None = None
            ) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Every distribution's samples and the scalars (rates), from loaded sessions; `joint`
    receives each growing session's (turns, first prompt, growth scale)."""
    joint = [] if joint is None else joint
    zone: list[tuple[int, bool]] = []  # (peak prompt, past the standard window) per session
    out: dict[str, list[float]] = {name: [] for name in TABLES}
    counts = {"transitions": 0, "trims": 0, "main_thinks": 0, "zero_thinks": 0,
              "sub_thinks": 0, "sub_zero_thinks": 0, "spawns": 0}
    for s in sessions:
        meta = s.meta
        if "system_tokens" in meta and "tool_tokens" in meta:
            out["prefix_tokens"].append(meta["system_tokens"] + meta["tool_tokens"])
        main = [t for t in s.turns if t.agent is None]
        if not main:
            continue
        out["turns"].append(len(main))
        out["first_input_tokens"].append(main[0].input_tokens)
        out["output_tokens"] += [t.output_tokens for t in main]
        for k, t in enumerate(main):
            if k:
                counts["main_thinks"] += 1
                if t.think_time_s > 0:
                    out["think_s"].append(t.think_time_s)
                else:
                    counts["zero_thinks"] += 1
        grown = []
        large = max(t.input_tokens for t in main) > STANDARD_WINDOW_TOKENS
        for a, b in pairwise(main):
            counts["transitions"] += 1
            ratio = b.input_tokens / a.input_tokens
            if ratio < COMPACTION_BELOW:
                out["compact_ratio"].append(ratio)
                if not large:
                    out["compact_at"].append(a.input_tokens)
            elif ratio < 1:
                counts["trims"] += 1
                out["trim_ratio"].append(ratio)
            else:
                grown.append(b.input_tokens - a.input_tokens)
        zone.append((max(t.input_tokens for t in main), large))
        out["growth_tokens"] += grown
        scale = sum(grown) / len(grown) if grown else 0.0
        if scale > 0:
            out["growth_scale"].append(scale)
            out["growth_rel"] += [g / scale for g in grown if g > 0]
            joint.append((len(main), main[0].input_tokens, scale))
        _subagents(s, out, counts)
    # of the sessions that reached the compaction thresholds' range, those that went past
    at = sorted(out["compact_at"])
    reach = quantile(at, 0.1) if at else STANDARD_WINDOW_TOKENS
    reached = [large for peak, large in zone if peak >= reach]
    scalars = {
        "trim_prob": counts["trims"] / max(1, counts["transitions"]),
        "large_context_frac": sum(reached) / max(1, len(reached)),
        "zero_think_frac": counts["zero_thinks"] / max(1, counts["main_thinks"]),
        "spawn_prob": counts["spawns"] / max(1, counts["transitions"]),
        "sub_zero_think_frac": counts["sub_zero_thinks"] / max(1, counts["sub_thinks"]),
    }
    return out, scalars


def _subagents(s: Session, out: dict[str, list[float]], counts: dict[str, int]) -> None:
    """Subagent runs of one session: grouped by agent id, spawns by the main turn before."""
    agents: dict[str, list] = {}
    spawn_of: dict[str, int] = {}
    main_seen = 0
    for t in s.turns:
        if t.agent is None:
            main_seen += 1
        else:
            if t.agent not in agents:
                agents[t.agent] = []
                spawn_of[t.agent] = main_seen
            agents[t.agent].append(t)
    if not agents:
        return
    by_spawn: dict[int, int] = {}
    for agent in agents:
        by_spawn[spawn_of[agent]] = by_spawn.get(spawn_of[agent], 0) + 1
    counts["spawns"] += len(by_spawn)
    out["fanout"] += list(by_spawn.values())
    firsts = [turns[0] for turns in agents.values()]
    for a, b in pairwise(firsts):
        shared = _lcp(a.hash_ids, b.hash_ids) * a.block_tokens
        if shared:
            out["sub_prefix_tokens"].append(shared)
    for turns in agents.values():
        out["sub_turns"].append(len(turns))
        out["sub_first_input_tokens"].append(turns[0].input_tokens)
        out["sub_output_tokens"] += [t.output_tokens for t in turns]
        for a, b in pairwise(turns):
            counts["sub_thinks"] += 1
            if b.think_time_s > 0:
                out["sub_think_s"].append(b.think_time_s)
            else:
                counts["sub_zero_thinks"] += 1
            if b.input_tokens >= a.input_tokens:
                out["sub_growth_tokens"].append(b.input_tokens - a.input_tokens)


def fit(sessions: Iterable[Session]) -> dict:
    """The generator's parameters: a quantile table per distribution, the scalars, and how
    many samples each came from."""
    joint: list[tuple] = []
    data, scalars = samples(sessions, joint)
    tables = {}
    for name in TABLES:
        values = sorted(data[name])
        if not values:
            raise ValueError(f"corpus fit: no samples of {name}")
        tables[name] = {"n": len(values), "q": [round(quantile(values, p), 4) for p in KNOTS]}
    return {"knots": list(KNOTS), "tables": tables,
            "scalars": {k: round(v, 6) for k, v in scalars.items()},
            "copula": {"names": list(COPULA), "n": len(joint),
                       "correlation": normal_score_correlation(joint)}}


def _normal_scores(values: list[float]) -> list[float]:
    """van der Waerden scores: Phi^-1 of each value's mid-rank (ties share their rank)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    inv = NormalDist().inv_cdf
    return [inv((r - 0.5) / len(values)) for r in ranks]


def normal_score_correlation(rows: list[tuple]) -> list[list[float]]:
    """The correlation matrix of the columns' normal scores (a Gaussian copula's)."""
    cols = [_normal_scores([float(r[c]) for r in rows]) for c in range(len(rows[0]))]

    def corr(a: list[float], b: list[float]) -> float:
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
        va = sum((x - ma) ** 2 for x in a)
        vb = sum((y - mb) ** 2 for y in b)
        return cov / math.sqrt(va * vb)

    return [[round(corr(a, b), 4) for b in cols] for a in cols]


def ks_statistic(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov-Smirnov D: the largest gap between the empirical CDFs."""
    a, b = sorted(a), sorted(b)
    d = 0.0
    for x in set(a) | set(b):
        d = max(d, abs(bisect_right(a, x) / len(a) - bisect_right(b, x) / len(b)))
    return d


def distances(reference: dict[str, list[float]], other: dict[str, list[float]]) -> dict:
    """Per distribution: KS D between the two sample sets, and the other's median and p90
    relative to the reference's."""
    out = {}
    for name, ref in reference.items():
        got = other.get(name) or []
        if not ref or not got:
            out[name] = {"n": [len(ref), len(got)], "ks": None}
            continue
        r, g = sorted(ref), sorted(got)
        row = {"n": [len(r), len(g)], "ks": round(ks_statistic(r, g), 4)}
        for label, p in (("p50", 0.5), ("p90", 0.9)):
            want, have = quantile(r, p), quantile(g, p)
            row[label] = [round(want, 3), round(have, 3)]
            row[f"{label}_rel"] = round(have / want - 1, 4) if want else None
        out[name] = row
    return out


def session_shape(sessions: Iterable[Session]) -> dict[str, list[float]]:
    """Whole-session quantities the simulator's answer turns on: requests, the largest
    prompt (the working set), total prompt tokens, and the idle time between turns."""
    out: dict[str, list[float]] = {"requests": [], "peak_input_tokens": [],
                                   "total_input_tokens": [], "think_total_s": []}
    for s in sessions:
        if not s.turns:
            continue
        out["requests"].append(len(s.turns))
        out["peak_input_tokens"].append(max(t.input_tokens for t in s.turns))
        out["total_input_tokens"].append(sum(t.input_tokens for t in s.turns))
        out["think_total_s"].append(sum(t.think_time_s for t in s.turns))
    return out
