"""Results of several run-option sets side by side: each set named by the options that tell
it apart (`max_requests=85` vs `max_requests=10`), never by its digest alone.

A results directory holding two experiments (the quickstart's runs beside a `kvbench run` of
the same recipe with another bound) showed arms named `[options 85280469f0b1]`, with nothing
saying what differed (issue 39). A result carries the measurement identity its options_id is
the digest of (`run_options`); a result written before it keeps the digest."""

from __future__ import annotations

from typing import Any

from kvbench.results.schema import Result

MAX_VALUE_CHARS = 60


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        text = " ".join(map(str, value)) or "[]"
    elif isinstance(value, dict):
        text = ",".join(f"{k}={_shown(v)}" for k, v in sorted(value.items())) or "{}"
    else:
        text = str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 1] + "…"


def option_labels(results: list[Result]) -> dict[str | None, str]:
    """options_id -> the options that set it apart from the others in `results` (empty with
    a single set: nothing to tell apart)."""
    sets: dict[str | None, dict | None] = {}
    for r in results:
        if r.options_id not in sets or sets[r.options_id] is None:
            sets[r.options_id] = r.run_options
    if len(sets) < 2:
        return {}
    known = [o for o in sets.values() if o is not None]
    keys = sorted({k for o in known for k in o})
    # told apart on the whole value: two engine-argument lists can differ past the cut
    differing = [k for k in keys if len({repr(o.get(k)) for o in known}) > 1]
    labels = {}
    for options_id, opts in sets.items():
        named = " ".join(_differing(k, opts.get(k), [o.get(k) for o in known])
                         for k in differing) if opts else ""
        labels[options_id] = named or f"options {options_id or 'unknown'}"
    return labels


def _differing(key: str, value: Any, values: list[Any]) -> str:
    """`key=value`; a list among lists by its own items (`engine_args+=--page-size=16`), or
    the items the others have and it lacks (`engine_args-=--page-size=16`): the resident
    twin's one extra engine flag reads as that flag (issue 37), not as a cut-off list."""
    if not isinstance(value, list) or not all(isinstance(v, list) for v in values):
        return f"{key}={_shown(value)}"
    common = [x for x in value if all(x in v for v in values)]
    own = [x for x in value if x not in common]
    if own:
        return f"{key}+={_shown(own)}"
    lacking = [x for v in values for x in v if x not in value]
    return f"{key}-={_shown(list(dict.fromkeys(map(str, lacking))))}"
