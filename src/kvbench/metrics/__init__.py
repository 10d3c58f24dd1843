"""Server metrics: scrape an engine's Prometheus /metrics and map it onto one internal set."""

from kvbench.metrics.adapter import Adapter, known_engines, load_adapter
from kvbench.metrics.exposition import parse_exposition
from kvbench.metrics.fields import FIELDS, TIERS
from kvbench.metrics.scraper import Scraper
from kvbench.metrics.summary import summarize_scrape, summarize_snapshots
from kvbench.metrics.window import profiling_start_unix_ns

__all__ = ["FIELDS", "TIERS", "Adapter", "Scraper", "known_engines", "load_adapter",
           "parse_exposition", "profiling_start_unix_ns", "summarize_scrape",
           "summarize_snapshots"]
