"""Secrets never reach a file: environment variables and argv values named like secrets are
replaced before `env.json` and `command.json` are written or a dry run is printed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "<redacted>"

# A name is secret when one of these words ends it (HF_TOKEN, OPENAI_API_KEY) or comes just
# before an ID/VALUE suffix (MODAL_TOKEN_ID). Names that merely contain the word in the middle
# (SGLANG_SIMULATE_ACC_TOKEN_MODE, ..._ROUTING_KEY_FROM_CORRELATION_ID) are configuration and
# must stay readable, or the recorded command would not replay.
_TRAILING = {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PWD",
             "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE"}
_ANYWHERE = {"SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "APIKEY"}
_ID_SUFFIX = {"ID", "VALUE", "B64", "BASE64", "FILE"}
# Counts and sizes of tokens are configuration (--max-prefill-tokens, ..._NUM_DRAFT_TOKEN).
_COUNT_WORDS = {"NUM", "MAX", "MIN", "SIZE", "COUNT", "LEN", "LENGTH", "LIMIT", "RATIO"}
# Values shaped like well-known credentials are hidden whatever their name.
_VALUE_RE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,})$")


def is_secret_name(name: str) -> bool:
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name.upper()) if p]
    if not parts:
        return False
    if any(p in _ANYWHERE for p in parts):
        return True
    if any(p in _COUNT_WORDS for p in parts):
        return False
    if parts[-1] in _TRAILING:
        return True
    return len(parts) >= 2 and parts[-1] in _ID_SUFFIX and parts[-2] in _TRAILING - {"KEY"}


def is_secret_value(value: str) -> bool:
    return bool(_VALUE_RE.match(value))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` with secret-named or secret-looking values replaced."""
    return {
        k: REDACTED if is_secret_name(k) or is_secret_value(str(v)) else str(v)
        for k, v in env.items()
    }


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of `argv` with the value after a secret-named flag (`--api-key X`,
    `--hf-token=X`) and any credential-shaped token replaced."""
    out: list[str] = []
    hide_next = False
    for tok in argv:
        if hide_next and not tok.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if tok.startswith("-") and "=" in tok:
            flag, _, value = tok.partition("=")
            secret = is_secret_name(flag) or is_secret_value(value)
            out.append(f"{flag}={REDACTED}" if secret else tok)
            continue
        if tok.startswith("--") and is_secret_name(tok):
            hide_next = True
        out.append(REDACTED if is_secret_value(tok) else tok)
    return out
