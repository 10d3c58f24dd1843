"""The GPU KV pool in tokens as InferenceX's aggregator reads it from a server's start-up log:
what `kv_cache_pool_tokens` and `server_metrics.kv_cache.gpu_total_tokens` report.

- SGLang prints `max_total_num_tokens=N` once per scheduler; lines tagged `DP<d> TP<t> EP<e>`
  count once per tag, and a single pool is multiplied by the `dp_size=` the log prints
  (InferenceX 843c6254f, utils/agentic/aggregation/backends/sglang.py:133-174).
- vLLM prints `GPU KV cache size: N tokens` per engine core, tagged `(EngineCore[_DP<n>]
  pid=...)`: one per tag, summed (backends/vllm.py:22-25, :201-234).
- ATOM's aggregator backend reads no log (backends/base.py:70-75)."""

from __future__ import annotations

import re

_SGLANG_TOKENS = re.compile(r"\bmax_total_num_tokens=(\d+)\b")
_SGLANG_RANK = re.compile(r"\b(DP\d+\s+TP\d+\s+EP\d+)\b")
_SGLANG_DP = re.compile(r"\bdp_size=(\d+)\b")
_VLLM_TOKENS = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_VLLM_CORE = re.compile(r"\((EngineCore(?:_DP\d+)?)\s+pid=\d+\)")


def _sglang(text: str) -> int | None:
    dp_match = _SGLANG_DP.search(text)
    dp = int(dp_match.group(1)) if dp_match and int(dp_match.group(1)) > 0 else None
    tagged: dict[str, int] = {}
    bare: list[int] = []
    for line in text.splitlines():
        found = _SGLANG_TOKENS.search(line)
        if not found or int(found.group(1)) <= 0:
            continue
        tag = _SGLANG_RANK.search(line)
        if tag:
            tagged[tag.group(1)] = int(found.group(1))
        else:
            bare.append(int(found.group(1)))
    pools = list(tagged.values()) or bare
    if not pools:
        return None
    if len(pools) == 1 and dp is not None and dp > 1:
        return pools[0] * dp
    return sum(pools)


def _vllm(text: str) -> int | None:
    tagged: dict[str, int] = {}
    bare: list[int] = []
    for line in text.splitlines():
        found = _VLLM_TOKENS.search(line)
        if not found:
            continue
        tokens = int(found.group(1).replace(",", ""))
        if tokens <= 0:
            continue
        core = _VLLM_CORE.search(line)
        if core:
            tagged[core.group(1)] = tokens
        else:
            bare.append(tokens)
    pools = list(tagged.values()) or bare
    return sum(pools) if pools else None


def pool_tokens(log_text: str | None, backend: str | None) -> int | None:
    """The pool the log states for the aggregator backend `backend` (sglang, vllm,
    dynamo-vllm), or None."""
    if not log_text:
        return None
    if backend == "sglang":
        return _sglang(log_text)
    if backend in ("vllm", "dynamo-vllm"):
        return _vllm(log_text)
    return None
