"""Capacity answers: sessions under an SLO per host-tier size, and the knee of that curve."""

from __future__ import annotations

from kvbench.capacity.curve import CapacityDoc, HostPoint, Knee, Step, find_knee, host_grid
from kvbench.capacity.predict import predict_curve
from kvbench.capacity.search import SearchResult, search_max
from kvbench.capacity.slo import Slo, StepMetrics

__all__ = [
    "CapacityDoc",
    "HostPoint",
    "Knee",
    "SearchResult",
    "Slo",
    "Step",
    "StepMetrics",
    "find_knee",
    "host_grid",
    "predict_curve",
    "search_max",
]
