"""The jobs a change asks for, as the document InferenceX's sweep workflow reads.

The steps of InferenceX 843c6254f utils/process_changelog.py:400-661, each with kvbench's own
generator (`kvbench.matrix`, equal to the reference's `test-config` row for row):

1. the added lines (diff.py) are YAML: a list of entries, each a valid `ChangelogEntry`;
   append-only entries never share a change with others nor take --all-evals/--evals-only;
2. each entry's keys resolve against the head's master configs (`*` is the one wildcard,
   matched over the whole key; any other character is literal; :138-156);
3. entries with `all-evals` first; per entry, the benchmark rows of each (key, scenario) not
   yet run (`--no-evals`), unless an eval flag suppresses throughput; for append-only entries
   only the delta against the base revision's rows (append_only.py); then, except for
   append-only entries, the eval rows (`--evals-only`, `--all-evals` when asked) of each
   (key, scenario) not yet evaluated, multi-node ones kept from `eval-min-prefill-ep` up;
4. `--trim-conc` (:70-115): a single-node curve keeps its lowest concurrency, a multi-node row
   keeps all its fields and only its lowest concurrency;
5. each benchmark row gets its `recipe-fingerprint` and goes to `single_node` or `multi_node`
   under its seq-len name or `agentic`; eval rows to the four eval buckets (search_space.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from kvbench.changelog.append_only import check_scope, curve_key, delta_rows
from kvbench.changelog.diff import AddedText
from kvbench.changelog.entry import SCENARIO_TYPES, ChangelogEntry, entry_model
from kvbench.changelog.keys import expand_keys
from kvbench.changelog.parse import changelog_error
from kvbench.changelog.search_space import E2eSearchSpace, SearchSpace, row_model
from kvbench.errors import ChangelogError, validation_message
from kvbench.matrix.fingerprint import recipe_fingerprint

AGENTIC = "agentic-coding"


@dataclass(frozen=True, slots=True)
class Revision:
    """The generator's inputs at one side of the change."""

    config_files: tuple[Path, ...]
    runner_config: Path


@dataclass(frozen=True, slots=True)
class JobFlags:
    """The workflow's modifiers (PR labels): `sweep-enabled` trims, `all-evals` and
    `evals-only` change every entry's eval selection (run-sweep.yml:296-349)."""

    trim_conc: bool = False
    all_evals: bool = False
    evals_only: bool = False


def added_entries(added: AddedText, layout: str = "classic"
                  ) -> tuple[list[dict], list[ChangelogEntry]]:
    """The added lines as YAML entries (raw mappings and models); every problem listed."""
    if not added.text.strip():
        raise ChangelogError("the change adds nothing to the changelog (CI refuses a change "
                             "without an added line)", hint="append an entry")
    try:
        data = yaml.safe_load(added.text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (added line {mark.line + 1})" if mark else ""
        raise ChangelogError(f"the added lines are not valid YAML{where}: "
                             f"{getattr(e, 'problem', None) or e}") from None
    if not data:
        raise ChangelogError("the added lines hold no YAML entry")
    if not isinstance(data, list):
        raise ChangelogError(f"the added lines must be entries ('- config-keys: ...'), got a "
                             f"YAML {type(data).__name__}: the change edits history or is not "
                             f"appended whole", hint="append whole entries at the end")
    model = entry_model(layout)
    problems, entries = [], []
    for i, raw in enumerate(data, 1):
        try:
            entries.append(model.model_validate(raw))
        except ValidationError as e:
            problems.append(validation_message(e, f"added entry {i}"))
    if problems:
        raise changelog_error("an added entry is invalid", problems)
    return data, entries


def _rows(revision: Revision, keys: list[str], scenarios: Sequence[str], *,
          evals: bool = False, all_evals: bool = False) -> list[dict]:
    from kvbench.matrix import Selection, generate_rows

    return generate_rows(Selection(
        config_files=revision.config_files, runner_config=revision.runner_config,
        scenario_types=tuple(scenarios), config_keys=tuple(keys), no_evals=not evals,
        evals_only=evals, all_evals=evals and all_evals))


def _master(revision: Revision) -> dict[str, dict]:
    from kvbench.recipe.cache import load_recipes

    entries, _ = load_recipes(revision.config_files, revision.runner_config)
    return {k: e.raw for k, e in entries.items()}


def _unseen(keys: list[str], scenarios: tuple[str, ...], seen: dict[str, set[str]]
            ) -> dict[tuple[str, ...], list[str]]:
    """Keys grouped by the scenarios of `scenarios` not yet run for them (marked run)."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for key in keys:
        todo = tuple(s for s in SCENARIO_TYPES if s in scenarios and s not in seen[key])
        if todo:
            seen[key].update(todo)
            groups[todo].append(key)
    return groups


def trim_conc(rows: list[dict]) -> list[dict]:
    """Each single-node curve at its lowest concurrency; multi-node rows at theirs."""
    out: list[dict] = []
    groups: dict[tuple, list[int]] = defaultdict(list)
    for row in rows:
        if row.get("prefill") is not None:
            conc = row.get("conc")
            out.append({**row, "conc": [min(conc)]} if isinstance(conc, list) and len(conc) > 1
                       else row)
            continue
        groups[curve_key(row, ("conc", "exp-name"))].append(len(out))
        out.append(row)
    drop = {i for idxs in groups.values() if len(idxs) > 1
            for i in idxs if i != min(idxs, key=lambda j: out[j]["conc"])}
    return [row for i, row in enumerate(out) if i not in drop]


def _min_prefill_ep(rows: list[dict], threshold: int | None) -> list[dict]:
    if threshold is None:
        return rows
    kept = []
    for row in rows:
        prefill = row.get("prefill")
        if isinstance(prefill, dict):
            try:
                if int(prefill.get("ep", 1)) < threshold:
                    continue
            except (TypeError, ValueError):
                continue
        kept.append(row)
    return kept


def search_space(added: AddedText, head: Revision, base: Callable[[], Revision] | None, *,
                 base_ref: str, head_ref: str, flags: JobFlags = JobFlags(),
                 layout: str = "classic") -> SearchSpace:
    """The workflow's document for a change; `base` gives the base revision's inputs, read
    only for append-only entries."""
    _, entries = added_entries(added, layout)
    append_only = any(e.append_only for e in entries)
    if append_only and not all(e.append_only for e in entries):
        raise ChangelogError("append-only entries cannot share a change with regular entries",
                             hint="make two changes")
    if append_only and (flags.all_evals or flags.evals_only):
        raise ChangelogError("an append-only change cannot run with --all-evals or "
                             "--evals-only (the all-evals / evals-only labels)")
    master = _master(head)
    resolved = [(e, expand_keys(e.config_keys, list(master))) for e in entries]
    base_rev = None
    if append_only:
        if base is None:
            raise ChangelogError("append-only entries compare with the base revision's "
                                 "master configs", hint="give --base/--head git refs, or "
                                 "--base-config-files and --base-runner-config")
        base_rev = base()
        base_master = _master(base_rev)
        selected: dict[str, set[str]] = defaultdict(set)
        for entry, keys in resolved:
            for key in keys:
                selected[key].update(entry.scenarios())
        if missing := sorted(selected.keys() - base_master.keys()):
            raise ChangelogError(f"append-only needs every named config at the base revision; "
                                 f"missing there: {missing}")
        check_scope(base_master, master, selected)
    resolved.sort(key=lambda item: not item[0].all_evals)  # stable: all-evals entries first
    benchmarks: list[dict] = []
    evals: list[dict] = []
    bench_seen: dict[str, set[str]] = defaultdict(set)
    eval_seen: dict[str, set[str]] = defaultdict(set)
    for entry, keys in resolved:
        scenarios = entry.scenarios()
        if not (flags.evals_only or entry.evals_only or entry.all_evals):
            for todo, group in _unseen(keys, scenarios, bench_seen).items():
                rows = _rows(head, group, todo)
                if entry.append_only and base_rev is not None:
                    rows = delta_rows(_rows(base_rev, group, todo), rows)
                benchmarks += rows
        if entry.append_only:
            continue
        for todo, group in _unseen(keys, scenarios, eval_seen).items():
            rows = _rows(head, group, todo, evals=True,
                         all_evals=flags.all_evals or entry.all_evals)
            evals += _min_prefill_ep(rows, entry.eval_min_prefill_ep)
    if flags.trim_conc:
        benchmarks = trim_conc(benchmarks)
    return _document(benchmarks, evals, entries, base_ref, head_ref, layout)


def _document(benchmarks: list[dict], evals: list[dict], entries: list[ChangelogEntry],
              base_ref: str, head_ref: str, layout: str) -> SearchSpace:
    from kvbench.matrix.names import seq_len_name

    single: dict[str, list[dict]] = defaultdict(list)
    multi: dict[str, list[dict]] = defaultdict(list)
    for row in benchmarks:
        row = {**row, "recipe-fingerprint": recipe_fingerprint(row)}
        multi_node = row.get("prefill") is not None
        bucket = "agentic" if row.get("scenario-type") == AGENTIC else seq_len_name(
            row["isl"], row["osl"])
        (multi if multi_node else single)[bucket].append(row)
    agentic = [r for r in evals if r.get("scenario-type") == AGENTIC]
    fixed = [r for r in evals if r.get("scenario-type") != AGENTIC]
    doc = {
        "single_node": single, "multi_node": multi,
        "evals": [r for r in fixed if r.get("prefill") is None],
        "agentic_evals": [r for r in agentic if r.get("prefill") is None],
        "multinode_evals": [r for r in fixed if r.get("prefill") is not None],
        "multinode_agentic_evals": [r for r in agentic if r.get("prefill") is not None],
        "changelog_metadata": {"base_ref": base_ref, "head_ref": head_ref,
                               "entries": entries},
    }
    if layout == "e2e":
        return E2eSearchSpace.model_validate(doc)
    for row in [*benchmarks, *evals]:
        try:
            row_model(row).model_validate(row)
        except ValidationError as e:
            where = f"row {row.get('exp-name')!r} as InferenceX's workflow reads it"
            raise ChangelogError(validation_message(e, where),
                                 hint="a kvbench extension field cannot go to InferenceX's CI; "
                                      "drop it from the rows this change runs") from None
    return SearchSpace.model_validate(doc)
