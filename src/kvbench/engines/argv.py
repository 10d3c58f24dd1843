"""An ordered set of flags (or env variables) where each value remembers its source and a
value from a stronger source replaces a weaker one: default < job < plan < override."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kvbench.engines.spec import ArgSource, Kind, Source
from kvbench.errors import EngineError

RANK: dict[str, int] = {"default": 0, "job": 1, "plan": 2, "override": 3}


def render_value(value: Any) -> str:
    """How a YAML/Python value is spelled on a command line: dicts as compact JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else repr(value)
    return str(value)


@dataclass(slots=True)
class _Entry:
    name: str
    value: Any  # True = bare flag; list = several tokens; dict = JSON (merged across rules)
    source: Source
    detail: str
    shadowed: list[str] = field(default_factory=list)


class Settings:
    """Flags or environment variables with provenance, in first-set order."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry] = {}

    def set(self, name: str, value: Any, source: Source, detail: str = "") -> None:
        """Set `name`; `None`/`False` removes a bare flag. Dict values merge key by key
        (a model rule can add `synthetic_acceptance_length` to a common speculative config),
        nested dicts too (a connector's kv_connector_extra_config)."""
        old = self._entries.get(name)
        if old is not None and RANK[source] < RANK[old.source]:
            old.shadowed.append(f"{render_value(value)} ({source}: {detail})")
            return
        if isinstance(value, dict) and old is not None and isinstance(old.value, dict):
            value = _merged(old.value, value)
        entry = _Entry(name, value, source, detail)
        if old is not None:
            entry.shadowed = [*old.shadowed, f"{render_value(old.value)} ({old.source}: "
                              f"{old.detail})"]
        self._entries[name] = entry

    def get(self, name: str) -> Any:
        entry = self._entries.get(name)
        return None if entry is None else entry.value

    def __contains__(self, name: str) -> bool:
        entry = self._entries.get(name)
        return entry is not None and entry.value not in (None, False)

    def rename(self, old: str, new: str, detail: str) -> None:
        entry = self._entries.pop(old, None)
        if entry is None:
            return
        entry.name = new
        entry.detail = f"{entry.detail}; renamed from {old} ({detail})"
        self._entries[new] = entry

    def set_tokens(self, tokens: list[str], source: Source, detail: str) -> None:
        """Merge a raw argv fragment (`--a 1 --flag --b=x`) flag by flag."""
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if not tok.startswith("-"):
                raise EngineError(f"{detail}: expected a flag at {tok!r} in {tokens}",
                                  hint="write engine arguments as `--flag value` pairs")
            if "=" in tok:
                name, _, value = tok.partition("=")
                self.set(name, value, source, detail)
                i += 1
                continue
            values = []
            i += 1
            while i < len(tokens) and not _is_flag(tokens[i]):
                values.append(tokens[i])
                i += 1
            value: Any = True if not values else values[0] if len(values) == 1 else values
            self.set(tok, value, source, detail)

    def argv(self) -> list[str]:
        out: list[str] = []
        for e in self._entries.values():
            if e.value is None or e.value is False:
                continue
            out.append(e.name)
            if e.value is True:
                continue
            if isinstance(e.value, list):
                out += [render_value(v) for v in e.value]
            else:
                out.append(render_value(e.value))
        return out

    def env(self) -> dict[str, str]:
        return {e.name: render_value(e.value) for e in self._entries.values()
                if e.value is not None and e.value is not False}

    def sources(self) -> list[ArgSource]:
        out = []
        for e in self._entries.values():
            if e.value is None or e.value is False:
                value = None if not e.shadowed else "(removed)"
                if value is None:
                    continue
            elif e.value is True:
                value = None
            elif isinstance(e.value, list):
                value = " ".join(render_value(v) for v in e.value)
            else:
                value = render_value(e.value)
            out.append(ArgSource(flag=e.name, value=value, source=e.source, kind=self.kind,
                                 detail=e.detail, shadowed=list(e.shadowed)))
        return out


def _merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for key, value in new.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def _is_flag(tok: str) -> bool:
    """`--x` is a flag; `-1` or `-0.5` is a negative number value."""
    if not tok.startswith("-"):
        return False
    try:
        float(tok)
    except ValueError:
        return True
    return False
