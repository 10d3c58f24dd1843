"""`append-only` entries: run only the points a change adds to existing curves.

InferenceX 843c6254f utils/process_changelog.py:269-397 (PR #2613). The scope rule compares
the master configs at base and head: only the entries' config keys may change, and of those
only the scenarios the entries name (config-wide fields only when every scenario is named).
The delta rule compares the generated rows: every curve (a row minus its concurrency and
name) and every concurrency of the base must still be there; the rows returned carry only the
added concurrencies, and each must extend a series whose one image is unchanged."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from kvbench.errors import ChangelogError
from kvbench.matrix.evals import frozen
from kvbench.matrix.fingerprint import POINT_FIELDS


def curve_key(row: Mapping, ignored: Iterable[str] = POINT_FIELDS) -> tuple:
    """A row without its point-level fields: the curve it is a point of."""
    skip = set(ignored)
    return tuple(sorted((k, frozen(v)) for k, v in row.items() if k not in skip))


def _series_key(row: Mapping) -> tuple:
    """The dashboard series a row is drawn in (process_changelog.py:236-257)."""
    agentic = row.get("scenario-type") == "agentic-coding"
    offload = "off" if row.get("kv-offloading", "none") in (None, "", "none") else "on"
    prefill, decode = row.get("prefill") or {}, row.get("decode") or {}
    return (row.get("model"), row.get("model-prefix"), row.get("precision"),
            row.get("framework"), row.get("runner"), bool(row.get("disagg", False)),
            "agentic_traces" if agentic else "single_turn",
            None if agentic else row.get("isl"), None if agentic else row.get("osl"), offload,
            "" if agentic else row.get("spec-decoding", "none"),
            prefill.get("hardware"), decode.get("hardware"))


def _concurrencies(row: Mapping) -> tuple[int, ...]:
    conc = row.get("conc")
    if isinstance(conc, int) and not isinstance(conc, bool):
        return (conc,)
    if isinstance(conc, list) and conc and all(isinstance(c, int) for c in conc):
        return tuple(conc)
    raise ChangelogError(f"append-only: row {row.get('exp-name')!r} has no valid concurrency "
                         f"(got {conc!r})")


def delta_rows(base_rows: list[dict], head_rows: list[dict]) -> list[dict]:
    """The head rows restricted to concurrencies the base does not have."""
    base: dict[tuple, set[int]] = defaultdict(set)
    head: dict[tuple, set[int]] = defaultdict(set)
    for row in base_rows:
        base[curve_key(row)].update(_concurrencies(row))
    for row in head_rows:
        head[curve_key(row)].update(_concurrencies(row))
    if not base:
        raise ChangelogError("append-only needs an existing curve at the base revision; the "
                             "named keys generate no rows there",
                             hint="drop append-only: a new curve runs as a regular entry")
    if base.keys() - head.keys():
        raise ChangelogError("append-only may not remove or modify an existing generated "
                             "recipe (a curve of the base revision is gone at head)",
                             hint="drop append-only to rerun the whole curve")
    for key, concs in base.items():
        if removed := concs - head[key]:
            raise ChangelogError(f"append-only may not remove existing concurrency points: "
                                 f"{sorted(removed)}")
    out: list[dict] = []
    emitted: dict[tuple, set[int]] = defaultdict(set)
    for row in head_rows:
        key = curve_key(row)
        added = head[key] - base.get(key, set())
        conc = row["conc"]
        if isinstance(conc, int):
            if conc in added and conc not in emitted[key]:
                out.append(row)
                emitted[key].add(conc)
            continue
        new = []
        for c in conc:
            if c in added and c not in emitted[key]:
                new.append(c)
                emitted[key].add(c)
        if new:
            out.append({**row, "conc": new})
    if not out:
        raise ChangelogError("append-only did not add any generated point",
                             hint="add a concurrency or a variant to the named configs")
    images: dict[tuple, set] = defaultdict(set)
    for row in base_rows:
        images[_series_key(row)].add(row.get("image"))
    for row in out:
        image = row.get("image")
        if image is None or images.get(_series_key(row), set()) != {image}:
            raise ChangelogError(
                f"append-only point {row.get('exp-name')!r} must extend an existing dashboard "
                f"curve with one unchanged image (base images "
                f"{sorted(map(str, images.get(_series_key(row), set())))}, row {image!r})")
    return out


def check_scope(base: Mapping[str, dict], head: Mapping[str, dict],
                selected: Mapping[str, set[str]]) -> None:
    """Refuse config edits outside the keys and scenarios the append-only entries name."""
    unrelated = sorted(k for k in base.keys() | head.keys()
                       if k not in selected and base.get(k) != head.get(k))
    if unrelated:
        raise ChangelogError(f"append-only change also edits configs its entries do not name: "
                             f"{unrelated}", hint="name them in an entry, or split the change")
    for key, allowed in selected.items():
        old, new = base[key], head[key]
        old_scenarios, new_scenarios = old.get("scenarios", {}), new.get("scenarios", {})
        if old_scenarios.keys() != new_scenarios.keys():
            raise ChangelogError(f"append-only added or removed a scenario in config {key!r}")
        outside = old_scenarios.keys() - allowed
        top = ({k: v for k, v in old.items() if k != "scenarios"},
               {k: v for k, v in new.items() if k != "scenarios"})
        if outside and top[0] != top[1]:
            raise ChangelogError(f"append-only changed config-wide fields of {key!r}, which "
                                 f"also reach its scenarios outside the entry: "
                                 f"{sorted(outside)}")
        for scenario in outside:
            if old_scenarios[scenario] != new_scenarios[scenario]:
                raise ChangelogError(f"append-only changed scenario {scenario!r} of {key!r}, "
                                     f"which its entry does not name")
