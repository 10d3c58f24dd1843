"""The offline HTML dashboard built from result.json files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_dashboard(paths: Sequence[Path], out: Path, *, owned: bool = False) -> Path:
    """Load results under `paths` and write one self-contained HTML file to `out`: a user's
    output path (`-` is stdout, a device or FIFO is written into, a symlink at its target),
    or with `owned` kvbench's own dashboard.html inside a results directory, which replaces
    only a regular file (a link or device planted there is refused, never followed)."""
    from kvbench.files import write_atomic, write_output
    from kvbench.report.capacity import CAPACITY_FILE, capacity_panel, find_capacity_docs
    from kvbench.report.page import render
    from kvbench.results import load_results

    # capacity.json beside the results (kvbench capacity --url --output DIR) adds its panel;
    # a capacity.json named on its own adds only the panel, not its measured steps' results
    # (another workload than the runs beside it: they would pool as repeats of one arm)
    docs = find_capacity_docs(paths)
    extra = [capacity_panel(docs)] if docs else []
    paths = [p for p in map(Path, paths) if not (p.is_file() and p.name == CAPACITY_FILE)]
    results = load_results(paths) if paths else []
    tag_backend_settings(results)
    tag_option_sets(results)
    tag_sessions(results)
    page = render(results, extra)
    if owned:
        write_atomic(out, page)
    else:
        write_output(out, page)
    return Path(out)


def tag_option_sets(results: list) -> None:
    """Results of several run-option sets (Result.options_id) in one dashboard: each arm name
    gets its set's tag, the options that set it apart (results/option_sets.py), so that
    lines, points and repeats never mix two experiments. One set leaves the names as they
    are."""
    from kvbench.results.option_sets import option_labels

    labels = option_labels(results)
    for r in results:
        if labels:
            r.tag_arm(labels[r.options_id])


def tag_sessions(results: list) -> None:
    """Results whose arm names (option-set tags included) agree but whose replays sent other
    sessions (Result.sessions: the same traces read by two kvbench versions) get the
    sessions' digest, so they never pool as repeats of one arm."""
    by_arm: dict[str, set[str]] = {}
    for r in results:
        by_arm.setdefault(r.arm, set()).add(r.sessions)
    for r in results:
        if len(by_arm[r.arm]) > 1:
            r.tag_arm(f"sessions={r.sessions}")


def tag_backend_settings(results: list) -> None:
    """Results whose arm names agree but whose offload backends are set differently (SGLang
    HiCache write_through vs write_through_selective on the H200, one host size vs another):
    each gets the settings that tell them apart, so a line or a repeat never pools two
    configurations. Arms whose backends agree keep their names."""
    by_arm: dict[str, list] = {}
    for r in results:
        by_arm.setdefault(r.arm, []).append(r)
    for group in by_arm.values():
        settings = [r.kv_offload_backend or {} for r in group]
        keys = sorted({k for s in settings for k in s if k != "name"})
        differing = [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]
        for r, s in zip(group, settings, strict=True):
            if differing:
                r.tag_arm(" ".join(f"{k}={s.get(k)}" for k in differing))


__all__ = ["tag_backend_settings", "tag_sessions", "write_dashboard"]
