"""What the records say about whether to believe a run: the prompt sizes the client meant
against the server's usage, the ideal-cache ceiling against the hits the engine reported, and
the warm-cache guard (no session's first request may hit KV that this run never sent)."""

from __future__ import annotations

from collections.abc import Sequence

# The server's prompt count differs from ours by the chat template; beyond this the trace's
# reuse is not what the server sees (a tokenizer that splits our words, a different model).
PROMPT_TOLERANCE = 0.02
# The template is a fixed number of tokens per request, which short prompts cannot absorb in
# 2%: allowed besides it. Measured: Qwen3-8B's on vLLM 0.26 (H200), 600 tokens over 40
# requests = 15 per request; serve-sim's 6.
TEMPLATE_TOKENS_PER_REQUEST = 32
# Tokens beyond the template a first request may hit by chance: the run marker replaces each
# prompt's first tokens, so a previous run can share at most a token or two of it.
WARM_SLACK_TOKENS = 16


def prompt_agreement(ok: Sequence[dict]) -> dict:
    """Sum of prompt tokens sent against the sum the server reported (requests with usage)."""
    both = [r for r in ok if r.get("prompt_tokens") is not None
            and r.get("sent_prompt_tokens") is not None]
    sent = sum(r["sent_prompt_tokens"] for r in both)
    server = sum(r["prompt_tokens"] for r in both)
    deviation = (server - sent) / sent if sent else None
    allowed = max(PROMPT_TOLERANCE * sent, TEMPLATE_TOKENS_PER_REQUEST * len(both))
    return {"requests": len(both), "sent_tokens": sent, "server_tokens": server,
            "deviation": deviation, "tolerance": PROMPT_TOLERANCE,
            "template_tokens_per_request": TEMPLATE_TOKENS_PER_REQUEST,
            "agrees": None if deviation is None else abs(server - sent) <= allowed}


def ideal_hit_rate(ok: Sequence[dict]) -> float | None:
    """Hit rate an unlimited prefix cache would reach on the requests sent (replay/ideal.py)."""
    rows = [r for r in ok if r.get("ideal_cached_tokens") is not None
            and r.get("sent_prompt_tokens")]
    sent = sum(r["sent_prompt_tokens"] for r in rows)
    return sum(r["ideal_cached_tokens"] for r in rows) / sent if sent else None


def warm_cache_guard(records: Sequence[dict]) -> dict:
    """Each session's first request (warm-up included: it is what meets a cache left by an
    earlier run) may not hit more than this run could have cached before it, plus the chat
    template and a small slack. A failure means the run marker did not isolate the run."""
    first: dict[str, dict] = {}
    for r in records:
        if r.get("status") != "ok" or r.get("cached_tokens") is None:
            continue
        sid = str(r.get("session_id"))
        if sid not in first or r.get("turn", 0) < first[sid].get("turn", 0):
            first[sid] = r
    suspects = []
    for sid, r in sorted(first.items()):
        template = max(0, (r.get("prompt_tokens") or 0) - (r.get("sent_prompt_tokens") or 0))
        allowed = (r.get("ideal_cached_tokens") or 0) + template + WARM_SLACK_TOKENS
        if r.get("ideal_cached_tokens") is not None and r["cached_tokens"] > allowed:
            suspects.append({"session_id": sid, "turn": r.get("turn"),
                             "cached_tokens": r["cached_tokens"], "allowed_tokens": allowed})
    checked = sum(1 for r in first.values() if r.get("ideal_cached_tokens") is not None)
    return {"checked_sessions": checked, "suspect_sessions": len(suspects),
            "passed": None if not checked else not suspects, "suspects": suspects[:5]}
