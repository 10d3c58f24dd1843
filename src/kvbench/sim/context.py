"""A prompt longer than the model's context is refused before it is scheduled, with the
engine's 400 (vLLM 0.26 renderers/params.py `_token_len_check`: prompt + requested output
tokens over max_model_len). A GPU KV pool smaller than one request is the same refusal: vLLM
does not start with a max_model_len whose KV exceeds the pool (v1/core/kv_cache_utils.py,
check_enough_kv_cache_memory), so such a prompt is over any context that server can have.
These refusals are counted apart from failures ("rejected: context")."""

from __future__ import annotations

CONTEXT_REJECTION = "rejected: context"


def context_error(context_tokens: int, prompt_tokens: int, output_tokens: int,
                  why: str = "") -> str:
    """The refusal as the engine words it (vLLM's message), prefixed for counting."""
    total = prompt_tokens + output_tokens
    return (f"{CONTEXT_REJECTION}: This model's maximum context length is {context_tokens} "
            f"tokens. However, you requested {output_tokens} output tokens and your prompt "
            f"contains {prompt_tokens} input tokens, for a total of {total} tokens{why}.")


def over_context(context_tokens: int | None, prompt_tokens: int, output_tokens: int) -> bool:
    return context_tokens is not None and prompt_tokens + output_tokens > context_tokens


def is_context_rejection(error: str | None) -> bool:
    return error is not None and error.startswith(CONTEXT_REJECTION)
