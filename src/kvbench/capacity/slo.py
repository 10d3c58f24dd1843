"""Service-level objectives and the per-step metrics they are judged on.

Both executors report the same numbers, computed the same way (replay/stats.describe):
TTFT p90, the per-request mean inter-token latency (TPOT: decode time over the tokens after
the first) at p99, interactivity (1000 / TPOT, tokens/s per session) at p50, and the failed
ratio (errors over attempted requests). A per-chunk ITL is not used: over HTTP it depends on
how the server batches chunks, and the simulator has no chunks."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbench.replay.stats import describe


class Slo(BaseModel):
    """Objectives a concurrency must meet; None = not judged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p90_ms: float | None = Field(None, gt=0, description="TTFT p90 at most this")
    itl_p99_ms: float | None = Field(None, gt=0, description="TPOT p99 at most this")
    interactivity_p50_tok_s: float | None = Field(
        None, gt=0, description="tokens/s per session (1000 / TPOT) p50 at least this")
    failed_ratio: float = Field(0.01, ge=0, le=1, description="failed requests at most this")

    @model_validator(mode="after")
    def _one_latency(self) -> Slo:
        if self.ttft_p90_ms is None and self.itl_p99_ms is None and \
                self.interactivity_p50_tok_s is None:
            raise ValueError("set at least one of ttft_p90_ms, itl_p99_ms, "
                             "interactivity_p50_tok_s")
        return self

    def describe(self) -> str:
        parts = []
        if self.ttft_p90_ms is not None:
            parts.append(f"TTFT p90 <= {self.ttft_p90_ms:g} ms")
        if self.itl_p99_ms is not None:
            parts.append(f"ITL p99 <= {self.itl_p99_ms:g} ms")
        if self.interactivity_p50_tok_s is not None:
            parts.append(f"interactivity p50 >= {self.interactivity_p50_tok_s:g} tok/s")
        parts.append(f"failed <= {self.failed_ratio:.1%}")
        return ", ".join(parts)

    def violations(self, m: StepMetrics) -> list[str]:
        """What `m` breaks, one phrase each; empty = the step meets the SLO. A step with no
        successful request breaks every latency objective (nothing met it)."""
        out = []
        if m.attempted == 0:
            return ["no request was attempted"]
        if m.failed_ratio > self.failed_ratio:
            out.append(f"failed {m.failed_ratio:.1%} > {self.failed_ratio:.1%}")

        def over(name: str, value: float | None, limit: float | None, unit: str) -> None:
            if limit is not None and (value is None or value > limit):
                out.append(f"{name} {_num(value)} {unit} > {limit:g} {unit}")

        over("TTFT p90", m.ttft_p90_ms, self.ttft_p90_ms, "ms")
        over("ITL p99", m.itl_p99_ms, self.itl_p99_ms, "ms")
        limit = self.interactivity_p50_tok_s
        value = m.interactivity_p50_tok_s
        if limit is not None and (value is None or value < limit):
            out.append(f"interactivity p50 {_num(value)} tok/s < {limit:g} tok/s")
        return out


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f}"


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """One concurrency step's numbers (simulated or measured)."""

    concurrency: int
    requests: int  # successful
    errors: int  # failed, apart from `rejected_context`
    ttft_p90_ms: float | None
    itl_p99_ms: float | None
    interactivity_p50_tok_s: float | None
    # prompts refused as longer than the context (400): not failures of the server at this
    # load, so outside the failed ratio
    rejected_context: int = 0

    @property
    def attempted(self) -> int:
        return self.requests + self.errors

    @property
    def failed_ratio(self) -> float:
        return self.errors / self.attempted if self.attempted else 0.0

    def to_json(self) -> dict:
        return {"concurrency": self.concurrency, "requests": self.requests,
                "errors": self.errors, "failed_ratio": self.failed_ratio,
                "rejected_context": self.rejected_context,
                "ttft_p90_ms": self.ttft_p90_ms, "itl_p99_ms": self.itl_p99_ms,
                "interactivity_p50_tok_s": self.interactivity_p50_tok_s}


def metrics_from_sim(concurrency: int, done: list) -> StepMetrics:
    """From the simulator's finished requests (sim.request.SimRequest), in simulated time."""
    from kvbench.sim.context import is_context_rejection

    ok = [r for r in done if r.error is None]
    refused = sum(is_context_rejection(r.error) for r in done)
    tpot_s = [(r.finish_s - r.first_s) / (r.output_tokens - 1) for r in ok
              if r.output_tokens > 1 and r.finish_s > r.first_s]
    return StepMetrics(
        concurrency=concurrency, requests=len(ok), errors=len(done) - len(ok) - refused,
        rejected_context=refused,
        ttft_p90_ms=describe(r.ttft_s * 1e3 for r in ok)["p90"],
        itl_p99_ms=describe(t * 1e3 for t in tpot_s)["p99"],
        interactivity_p50_tok_s=describe(1.0 / t for t in tpot_s)["p50"])


def metrics_from_replay(concurrency: int, summary: dict) -> StepMetrics:
    """From a replay summary (replay/stats.py), already in the server's time."""
    req = summary.get("requests") or {}
    return StepMetrics(
        concurrency=concurrency, requests=int(req.get("profiled", 0)),
        errors=int(req.get("errors", 0)),
        ttft_p90_ms=(summary.get("ttft_ms") or {}).get("p90"),
        itl_p99_ms=(summary.get("tpot_ms") or {}).get("p99"),
        interactivity_p50_tok_s=(summary.get("interactivity_tok_s") or {}).get("p50"))


def metrics_from_summary(concurrency: int, summary: dict) -> StepMetrics:
    """From a simulation summary (sim/simulate.py summarize), in simulated time: its
    nearest-rank percentiles (interactivity p50 as 1000 / TPOT p50)."""
    tpot = (summary.get("tpot_ms") or {}).get("p50")
    return StepMetrics(
        concurrency=concurrency, requests=int(summary.get("requests", 0)),
        errors=int(summary.get("errors", 0)),
        rejected_context=int((summary.get("rejected") or {}).get("context", 0)),
        ttft_p90_ms=(summary.get("ttft_ms") or {}).get("p90"),
        itl_p99_ms=(summary.get("tpot_ms") or {}).get("p99"),
        interactivity_p50_tok_s=1000.0 / tpot if tpot else None)
