"""Secrets never reach a file: redaction by name and by value.

By name: environment variables and flags named like secrets (HF_TOKEN, `--api-key X`,
`--auth-header=X`). By value: strings shaped like credentials wherever they occur (in argv,
env values, log lines, result fields), whatever they are called: credentials in URLs
(`scheme://user:pass@host`), provider tokens (`sk-`, `hf_`, `github_pat_`, `ghp_`, `xoxb-`,
`glpat-`, `AIza`), JWTs, chat webhook URLs, `Authorization: Bearer ...`, `api_key='...'`
as engines print their arguments and `"api_key": "..."` / `X-Api-Key: ...` inside JSON or
header values. By memory: a value once hidden by name (an engine's `--api-key X`, HF_TOKEN's
value, the replay's bearer token) is remembered for the rest of the process with its
encodings (reversed, base64, hex, URL-quoted), so a server or log that echoes it, however
spelt, is redacted too. Every file kvbench writes that could hold one goes through here
(command.json, env.json, job.json, result.json, records.jsonl errors, the lock, the
dashboard); the shapes are the providers' documented token formats.

Every pattern runs in time linear in the text: each one that starts with a run of word
characters is anchored by a look-behind (it can begin only where such a run begins) or has a
bounded repeat, so an 80,000-character value costs what reading it costs."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"

# A name is secret when one of these words ends it (HF_TOKEN, OPENAI_API_KEY) or comes just
# before an ID/VALUE suffix (MODAL_TOKEN_ID). Names that merely contain the word in the middle
# (SGLANG_SIMULATE_ACC_TOKEN_MODE, ..._ROUTING_KEY_FROM_CORRELATION_ID) are configuration and
# must stay readable, or the recorded command would not replay.
_TRAILING = {"TOKEN", "KEY", "KEYS", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PWD",
             "CREDENTIAL", "CREDENTIALS", "CRED", "CREDS", "AUTH", "COOKIE", "AUTHORIZATION",
             "PASSPHRASE"}
_ANYWHERE = {"SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "CRED",
             "CREDS", "APIKEY", "AUTHORIZATION", "PASSPHRASE"}
# A secret word followed by one of these still names the secret itself, in another encoding
# or container (MODAL_TOKEN_ID, X_TOKEN_LIST, PRIVATE_KEY_PEM).
_ID_SUFFIX = {"ID", "VALUE", "B64", "BASE64", "HEADER", "LIST", "PEM", "DER", "JSON", "STR",
              "STRING", "TEXT", "DATA", "HEX", "RAW", "CONTENT", "CONTENTS", "BLOB"}
# ...except a path to it (SSL_KEY_FILE names where a key lies, not the key) and a key that is
# a lookup name (ROUTING_KEY): only a PRIVATE key is secret wherever KEY stands.
_PATH_SUFFIX = {"FILE", "PATH", "DIR"}
# Counts and sizes of tokens are configuration (--max-prefill-tokens, ..._NUM_DRAFT_TOKEN).
_COUNT_WORDS = {"NUM", "MAX", "MIN", "SIZE", "COUNT", "LEN", "LENGTH", "LIMIT", "RATIO"}
# A KEY after one of these words is a lookup name, not a credential: kvbench's own
# `--config-keys` (which recipe entries to run: hidden, it was remembered as a secret and every
# job.json and result.json named its config key `<redacted>`, so a later `kvbench run` into the
# same results took the job's directory for another job's and ran it again, issue 37 call 5),
# a router's ROUTING_KEY, a SORT_KEY.
_LOOKUP_WORDS = {"CONFIG", "ROUTING", "SORT", "PARTITION", "SHARD", "LOOKUP", "PRIMARY",
                 "FOREIGN", "INDEX", "GROUP"}

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
# a key named like a secret, inside JSON (`"api_key": "x"`), a header (`X-Api-Key: x`) or an
# assignment (`hf_token=x`): the name is judged by is_secret_name, so one rule covers them all;
# the name's repeat is bounded and look-behind anchored (linear in the text). Nothing stands
# between the name and its `:`/`=`: prose ("offloaded tokens = per-rank bytes") is no
# assignment.
_KEYED = re.compile(r"(?<![A-Za-z0-9_\-])([A-Za-z_][A-Za-z0-9_\-]{0,63})([\"']?[:=]\s{0,8})"
                    r"(\"[^\"\n]{1,4096}\"|'[^'\n]{1,4096}'|[^\s,;)}\]\"']{1,4096})")
_PLAIN_VALUE = re.compile(r"^[\"']?(?:[-+0-9.eE]+|true|false|none|null|nan|inf|<redacted>)?[\"']?$",
                          re.IGNORECASE)
_IN_TEXT = [
    (re.compile(rf"(?<![A-Za-z0-9_\-])(?:{_TOKEN})"), REDACTED),
    (re.compile(_WEBHOOK), REDACTED),
    # a credential in a URL's query (?api_key=..., &token=...)
    (re.compile(r"(?i)([?&;](?:api[_\-]?key|key|token|access[_\-]?token|auth|auth[_\-]?token|"
                r"password|passwd|secret|sig|signature|x-amz-signature|x-amz-credential)=)"
                r"(?!<redacted>)[^&#\s\"'<>]+"), rf"\1{REDACTED}"),
    # user:password@ in any URL (the user name stays: it says which account); the scheme
    # starts only where a run of scheme characters starts (else quadratic on long runs)
    (re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*):[^\s@/\"'<>]+@"),
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
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name.upper()[:256]) if p]
    if not parts:
        return False
    if any(p in _ANYWHERE for p in parts):
        return True
    if any(p in _COUNT_WORDS for p in parts):
        return False
    if parts[-1] in ("KEY", "KEYS") and len(parts) >= 2 and parts[-2] in _LOOKUP_WORDS:
        return False
    if parts[-1] in _TRAILING:
        return True
    if parts[-1] in _PATH_SUFFIX:
        return False
    if "PRIVATE" in parts and ("KEY" in parts or "KEYS" in parts):
        return True
    return len(parts) >= 2 and parts[-1] in _ID_SUFFIX and (
        parts[-2] in _TRAILING - {"KEY", "KEYS"} or parts[-2:] == ["KEY", "PEM"])


def is_secret_value(value: str) -> bool:
    return (len(value) <= 8192 and bool(_VALUE_RE.match(value))) or value in _REMEMBERED


# Secrets seen by name in this process, with the spellings a server or log could echo them
# in. Short values are not remembered: a 3-character "key" would redact every word holding it.
_REMEMBERED: set[str] = set()
_MIN_REMEMBERED = 8


def remember_secret(value: str) -> None:
    """Hide `value` (and its reversed, base64, hex and URL-quoted spellings) wherever text is
    redacted from now on in this process."""
    value = value.strip()
    if len(value) < _MIN_REMEMBERED or value == REDACTED or len(value) > 8192:
        return
    raw = value.encode("utf-8", "surrogateescape")
    spellings = {value, value[::-1], urllib.parse.quote(value, safe=""),
                 binascii.hexlify(raw).decode()}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(raw).decode()
        spellings |= {text, text.rstrip("=")}
    _REMEMBERED.update(x for x in spellings if len(x) >= _MIN_REMEMBERED)


def _forget_all() -> None:  # tests only
    _REMEMBERED.clear()


def _keyed(m: re.Match) -> str:
    name, sep, value = m.groups()
    if not is_secret_name(name) or _PLAIN_VALUE.match(value):
        return m.group(0)  # max_tokens: 5, token: null: configuration, not a secret
    remember_secret(value.strip("\"'"))
    quote = value[0] if value[0] in "\"'" else ""
    return f"{name}{sep}{quote}{REDACTED}{quote}"


def redact_text(text: str) -> str:
    """`text` with every credential-shaped substring replaced."""
    if not text:
        return text
    for secret in sorted(_REMEMBERED, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _IN_TEXT:
        text = pattern.sub(replacement, text)
    return _KEYED.sub(_keyed, text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` with secret-named or secret-looking values replaced (the values hidden
    by name are remembered: an engine echoing one in its log is redacted too)."""
    out = {}
    for k, v in env.items():
        if is_secret_name(k) or is_secret_value(str(v)):
            remember_secret(str(v))
            out[k] = REDACTED
        else:
            out[k] = redact_text(str(v))
    return out


# kvbench's own options whose value is an engine argument (`--engine-arg '--api-key X'`,
# `--engine-arg --hf-token --engine-arg X`): their values are redacted as one engine argv.
_WRAPPERS = ("--engine-arg", "--engine-args")


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of `argv` with the value after a secret-named flag (`--api-key X`,
    `--hf-token=X`, `--engine-arg '--api-key X'`) and any credential-shaped token or
    substring replaced."""
    argv = [str(t) for t in argv]
    wrapped: dict[int, list[str]] = {}  # index of a wrapper's value -> its engine tokens
    for i, tok in enumerate(argv):
        if i > 0 and argv[i - 1] in _WRAPPERS and i - 1 not in wrapped:
            wrapped[i] = _split(tok)
    out = _redact_plain([t for i, t in enumerate(argv) if i not in wrapped], wrappers=True)
    if not wrapped:
        return out
    inner = _redact_plain([t for toks in wrapped.values() for t in toks])
    redacted: dict[int, str] = {}
    for i, toks in wrapped.items():
        mine, inner = inner[:len(toks)], inner[len(toks):]
        redacted[i] = argv[i] if mine == toks else (
            mine[0] if len(toks) == 1 else shlex.join(mine))
    plain = iter(out)
    return [redacted[i] if i in wrapped else next(plain) for i in range(len(argv))]


def _split(tok: str) -> list[str]:
    """An --engine-arg value as the engine receives it (cli/launch.py split_engine_args)."""
    if not tok.lstrip().startswith("-"):
        return [tok]
    try:
        return shlex.split(tok)
    except ValueError:
        return [tok]


def _redact_plain(argv: list[str], *, wrappers: bool = False) -> list[str]:
    out: list[str] = []
    hide_next = False
    for tok in argv:
        if wrappers and tok.startswith(tuple(f"{w}=" for w in _WRAPPERS)):
            flag, _, value = tok.partition("=")
            inner = _redact_plain(_split(value))
            out.append(tok if inner == _split(value) else f"{flag}={shlex.join(inner)}")
            continue
        if hide_next:
            # the whole next token is the secret flag's value, even one that starts with
            # `--` (a secret may; a secret flag never goes without its value); a second
            # secret flag there (`--api-key --api-key X`) hides the token after it too
            remember_secret(tok)
            out.append(REDACTED)
            hide_next = tok.startswith("-") and len(tok) > 2 and is_secret_name(tok)
            continue
        if tok.startswith("-") and "=" in tok:
            flag, _, value = tok.partition("=")
            secret = is_secret_name(flag) or is_secret_value(value)
            if secret:
                remember_secret(value)
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
