"""The measured search against a running server: each probed concurrency is a replay
(replay.replay: the same sessions by the same workload bounds as the prediction's probe)
whose summary becomes a result.json (results.build_result) in its own directory; the search
gallops from the simulator's prediction and stops as soon as the SLO breaks one step above a
pass.

A probe starts on a server whose cache holds the previous probe's prompts; every replay has
its own cache-bust marker, so nothing of it can hit, it only has to be evicted first."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from kvbench.capacity.curve import HostPoint, Step
from kvbench.capacity.predict import BoundsFor
from kvbench.capacity.search import search_max
from kvbench.capacity.slo import Slo, metrics_from_replay
from kvbench.capacity.target import Target
from kvbench.replay import ReplayConfig, replay
from kvbench.workload import Session, SyntheticSpec

StepDone = Callable[[Step], None]


def _fingerprint(row: dict, url: str, workload: dict) -> str:
    blob = json.dumps({"row": row, "url": url, "workload": workload}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


async def _replay_with_scrape(cfg: ReplayConfig, sessions: list[Session], engine: str
                              ) -> tuple[dict, dict | None]:
    from kvbench.metrics import Scraper, profiling_start_unix_ns, summarize_scrape

    path = cfg.output_dir / "scrape.jsonl"
    scraper = Scraper(cfg.url.rstrip("/") + "/metrics", engine, path)
    await scraper.start()
    try:
        summary = await replay(cfg, None, sessions,
                               at_profiling_start=scraper.mark_profiling_start)
    finally:
        await scraper.stop()
    return summary, summarize_scrape(path, engine, profiling_start_unix_ns(summary))


def _check_prompts(summary: dict, step_dir: Path, tokenizer: str | None) -> None:
    """Stop at the first step whose prompts the server counted differently from the trace:
    every later step would measure other requests than the prediction (longer prompts, other
    reuse; at worst refusals past the context length), and its maximum would mean nothing."""
    from kvbench.errors import CapacityError

    prompt = summary.get("prompt") or {}
    if prompt.get("agrees") is False:
        raise CapacityError(
            f"the server counted {prompt['server_tokens']:,} prompt tokens for "
            f"{prompt['sent_tokens']:,} sent ({prompt['deviation']:+.1%}) at {step_dir}: the "
            "steps would not replay the predicted requests",
            hint="pass the served model's --tokenizer (a model directory or name)"
            if tokenizer is None else f"the server does not count as --tokenizer {tokenizer} "
            "does: pass the served model's tokenizer")


def measure_point(target: Target, host_gb: float, *, url: str, model: str,
                  sessions: list[Session], bounds_for: BoundsFor, slo: Slo, ceiling: int,
                  hint: int, out_dir: Path, time_scale: float, workload: dict,
                  trace: list[Path] | None, synthetic: SyntheticSpec | None,
                  engine: str = "sim", tokenizer: str | None = None,
                  on_step: StepDone | None = None) -> HostPoint:
    from kvbench.results import build_result, write_result
    from kvbench.results.build import options_digest

    t0 = time.perf_counter()
    tier = target.tier(host_gb)
    steps: list[Step] = []

    def passes(c: int) -> bool:
        step_dir = Path(out_dir) / f"conc{c:04d}"
        b = bounds_for(c)
        cfg = ReplayConfig(
            url=url, model=model, trace=trace, synthetic=synthetic, concurrency=c,
            output_dir=step_dir, duration_s=b.duration_s, max_requests=b.max_requests,
            warmup_requests=b.warmup_requests, max_tokens_cap=b.max_tokens_cap,
            think_time_cap_s=b.think_time_cap_s, think_time_scale=b.think_time_scale,
            start=b.start, start_ratio=b.start_ratio, seed=b.seed,
            block_tokens=b.block_tokens, max_input_tokens=b.max_input_tokens,
            grace_s=b.grace_s, time_scale=time_scale,
            num_gpus=int(target.describe.get("tp", 1)), tokenizer=tokenizer)
        summary, server = asyncio.run(_replay_with_scrape(cfg, sessions, engine))
        m = metrics_from_replay(c, summary)
        violations = slo.violations(m)
        row = target.row_for(host_gb, c)
        result = build_result(
            job_row=row, config_key=str(target.describe.get("config-key", target.label)),
            plan=tier.plan, summary=summary, server=server, telemetry=None, status="ok",
            fingerprint=_fingerprint(row, url, workload),
            options_id=options_digest({"capacity-workload": workload, "tokenizer": tokenizer}))
        path = write_result(step_dir, result)
        _check_prompts(summary, step_dir, tokenizer)  # after the result: the evidence stays
        step = Step(concurrency=c, passed=not violations, violations=violations,
                    metrics=m.to_json() | {"hit_rate": (summary.get("cache") or {}).get(
                        "hit_rate")}, result_path=str(path))
        steps.append(step)
        if on_step is not None:
            on_step(step)
        return step.passed

    res = search_max(passes, ceiling=ceiling, hint=hint)
    return HostPoint(host_gb=host_gb, gpu_kv_tokens=tier.gpu_kv_tokens,
                     host_kv_tokens=tier.host_kv_tokens, max_sessions=res.max_passing,
                     first_failing=res.first_failing, engine_args=tier.engine_args,
                     steps=sorted(steps, key=lambda s: s.concurrency),
                     wall_s=time.perf_counter() - t0)
