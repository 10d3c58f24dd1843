"""Results: the versioned result.json per job, its validation and arm comparison."""

from kvbench.results.build import build_result
from kvbench.results.compare import compare, parse_selection
from kvbench.results.schema import STATUSES, Result
from kvbench.results.store import find_results, load_results, read_result, write_result
from kvbench.results.validate import DEFAULT_FAILED_REQUEST_THRESHOLD, validate

__all__ = ["DEFAULT_FAILED_REQUEST_THRESHOLD", "STATUSES", "Result", "build_result", "compare",
           "find_results", "load_results", "parse_selection", "read_result", "validate",
           "write_result"]
