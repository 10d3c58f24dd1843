"""Recipe entries -> matrix rows, exactly as the reference generator's `full-sweep`, plus a
`config_keys` glob filter (the reference's `test-config` key expansion)."""

from __future__ import annotations

import difflib
import fnmatch
from pathlib import Path
from typing import Any

from kvbench.errors import MatrixError
from kvbench.matrix.agentic import agentic_rows
from kvbench.matrix.entry import EntryContext
from kvbench.matrix.evals import Keyed, mark_all_evals, mark_evals
from kvbench.matrix.fixed import fixed_rows
from kvbench.matrix.names import SEQ_LENS, only_exp_names
from kvbench.matrix.selection import Selection
from kvbench.matrix.trim import smoke, trim_conc
from kvbench.recipe.cache import load_recipes
from kvbench.recipe.facts import RunnerFacts
from kvbench.recipe.fields import SCENARIO_TYPES
from kvbench.recipe.layout import NO_FILES_HINT, benchmark_folder


def selection_runners(selection: Selection):  # -> kvbench.recipe.Runners | None
    """The selection's runners file loaded, or None when there is none or it is unreadable
    (callers then plan without per-cluster hardware facts)."""
    from kvbench.errors import KvbenchError
    from kvbench.recipe import load_runners  # lazy: a warm `kvbench matrix` never loads it

    try:
        return load_runners(runner_config_path(selection))
    except KvbenchError:
        return None


def runner_config_path(selection: Selection) -> Path:
    """--runner-config, else `runners.yaml` beside the first config file."""
    if selection.runner_config is not None:
        return Path(selection.runner_config)
    if not selection.config_files:
        raise MatrixError("no config files given", hint=NO_FILES_HINT)
    beside = Path(selection.config_files[0]).parent / "runners.yaml"
    if beside.is_file():
        return beside
    raise MatrixError(
        f"no --runner-config given and no runners.yaml beside {selection.config_files[0]}",
        hint="pass --runner-config PATH/runners.yaml",
    )


def expand_config_keys(patterns: tuple[str, ...], available: list[str]) -> list[str]:
    """Globs (`*`, `?`) and exact keys, in the order given (each glob's matches in file
    order), each key once: the order the reference's `test-config` expands them in. One that
    matches nothing is an error listing keys."""
    out: dict[str, None] = {}
    for pattern in patterns:
        matches = fnmatch.filter(available, pattern) if any(c in pattern for c in "*?[") else (
            [pattern] if pattern in available else []
        )
        if not matches:
            raise MatrixError(f"config key {pattern!r} matches no config key",
                              hint=_close_keys(pattern, available))
        out.update(dict.fromkeys(matches))
    return list(out)


def _close_keys(pattern: str, available: list[str]) -> str:
    """At most three keys a typo most likely meant; the whole list only when it is short (the
    real master configs have ~150)."""
    if len(available) <= 8:
        return "available keys: " + ", ".join(sorted(available))
    close = difflib.get_close_matches(pattern, sorted(available), n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(close) + "?"
    return (f"none of the {len(available)} keys is close; `kvbench matrix --format json` lists "
            "the rows, and a glob such as 'qwen3.5-*' selects several")


def _check(selection: Selection, runners: RunnerFacts) -> None:
    if selection.step_size <= 1:
        raise MatrixError(f"--step-size must be greater than 1 (got {selection.step_size})")
    for flag, value in (("--min-conc", selection.min_conc), ("--max-conc", selection.max_conc),
                        ("--max-tp", selection.max_tp), ("--max-ep", selection.max_ep)):
        if value is not None and value < 1:
            raise MatrixError(f"{flag} {value} selects nothing; allowed: an integer >= 1")
    lo, hi = selection.min_conc, selection.max_conc
    if lo is not None and hi is not None and lo > hi:
        raise MatrixError(f"--min-conc ({lo}) must be <= --max-conc ({hi})")
    bad = [s for s in selection.scenario_types if s not in SCENARIO_TYPES]
    if bad:
        raise MatrixError(f"unknown scenario type(s) {bad}; allowed: {', '.join(SCENARIO_TYPES)}")
    bad = [s for s in selection.seq_lens if s not in SEQ_LENS]
    if bad:
        raise MatrixError(f"unknown --seq-lens {bad}; allowed: {', '.join(SEQ_LENS)}")
    bad = sorted(set(selection.runner_types) - set(runners.labels))
    if bad:
        raise MatrixError(f"unknown --runner-type {bad}",
                          hint="valid runner types: " + ", ".join(sorted(runners.labels)))
    if selection.single_node and selection.multi_node:
        raise MatrixError("--single-node and --multi-node cannot be combined",
                          hint="give neither for both kinds of rows")
    if selection.no_evals and (selection.evals_only or selection.all_evals):
        raise MatrixError("--no-evals cannot be combined with --evals-only or --all-evals")
    if selection.smoke and (selection.trim_conc or selection.no_evals or selection.evals_only
                            or selection.all_evals):
        raise MatrixError("--smoke cannot be combined with --trim-conc, --no-evals, "
                          "--evals-only or --all-evals (it picks its own points and evals)")
    if bad := [c for c in selection.concs if c < 1]:
        raise MatrixError(f"--conc {bad[0]} selects nothing; allowed: integers >= 1")


def _check_values(flag: str, given: tuple[str, ...], known: set[str]) -> None:
    """A filter value no row of the configs has selects nothing: a typo, refused."""
    bad = [v for v in given if v not in known]
    if bad:
        close = difflib.get_close_matches(bad[0], sorted(known), n=1, cutoff=0.6)
        also = f"; did you mean {close[0]!r}?" if close else ""
        raise MatrixError(f"unknown {flag} {bad[0]!r} (allowed: {', '.join(sorted(known))})"
                          f"{also}")


def _wanted(key: str, raw: dict[str, Any], sel: Selection, keys: set[str] | None) -> bool:
    if keys is not None and key not in keys:
        return False
    if sel.model_prefixes and not any(key.startswith(p) for p in sel.model_prefixes):
        return False
    if sel.precisions and raw["precision"] not in sel.precisions:
        return False
    if sel.frameworks and raw["framework"] not in sel.frameworks:
        return False
    return not (sel.runner_types and raw["runner"] not in sel.runner_types)


def keyed_rows(selection: Selection) -> Keyed:
    """(config key, row) pairs in the reference's order, evals marked."""
    return keyed_rows_and_sources(selection)[0]


def keyed_rows_and_sources(selection: Selection) -> tuple[Keyed, dict[str, Path]]:
    """`keyed_rows`, and the master config file each selected config key comes from."""
    entries, runners = load_recipes([Path(p) for p in selection.config_files],
                                     runner_config_path(selection))
    _check(selection, runners)
    keys = expand_config_keys(selection.config_keys, list(entries)) if selection.config_keys \
        else None
    order = keys if keys is not None else list(entries)
    _check_values("--precision", selection.precisions, {e.raw["precision"] for e in
                                                         entries.values()})
    _check_values("--framework", selection.frameworks, {e.raw["framework"] for e in
                                                        entries.values()})
    both = not selection.single_node and not selection.multi_node
    single, multi = selection.single_node or both, selection.multi_node or both
    seq_filter = {SEQ_LENS[s] for s in selection.seq_lens} or None
    scenarios = set(selection.scenario_types) or set(SCENARIO_TYPES)
    node_filter = selection.runner_node_filter
    # The runners file's layout says which generator the rows follow (the newer generator
    # reads only the clusters: layout; the classic one only hardware:).
    layout = runners.layout
    out: Keyed = []
    wanted_keys = set(order)
    for key in order:
        entry = entries[key]
        raw = entry.raw
        if not _wanted(key, raw, selection, wanted_keys):
            continue
        runner_values: tuple[str, ...] = (raw["runner"],)
        if node_filter:
            nodes = list(runners.nodes_for(raw["runner"]))
            if keys is not None and node_filter in raw["runner"]:
                # test-config keeps a label that itself contains the filter, then its nodes,
                # each once (InferenceX 843c6254f generate_sweep_configs.py:910-924)
                nodes = list(dict.fromkeys([raw["runner"], *nodes]))
            runner_values = tuple(n for n in nodes if node_filter in n)
            if not runner_values:
                continue
        ctx = EntryContext(key=key, raw=raw, runners=runner_values, inventory=runners,
                           layout=layout, base=benchmark_folder(entry.source))
        if (ctx.is_multinode and not multi) or (not ctx.is_multinode and not single):
            continue
        if "fixed-seq-len" in scenarios:
            out.extend((key, row) for row in fixed_rows(ctx, selection, seq_filter))
        if "agentic-coding" in scenarios:
            out.extend((key, row) for row in agentic_rows(ctx, selection, runners))
    if selection.exp_names:
        out = only_exp_names(out, selection.exp_names)
    e2e = layout == "e2e"
    if not selection.no_evals:
        out = mark_evals(out, include_agentic=selection.evals_only or selection.all_evals
                         or selection.smoke, e2e=e2e)
        if selection.all_evals:
            out = mark_all_evals(out, e2e=e2e)
    if selection.smoke:
        out = smoke(out)
    elif selection.trim_conc:
        out = trim_conc(out)
    if selection.evals_only or selection.all_evals:
        out = [(k, r) for k, r in out if r.get("run-eval", False)]
        for _, row in out:
            row["eval-only"] = True
            row.pop("require-power", None)  # an eval measures accuracy, never power
    keys = {k for k, _ in out}
    return out, {k: Path(entries[k].source) for k in keys}


def generate_rows(selection: Selection) -> list[dict]:
    """The reference generator's rows for `selection`: kebab-case keys, reference order."""
    return [row for _, row in keyed_rows(selection)]
