"""Secrets never reach a file: redaction by name and by value.

By name: environment variables and flags named like secrets (HF_TOKEN, `--api-key X`,
`--auth-header=X`). By value: strings shaped like credentials wherever they occur (in argv,
env values, log lines, result fields), whatever they are called: credentials in URLs
(`scheme://user:pass@host`), provider tokens (`sk-`, `hf_`, `github_pat_`, `ghp_`, `xoxb-`,
`glpat-`, `AIza`), JWTs, chat webhook URLs, `Authorization: Bearer ...` and `api_key='...'`
as engines print their arguments. Every file kvbench writes that could hold one goes through
here (command.json, env.json, job.json, result.json, the dashboard); the shapes are the
providers' documented token formats."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"

# A name is secret when one of these words ends it (HF_TOKEN, OPENAI_API_KEY) or comes just
# before an ID/VALUE suffix (MODAL_TOKEN_ID). Names that merely contain the word in the middle
# (SGLANG_SIMULATE_ACC_TOKEN_MODE, ..._ROUTING_KEY_FROM_CORRELATION_ID) are configuration and
# must stay readable, or the recorded command would not replay.
_TRAILING = {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PWD",
             "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "AUTHORIZATION"}
_ANYWHERE = {"SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "APIKEY", "AUTHORIZATION"}
_ID_SUFFIX = {"ID", "VALUE", "B64", "BASE64", "FILE", "HEADER"}
# Counts and sizes of tokens are configuration (--max-prefill-tokens, ..._NUM_DRAFT_TOKEN).
_COUNT_WORDS = {"NUM", "MAX", "MIN", "SIZE", "COUNT", "LEN", "LENGTH", "LIMIT", "RATIO"}

# Credential shapes (each provider's documented prefix and alphabet).
_TOKEN = (
    r"hf_[A-Za-z0-9]{20,}"
    r"|sk-(?:ant-|proj-|live_|test_)?[A-Za-z0-9_\-]{16,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT
)
_WEBHOOK = (
    r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)"
    r"|(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks"
    r"|[A-Za-z0-9\-]+\.webhook\.office\.com"
    r"|chat\.googleapis\.com/v1/spaces)/[^\s\"'<>]+"
)
_VALUE_RE = re.compile(rf"^(?:{_TOKEN})$")
_IN_TEXT = [
    (re.compile(rf"(?<![A-Za-z0-9_\-])(?:{_TOKEN})"), REDACTED),
    (re.compile(_WEBHOOK), REDACTED),
    # a credential in a URL's query (?api_key=..., &token=...)
    (re.compile(r"(?i)([?&;](?:api[_\-]?key|key|token|access[_\-]?token|auth|auth[_\-]?token|"
                r"password|passwd|secret|sig|signature|x-amz-signature|x-amz-credential)=)"
                r"(?!<redacted>)[^&#\s\"'<>]+"), rf"\1{REDACTED}"),
    # user:password@ in any URL (the user name stays: it says which account)
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*):[^\s@/\"'<>]+@"),
     rf"\1:{REDACTED}@"),
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)"
                r"[^\s\"',}]+"), rf"\1{REDACTED}"),
    # the value after a secret flag in a printed command line, log or argv list repr
    (re.compile(r"(?i)(--(?:api-key|auth-header|hf-token|admin-api-key|token|password|"
                r"secret|auth-token)(?:=|\s+|[\"'],\s*[\"']))(?!<redacted>)"
                r"(?:(?:bearer|basic|token)\s+)?(\"[^\"]*\"|'[^']*'|[^\s\"']+)"),
     rf"\1{REDACTED}"),
    # engines print their parsed arguments: api_key='...', hf_token="..."
    (re.compile(r"(?i)\b((?:api_key|admin_api_key|hf_token|auth_header|auth_token|"
                r"access_token|password|secret)\s*[=:]\s*)(?!None\b|null\b|<redacted>)"
                r"(\"[^\"]*\"|'[^']*'|[^\s,)}]+)"), rf"\1{REDACTED}"),
]


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


def redact_text(text: str) -> str:
    """`text` with every credential-shaped substring replaced."""
    if not text:
        return text
    for pattern, replacement in _IN_TEXT:
        text = pattern.sub(replacement, text)
    return text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` with secret-named or secret-looking values replaced."""
    return {
        k: REDACTED if is_secret_name(k) or is_secret_value(str(v)) else redact_text(str(v))
        for k, v in env.items()
    }


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of `argv` with the value after a secret-named flag (`--api-key X`,
    `--hf-token=X`) and any credential-shaped token or substring replaced."""
    out: list[str] = []
    hide_next = False
    for tok in map(str, argv):
        if hide_next:
            # the whole next token is the secret flag's value, even one that starts with
            # `--` (a secret may; a secret flag never goes without its value)
            out.append(REDACTED)
            hide_next = False
            continue
        if tok.startswith("-") and "=" in tok:
            flag, _, value = tok.partition("=")
            secret = is_secret_name(flag) or is_secret_value(value)
            out.append(f"{flag}={REDACTED}" if secret else redact_text(tok))
            continue
        # `--api-key X`, `-api-key X` (single-dash long flags), `-H X` with a header value
        # named below by redact_text
        if tok.startswith("-") and len(tok) > 2 and is_secret_name(tok):
            hide_next = True
        out.append(REDACTED if is_secret_value(tok) else redact_text(tok))
    return out


def _foreign_name(key: object) -> bool:
    """An environment variable (HF_TOKEN) or a flag (--api-key) used as a key. kvbench's own
    lower-case keys (config_key, max_tokens) are schema fields, never secrets by name."""
    return isinstance(key, str) and (key.startswith("-") or (key.upper() == key
                                                              and any(c.isalpha() for c in key)))


def redact_json(obj: Any) -> Any:
    """A copy of a JSON-shaped value for writing: values of secret-named environment
    variables and flags hidden, lists of strings redacted as argv (a flag's value follows
    it), every other string by value."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if _foreign_name(k) and is_secret_name(k)
                    and isinstance(v, str) and v else redact_json(v))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if obj and all(isinstance(x, str) for x in obj):
            return redact_argv(obj)
        return [redact_json(x) for x in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_file(path: Path) -> bool:
    """Rewrite a log file with credential-shaped text replaced (after its writer stopped),
    line by line and atomically; True if anything changed. Engines print their parsed
    arguments at start-up, API keys included."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.redacting")
    changed = False
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for raw in src:
                line = raw.decode("utf-8", errors="surrogateescape")
                clean = redact_text(line)
                changed |= clean != line
                dst.write(clean.encode("utf-8", errors="surrogateescape"))
        if changed:
            os.replace(tmp, path)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return changed
