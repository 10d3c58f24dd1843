"""Prometheus text exposition -> samples, via prometheus_client's own parser."""

from __future__ import annotations

import math
import re

from prometheus_client.parser import text_string_to_metric_families

from kvbench.errors import MetricsError

# sample name -> list of [labels, value]; JSON-friendly so snapshots go straight to scrape.jsonl
Samples = dict[str, list[list]]


# sample-name suffixes a family's samples add to its name (OpenMetrics / Prometheus text)
_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created", "_info")
# a sample line's shape: name, optional labels, a value (what the filter drops is still checked)
_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?[ \t]+[-+]?(?:[0-9.]|Inf|inf|NaN|nan)")


# An engine's /metrics is tens of KB (vLLM 0.26: 68 KB, about 1,000 lines) and the parser
# costs ~70 us a sample line: a server writing 50,000 series or 150 KB labels would stall the
# event loop that scrapes it every second. Past these the snapshot fails (data, not a hang).
MAX_EXPOSITION_BYTES = 8 << 20
MAX_SAMPLE_LINES = 10_000
MAX_LINE_CHARS = 64 << 10


def parse_exposition(text: str, keep: set[str] | None = None) -> Samples:
    """Parse /metrics text. `keep` limits the sample names stored (None keeps all but
    histogram buckets and `_created` timestamps, which no summary reads)."""
    _check_size(text)
    out: Samples = {}
    if keep is not None:
        text = _kept_lines(text, keep)
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if keep is not None:
                    if s.name not in keep:
                        continue
                elif s.name.endswith(("_bucket", "_created")):
                    continue
                if math.isnan(s.value):
                    continue
                out.setdefault(s.name, []).append([dict(s.labels), float(s.value)])
    except ValueError as e:
        raise MetricsError(f"cannot parse Prometheus text: {e}") from e
    return out


def _kept_lines(text: str, keep: set[str]) -> str:
    """Only the lines of the kept samples and their families' comments. The parser takes
    11 ms on vLLM 0.26's 68 KB /metrics text, nearly all in histograms no summary reads;
    a scrape runs in the replay's event loop, so that cost once a second was the loop lag
    that flagged the H200 runs "client saturated". Filtered first: 1.1 ms
    (benchmarks/scrape_parse.py)."""
    families = keep | {n.removesuffix(s) for n in keep for s in _SUFFIXES if n.endswith(s)}
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)  # "# TYPE name type" / "# HELP name text"
            if len(parts) > 2 and parts[2] in families:
                lines.append(line)
        elif not line.strip():
            continue
        elif not _SAMPLE.match(line):
            raise MetricsError(f"cannot parse Prometheus text: line {line[:80]!r}")
        elif line.split("{", 1)[0].split(" ", 1)[0] in keep:
            lines.append(line)
    return "\n".join(lines) + "\n"


def _check_size(text: str) -> None:
    if len(text) > MAX_EXPOSITION_BYTES:
        raise MetricsError(f"/metrics text of {len(text):,} characters (at most "
                           f"{MAX_EXPOSITION_BYTES:,})")
    lines = text.count("\n") + 1
    if lines > MAX_SAMPLE_LINES:
        raise MetricsError(f"/metrics text of {lines:,} lines (at most {MAX_SAMPLE_LINES:,})")
    longest = max(map(len, text.splitlines()), default=0)
    if longest > MAX_LINE_CHARS:
        raise MetricsError(f"a /metrics line of {longest:,} characters (at most "
                           f"{MAX_LINE_CHARS:,})")
