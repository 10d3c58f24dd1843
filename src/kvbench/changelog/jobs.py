"""The matrix rows a change asks for: each new entry's config keys, per its scenarios."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson

from kvbench.changelog.check import ChangeReport
from kvbench.changelog.keys import expand_keys, known_config_keys
from kvbench.matrix.selection import Selection


def rows_for_change(report: ChangeReport, config_files: Sequence[Path],
                    runner_config: Path | None = None, *,
                    trim_conc: bool = False) -> list[dict]:
    """Generator rows of every key the new entries name; a row named by two entries once.

    `trim_conc` keeps only the lowest concurrency of each topology, as PR runs do."""
    from kvbench.matrix import generate_rows

    known = known_config_keys(config_files)
    rows: list[dict] = []
    seen: set[bytes] = set()
    for entry in report.new_entries:
        keys = expand_keys(entry.config_keys, known)
        selection = Selection(
            config_files=tuple(Path(p) for p in config_files),
            runner_config=runner_config,
            scenario_types=entry.scenarios(),
            config_keys=tuple(keys),
            no_evals=True,
        )
        for row in generate_rows(selection):
            ident = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
            if ident not in seen:
                seen.add(ident)
                rows.append(row)
    return _trim(rows) if trim_conc else rows


def _trim(rows: list[dict]) -> list[dict]:
    def topology(row: dict) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in row.items() if k not in ("conc", "exp-name")))

    lowest: dict[tuple, dict] = {}
    for row in rows:
        conc = row["conc"][0] if isinstance(row["conc"], list) else row["conc"]
        key = topology(row)
        best = lowest.get(key)
        best_conc = None if best is None else (
            best["conc"][0] if isinstance(best["conc"], list) else best["conc"])
        if best is None or conc < best_conc:
            lowest[key] = row
    return list(lowest.values())
