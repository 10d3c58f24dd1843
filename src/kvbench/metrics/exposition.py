"""Prometheus text exposition -> samples, via prometheus_client's own parser."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from kvbench.errors import MetricsError

# sample name -> list of [labels, value]; JSON-friendly so snapshots go straight to scrape.jsonl
Samples = dict[str, list[list]]


def parse_exposition(text: str, keep: set[str] | None = None) -> Samples:
    """Parse /metrics text. `keep` limits the sample names stored (None keeps all but
    histogram buckets and `_created` timestamps, which no summary reads)."""
    out: Samples = {}
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
