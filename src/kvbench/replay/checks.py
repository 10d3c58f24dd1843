"""What the records say about whether to believe a run: the prompt sizes the client meant
against the server's usage, the ideal-cache ceiling against the hits the engine reported, and
the warm-cache guard (no session's first request may hit KV that this run never sent)."""

from __future__ import annotations

from collections.abc import Iterable

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


class PromptAgreement:
    """Sum of prompt tokens sent against the sum the server reported (requests with usage),
    one successful record at a time."""

    __slots__ = ("requests", "sent", "server")

    def __init__(self) -> None:
        self.requests = self.sent = self.server = 0

    def add(self, r: dict) -> None:
        if r.get("prompt_tokens") is not None and r.get("sent_prompt_tokens") is not None:
            self.requests += 1
            self.sent += r["sent_prompt_tokens"]
            self.server += r["prompt_tokens"]

    def result(self) -> dict:
        sent, server = self.sent, self.server
        deviation = (server - sent) / sent if sent else None
        allowed = max(PROMPT_TOLERANCE * sent, TEMPLATE_TOKENS_PER_REQUEST * self.requests)
        return {"requests": self.requests, "sent_tokens": sent, "server_tokens": server,
                "deviation": deviation, "tolerance": PROMPT_TOLERANCE,
                "template_tokens_per_request": TEMPLATE_TOKENS_PER_REQUEST,
                "agrees": None if deviation is None else abs(server - sent) <= allowed}


class IdealCeiling:
    """Hit rate an unlimited prefix cache would reach on the requests sent (replay/ideal.py),
    one successful record at a time."""

    __slots__ = ("ideal", "sent")

    def __init__(self) -> None:
        self.ideal = self.sent = 0

    def add(self, r: dict) -> None:
        if r.get("ideal_cached_tokens") is not None and r.get("sent_prompt_tokens"):
            self.ideal += r["ideal_cached_tokens"]
            self.sent += r["sent_prompt_tokens"]

    def result(self) -> float | None:
        return self.ideal / self.sent if self.sent else None


class WarmGuard:
    """Each session's first request (warm-up included: it is what meets a cache left by an
    earlier run) may not hit more than this run could have cached before it, plus the chat
    template and a small slack. A failure means the run marker did not isolate the run. Keeps
    one small record per session, whatever the run's length."""

    _KEEP = ("turn", "cached_tokens", "prompt_tokens", "sent_prompt_tokens",
             "ideal_cached_tokens")

    def __init__(self) -> None:
        self.first: dict[str, dict] = {}

    def add(self, r: dict) -> None:
        if r.get("status") != "ok" or r.get("cached_tokens") is None:
            return
        sid = str(r.get("session_id"))
        seen = self.first.get(sid)
        if seen is None or r.get("turn", 0) < seen.get("turn", 0):
            self.first[sid] = {k: r.get(k) for k in self._KEEP}

    def result(self) -> dict:
        suspects = []
        for sid, r in sorted(self.first.items()):
            template = max(0, (r.get("prompt_tokens") or 0) - (r.get("sent_prompt_tokens") or 0))
            allowed = (r.get("ideal_cached_tokens") or 0) + template + WARM_SLACK_TOKENS
            if r.get("ideal_cached_tokens") is not None and r["cached_tokens"] > allowed:
                suspects.append({"session_id": sid, "turn": r.get("turn"),
                                 "cached_tokens": r["cached_tokens"], "allowed_tokens": allowed})
        checked = sum(1 for r in self.first.values() if r.get("ideal_cached_tokens") is not None)
        return {"checked_sessions": checked, "suspect_sessions": len(suspects),
                "passed": None if not checked else not suspects, "suspects": suspects[:5]}


def _fed(acc, records: Iterable[dict]):
    for r in records:
        acc.add(r)
    return acc.result()


def prompt_agreement(ok: Iterable[dict]) -> dict:
    return _fed(PromptAgreement(), ok)


def ideal_hit_rate(ok: Iterable[dict]) -> float | None:
    return _fed(IdealCeiling(), ok)


def warm_cache_guard(records: Iterable[dict]) -> dict:
    return _fed(WarmGuard(), records)
