"""Which matrix rows are worth GPU hours: each offload row and its GPU-resident twin are
simulated at the row's concurrency, and the predicted benefit of the host tier ranks them.

benefit = 1 - TTFT p90 (offload) / TTFT p90 (resident): 0.3 = the offload arm is predicted
30 % faster to first token. A pair is kept when the prediction cannot settle the question
(|benefit| <= noise: the arms may differ either way on a real engine) or when it predicts a
large gain worth confirming (benefit >= threshold); a pair in between, or one predicted to
lose clearly, is pruned. Rows the simulator does not cover (multi-node, no host tier and no
offload twin) are kept: pruning only removes what it predicted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench.capacity.slo import StepMetrics, metrics_from_sim
from kvbench.capacity.target import Target, Tier, target_from_job
from kvbench.errors import CapacityError
from kvbench.sim.simulate import SimSetup, run
from kvbench.sim.trace import Trace

KEEP_NOISE = "within noise"
KEEP_GAIN = "above threshold"
PRUNED = "pruned"
UNPREDICTED = "not simulated"


@dataclass(slots=True)
class Prediction:
    exp_name: str
    conc: int
    jobs: list[Any]  # the offload job, then its resident twin when selected
    verdict: str
    benefit: float | None = None
    arms: dict[str, dict] = field(default_factory=dict)

    @property
    def kept(self) -> bool:
        return self.verdict != PRUNED

    def to_json(self) -> dict:
        return {"exp-name": self.exp_name, "conc": self.conc, "verdict": self.verdict,
                "benefit": self.benefit, "arms": self.arms,
                "rows": [j.exp_name for j in self.jobs]}


def _twin_key(job: Any) -> tuple:
    row = {k: v for k, v in job.row.items() if k not in (
        "kv-offloading", "kv-offload-backend", "total-cpu-dram-gb", "exp-name")}
    return job.config_key, repr(sorted((k, repr(v)) for k, v in row.items()))


def _arm(target: Target, tier: Tier, traces: list[Trace], conc: int) -> tuple[StepMetrics, dict]:
    done: list = []
    summary = run(traces, target.costs, SimSetup(tier.gpu_kv_tokens, tier.host_kv_tokens,
                                                 tier.write_policy, conc, target.engine),
                  requests=done)
    m = metrics_from_sim(conc, done)
    return m, m.to_json() | {"hit_rate": summary["hit_rate"]["total"],
                             "output_tok_s": summary["throughput"]["output_tok_s"],
                             "host_gb": tier.host_gb, "gpu_kv_tokens": tier.gpu_kv_tokens}


def predict_jobs(jobs: list[Any], runners: Any, traces: list[Trace], *, noise: float,
                 threshold: float) -> list[Prediction]:
    """One Prediction per offload row (ranked by benefit, largest first), then the rows it
    could not predict."""
    if not 0 <= noise < threshold:
        raise CapacityError(f"--noise must be >= 0 and below --threshold, got {noise:g} and "
                            f"{threshold:g}")
    residents = {_twin_key(j): j for j in jobs
                 if j.kv_offloading == "none" and not j.is_multinode}
    paired: set[int] = set()
    out: list[Prediction] = []
    rest: list[Prediction] = []
    for job in jobs:
        if job.kv_offloading == "none" and not job.is_multinode:
            continue
        twin = residents.get(_twin_key(job))
        group = [job] + ([twin] if twin is not None else [])
        if job.is_multinode or not job.offload_backend:
            rest.append(Prediction(job.exp_name, job.conc, group, UNPREDICTED))
            continue
        if twin is not None:
            paired.add(id(twin))
        target = target_from_job(job, runners)
        res, res_json = _arm(target, target.tier(0.0), traces, job.conc)
        off, off_json = _arm(target, target.planned_tier(), traces, job.conc)
        benefit = None
        if res.ttft_p90_ms and off.ttft_p90_ms is not None:
            benefit = 1.0 - off.ttft_p90_ms / res.ttft_p90_ms
        if benefit is None:
            verdict = UNPREDICTED
        elif abs(benefit) <= noise:
            verdict = KEEP_NOISE
        elif benefit >= threshold:
            verdict = KEEP_GAIN
        else:
            verdict = PRUNED
        out.append(Prediction(job.exp_name, job.conc, group, verdict, benefit,
                              {"resident": res_json, "offload": off_json}))
    out.sort(key=lambda p: -(p.benefit if p.benefit is not None else float("-inf")))
    rest += [Prediction(j.exp_name, j.conc, [j], UNPREDICTED) for j in residents.values()
             if id(j) not in paired]
    return out + rest


def kept_jobs(predictions: list[Prediction], jobs: list[Any]) -> list[Any]:
    """The selected jobs that survive, in the selection's order."""
    keep = {id(j) for p in predictions if p.kept for j in p.jobs}
    return [j for j in jobs if id(j) in keep]
