"""Which matrix rows are worth GPU hours: each offload row is simulated (capacity/jobs.py, as
`simulate-jobs` does: its own topology, workload and bounds) GPU-resident and with its host
tier, and the predicted benefit of the host tier ranks them.

benefit = 1 - TTFT p90 (offload) / TTFT p90 (resident): 0.3 = the offload arm is predicted
30 % faster to first token. A row is kept when the prediction cannot settle the question
(|benefit| <= noise: the arms may differ either way on a real engine) or when it predicts a
large gain worth confirming (benefit >= threshold); a row in between, or one predicted to
lose clearly, is pruned, and its GPU-resident twin with it. Rows it cannot predict are kept,
each with the reason: pruning only removes what it predicted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench.capacity.jobs import twin_key
from kvbench.errors import CapacityError

KEEP_NOISE = "within noise"
KEEP_GAIN = "above threshold"
PRUNED = "pruned"
UNPREDICTED = "not simulated"
RESIDENT = "GPU-resident"


@dataclass(slots=True)
class Prediction:
    exp_name: str
    conc: int
    jobs: list[Any]  # the offload job, then its resident twin when selected
    verdict: str
    benefit: float | None = None
    arms: dict[str, dict] = field(default_factory=dict)
    reason: str | None = None  # why a row was not predicted

    @property
    def kept(self) -> bool:
        return self.verdict != PRUNED

    def to_json(self) -> dict:
        return {"exp-name": self.exp_name, "conc": self.conc, "verdict": self.verdict,
                "benefit": self.benefit, "reason": self.reason, "arms": self.arms,
                "rows": [j.exp_name for j in self.jobs]}


def has_host_tier(job: Any) -> bool:
    return job.kv_offloading != "none"


def _arm(summary: dict, entry: dict, host: bool) -> dict:
    from kvbench.capacity.slo import metrics_from_summary

    return metrics_from_summary(entry["conc"], summary).to_json() | {
        "hit_rate": summary["hit_rate"]["total"],
        "host_hit_rate": summary["hit_rate"]["host"],
        "output_tok_s": summary["throughput"]["output_tok_s"],
        "requests": summary["requests"],
        "gpu_kv_tokens": entry.get("gpu-kv-tokens"),
        "host_kv_tokens": entry.get("host-kv-tokens") if host else 0}


def _verdict(benefit: float | None, noise: float, threshold: float) -> str:
    if benefit is None:
        return UNPREDICTED
    if abs(benefit) <= noise:
        return KEEP_NOISE
    if benefit >= threshold:
        return KEEP_GAIN
    return PRUNED


def predict_jobs(jobs: list[Any], entries: dict[int, dict], *, noise: float,
                 threshold: float) -> list[Prediction]:
    """One Prediction per row with a host tier, from its simulate-jobs entry (`entries`, by
    id(job)), ranked by benefit (largest first); then the rows it could not predict, then
    the GPU-resident rows without a twin here, each with the reason."""
    if not 0 <= noise < threshold:
        raise CapacityError(f"--noise must be >= 0 and below --threshold, got {noise:g} and "
                            f"{threshold:g}")
    residents = {twin_key(j): j for j in jobs if not has_host_tier(j)}
    paired: set[int] = set()
    out: list[Prediction] = []
    rest: list[Prediction] = []
    for job in jobs:
        if not has_host_tier(job):
            continue
        twin = residents.get(twin_key(job))
        group = [job] + ([twin] if twin is not None else [])
        if twin is not None:
            paired.add(id(twin))
        entry = entries.get(id(job)) or {}
        arms = entry.get("arms") or {}
        if "offload" not in arms:
            reason = entry.get("skipped") or "the plan gives it no host tokens to simulate"
            rest.append(Prediction(job.exp_name, job.conc, group, UNPREDICTED, reason=reason))
            continue
        res = _arm(arms["resident"], entry, False)
        off = _arm(arms["offload"], entry, True)
        benefit = None
        if res["ttft_p90_ms"] and off["ttft_p90_ms"] is not None:
            benefit = 1.0 - off["ttft_p90_ms"] / res["ttft_p90_ms"]
        p = Prediction(job.exp_name, job.conc, group, _verdict(benefit, noise, threshold),
                       benefit, {"resident": res, "offload": off})
        if benefit is None:
            p.reason = _no_ttft_reason(arms["resident"])
        out.append(p)
    out.sort(key=lambda p: -(p.benefit if p.benefit is not None else float("-inf")))
    lone = [Prediction(j.exp_name, j.conc, [j], RESIDENT,
                       reason="GPU-resident, and no row with a host tier shares its other "
                       "settings here: no offload to predict")
            for j in residents.values() if id(j) not in paired]
    return out + rest + lone


def _no_ttft_reason(summary: dict) -> str:
    """Why the resident arm has no TTFT: its AgentX warm-up failed (agentx-harness 1.0.12
    aborts such a run, so no profiled request is sent), or no profiled request finished."""
    phase = summary.get("phase") or {}
    if phase.get("warmup_failed"):
        return (f"the warm-up failed on the resident arm, so no profiled request ran (the "
                f"harness aborts such a run): {phase.get('warmup_error') or 'a request failed'}")
    return "no TTFT on the resident arm (no request finished)"


def kept_jobs(predictions: list[Prediction], jobs: list[Any]) -> list[Any]:
    """The selected jobs that survive, in the selection's order."""
    keep = {id(j) for p in predictions if p.kept for j in p.jobs}
    return [j for j in jobs if id(j) in keep]
