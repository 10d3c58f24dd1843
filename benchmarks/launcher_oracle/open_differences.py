"""The launcher-oracle differences no allow-list entry explains, grouped.

    PYTHONPATH=src python3 benchmarks/launcher_oracle/open_differences.py [--checkout DIR] [--write]

runs the comparison of tests/engines/test_launcher_oracle.py (the committed recordings
against `kvbench launch --dry-run`) and prints every unexplained difference grouped by part,
name and config keys, with a count and, given the InferenceX checkout the recordings came
from, the launcher line that sets it. `--write` replaces the allow-list's `unexplained, open`
entries by these groups (entries with a proof stay as they are), so that after a re-pin the
test names exactly what is still open; each of them then needs a fix in the adapters or a
proof, never a silent pass.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "engines")]

import yaml  # noqa: E402
from fixtures.launcher_oracle import ALLOW_FILE, load_recordings  # noqa: E402


def _spellings(part: str, name: str) -> list[str]:
    last = name.split(".")[-1].lstrip("?")
    if part == "env":
        return [name]
    if part in ("engine", "router"):
        return [f"--{last.lstrip('-').replace('_', '-')}", f"--{last.lstrip('-')}"]
    return [last]


def launcher_line(checkout: Path | None, launchers: set[str], part: str, name: str) -> str:
    for launcher in sorted(launchers):
        path = checkout / launcher if checkout else None
        if path is None or not path.is_file():
            continue
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if any(re.search(rf"{re.escape(s)}\b", text) for s in _spellings(part, name)):
                return f"{launcher}:{number}"
    return f"{sorted(launchers)[0]} (not set there: kvbench adds it)" if launchers else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, help="the InferenceX tree of the recordings")
    parser.add_argument("--write", action="store_true", help="rewrite the open entries")
    args = parser.parse_args()

    import test_launcher_oracle as t

    def raw(fixture):
        return fixture._get_wrapped_function()

    recordings = load_recordings()
    launched = raw(t.launched)()
    parsed = raw(t.parsed)(recordings, launched)
    kept = [e for e in t.ALLOW if e["status"] != "unexplained, open"]
    t.ALLOW[:] = kept
    unexplained, _ = t.classify(raw(t.all_differences)(recordings, launched, parsed))
    launcher_of = {(r["config-key"], r["row"]["exp-name"]): r["launcher"] for r in recordings}
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for d in unexplained:
        groups[(d.part, d.name)].append(d)
    entries = []
    for (part, name), ds in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
        keys = sorted({d.config_key for d in ds})
        launchers = {launcher_of[(d.config_key, d.exp_name)] for d in ds}
        values = sorted({f"{d.launcher!r} -> {d.kvbench!r}" for d in ds})
        entries.append({
            "id": f"open: {part} {name}", "part": part, "names": [name], "configs": keys,
            "status": "unexplained, open", "count": len(ds),
            "line": launcher_line(args.checkout, launchers, part, name),
            "proof": "none yet; launcher -> kvbench values seen: " + "; ".join(values[:4])
                     + (f" (+{len(values) - 4} more)" if len(values) > 4 else ""),
        })
        print(f"{len(ds):5d}  {part:18s} {name:55s} {len(keys)} keys  {values[0][:70]}")
    print(f"{len(unexplained)} unexplained differences in {len(entries)} groups")
    if args.write:
        text = ALLOW_FILE.read_text()
        head = text.split("\n- id:", 1)[0].rstrip() + "\n" if "\n- id:" in text else ""
        body = yaml.safe_dump(kept + entries, sort_keys=False, width=100, allow_unicode=True)
        ALLOW_FILE.write_text(head + body)


if __name__ == "__main__":
    main()
