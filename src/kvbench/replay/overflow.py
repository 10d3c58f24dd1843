"""A context overflow: the server refused a prompt longer than its context window. Counted
apart from failures, as InferenceX's replay client does (SemiAnalysisAI/agentx-harness
src/aiperf/common/environment.py `_AgentXSettings`, de0e17de): an error response whose body
names the limit in one of these words, compared case-insensitively. vLLM words it "This
model's maximum context length is N tokens" (0.33.0 renderers/params.py `_token_len_check`),
SGLang "... exceeds the model's context length (N tokens)" (0.5.23
srt/managers/tokenizer_manager.py `_validate_one_request`)."""

from __future__ import annotations

CONTEXT_OVERFLOW = "context_overflow"  # the records' error_kind
CONTEXT_OVERFLOW_WORDS = ("context length", "maximum context", "context_length_exceeded",
                          "prompt is too long")


def is_context_overflow(body: str) -> bool:
    text = body.lower()
    return any(w in text for w in CONTEXT_OVERFLOW_WORDS)
