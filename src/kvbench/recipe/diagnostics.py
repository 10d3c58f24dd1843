"""Turn pydantic validation errors into one line per problem that a recipe author can act on:
where (file, line, config key, YAML path), what was found, and what is allowed."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kvbench.errors import shown as _bounded
from kvbench.recipe.fields import SCENARIO_TYPES
from kvbench.recipe.rules import RuleError

Loc = tuple[str | int, ...]

_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def format_path(key: str, loc: Loc) -> str:
    """`key.agentic-coding[0].search-space[2].tp`; the `scenarios` level is implied."""
    out = key
    parts = list(loc)
    if len(parts) > 1 and parts[0] == "scenarios" and parts[1] in SCENARIO_TYPES:
        parts = parts[1:]
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _unwrap(annotation: Any) -> Any:
    """Strip `X | None` down to X."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return annotation


def _field_by_key(model: type[BaseModel], key: str | int) -> Any:
    for name, field in model.model_fields.items():
        if key in (field.alias, name):
            return field.annotation
    return None


def annotation_at(root: type[BaseModel], loc: Loc) -> Any:
    """The type the schema expects at `loc` below `root` (None if the path leaves it)."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            current = _field_by_key(current, part)
        elif origin is list and isinstance(part, int):
            current = get_args(current)[0]
        elif origin is dict:
            current = get_args(current)[1]
        else:
            return None
        if current is None:
            return None
    return _unwrap(current)


def allowed_keys(root: type[BaseModel], loc: Loc) -> list[str]:
    model = annotation_at(root, loc)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or n for n, f in model.model_fields.items()]
    return []


def allowed_values(root: type[BaseModel], loc: Loc) -> list[Any]:
    annotation = annotation_at(root, loc)
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return []


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return _bounded(value)  # never the repr of a huge (alias-expanded) value


def closest(word: Any, choices: list[Any]) -> str | None:
    """The valid choice a typo most likely meant: difflib, else a shared prefix."""
    if not isinstance(word, str) or not word:
        return None
    names = [str(c) for c in choices]
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if close:
        return close[0]
    prefixed = [n for n in names if n.startswith(word) or word.startswith(n)]
    return prefixed[0] if len(prefixed) == 1 else None


def _suggest(word: Any, choices: list[Any]) -> str:
    match = closest(word, choices)
    return f"; did you mean {match!r}?" if match else ""


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe(root: type[BaseModel], error: dict[str, Any]) -> tuple[Loc, str]:
    """The full path and the message for one pydantic error dict."""
    loc: Loc = tuple(error["loc"])
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        parent, key = loc[:-1], loc[-1]
        keys = allowed_keys(root, parent)
        return loc, (
            f"unknown key {_show(key)}{_suggest(key, keys)} (allowed keys: {', '.join(keys)})"
        )
    if kind == "missing":
        return loc, f"required key {loc[-1]!r} is missing"
    if kind in ("literal_error", "enum"):
        allowed = allowed_values(root, loc)
        shown = ", ".join(_show(a) for a in allowed) or ctx.get("expected", "?")
        return loc, f"{_show(value)} is not allowed (allowed: {shown}){_suggest(value, allowed)}"
    if kind in _TYPE_WORDS:
        return loc, f"expected {_TYPE_WORDS[kind]}, got {_show(value)} ({type(value).__name__})"
    if kind == "value_error" and isinstance(ctx.get("error"), RuleError):
        rule = ctx["error"]
        return (*loc, *rule.loc), str(rule)
    if kind in ("value_error", "assertion_error"):
        return loc, str(ctx.get("error", error["msg"]))
    bounds = {
        "greater_than": "> {gt}",
        "greater_than_equal": ">= {ge}",
        "less_than": "< {lt}",
        "less_than_equal": "<= {le}",
        "string_too_short": "at least {min_length} character(s) long",
        "too_short": "at least {min_length} item(s) long",
    }
    if kind in bounds:
        shown = {k: _num(v) for k, v in ctx.items()}
        return loc, f"must be {bounds[kind].format(**shown)}, got {_show(value)}"
    return loc, f"{error['msg']} (got {_show(value)})"


def messages(
    root: type[BaseModel], exc: ValidationError, key: str, where: typing.Callable[[Loc], str]
) -> list[str]:
    """One line per error: `WHERE: KEY.PATH: message`; `where(loc)` names file and line."""
    errors = exc.errors(include_url=False)
    # A misspelt required key shows up twice (unknown + missing); report it once.
    missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing"}
    renamed = set()
    for e in errors:
        if e["type"] == "extra_forbidden":
            parent = tuple(e["loc"][:-1])
            match = closest(e["loc"][-1], allowed_keys(root, parent))
            if match is not None and (*parent, match) in missing:
                renamed.add((*parent, match))
    out = []
    for error in errors:
        if error["type"] == "missing" and tuple(error["loc"]) in renamed:
            continue
        loc, text = describe(root, error)
        if error["type"] == "extra_forbidden" and (*loc[:-1], closest(loc[-1], allowed_keys(
                root, loc[:-1]))) in renamed:
            text += " (the required key is missing)"
        out.append(f"{where(loc)}: {format_path(key, loc)}: {text}")
    return out
