"""Request statistics from records: latency distributions, throughput, cache, client health.

Definitions (times from records, tokens from server usage):
- TTFT = first content chunk - send. E2E = last content chunk - send.
- TPOT (per request) = (last - first chunk) / (completion tokens - tokens of the first chunk);
  interactivity = 1000 / TPOT_ms tokens/s; E2E-normalised interactivity = completion tokens / E2E.
- ITL = per-token gaps: a chunk gap carrying k tokens gives k samples of gap / k.
- Throughput = token sums over the window from the first profiled send to the last profiled end.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

from kvbench.replay.checks import IdealCeiling, PromptAgreement, WarmGuard
from kvbench.replay.health import CPU_LIMIT, LAG_MS_LIMIT, LATENESS_MS_LIMIT

PCTS = (50, 75, 90, 95, 99)
# Below this many samples a p90/p99 is one or two requests, not a tail: such percentiles are
# marked (`few_samples`), as AIPerf and GuideLLM users expect
FEW_SAMPLES = 20


def _mark_few(out: dict) -> dict:
    if 0 < out["n"] < FEW_SAMPLES:
        out["few_samples"] = (f"percentiles over {out['n']} samples (< {FEW_SAMPLES}): the tail "
                              "is one or two requests")
    return out


def describe(values: Iterable[float]) -> dict:
    arr = values if isinstance(values, np.ndarray) else (
        np.frombuffer(values, dtype=float) if isinstance(values, array) else
        np.asarray(list(values), dtype=float))
    if arr.size == 0:
        return {"mean": None, **{f"p{p}": None for p in PCTS}, "std": None, "n": 0}
    qs = np.percentile(arr, PCTS)
    out = {"mean": float(arr.mean())}
    out.update({f"p{p}": float(q) for p, q in zip(PCTS, qs, strict=True)})
    out["std"] = float(arr.std())
    out["n"] = int(arr.size)
    return _mark_few(out)


def summarize(records: Iterable[dict], *, num_gpus: int = 1, client: dict | None = None,
              time_scale: float = 1.0, slo_ms: dict[str, float] | None = None,
              virtual_clock: bool = False) -> dict:
    """The summary of one run; `client` is the runner's health report (loop lag, CPU).

    `time_scale` > 1 says the server's clock ran that much faster than wall time (the embedded
    engine's --time-scale): request timings and rates are converted to the server's time. The
    client's own health figures stay in wall time, where its saturation happens.
    `virtual_clock`: the records' times are a virtual-clock server's stamps (replay/lockstep.py)."""
    summary = _summarize_wall(records, num_gpus=num_gpus, client=client,
                              slo_wall_ms={k: v / time_scale for k, v in (slo_ms or {}).items()})
    if virtual_clock:
        summary["client"] = clock_waited(summary["client"])
    if slo_ms:
        summary["goodput"]["slo_ms"] = dict(slo_ms)  # in the server's clock, as given
    return rescale_time(summary, time_scale) if time_scale != 1.0 else summary


VIRTUAL_CLOCK_NOTE = ("the server's clock is virtual: it waited for the client, whose lag "
                      "delayed the run but entered no timing (each time is the server's stamp)")


def clock_waited(client: dict) -> dict:
    """The client's health under a virtual clock: its figures are kept, but they cannot be
    the run's timings, so they flag nothing."""
    return {**client, "saturated": False, "reasons": [], "clock": "virtual",
            "note": VIRTUAL_CLOCK_NOTE}


# The client stamps token events on its own clock, which resolves about a millisecond of wall
# time (event-loop wake-ups). Against a server whose clock runs `time_scale` times faster that
# is `time_scale` ms of the server's time: gaps below it are tokens the server emitted in one
# wall tick, not inter-token latency (the quickstart's x50 engine gave ITL p50 = 0 ms).
CLIENT_RESOLUTION_MS = 1.0


def rescale_time(summary: dict, time_scale: float) -> dict:
    """Convert a wall-time summary to a server clock running `time_scale` times faster. ITL
    below what the client's clock resolves in that clock becomes unknown (None), with the
    reason; TPOT, a per-request span, stands."""
    out = dict(summary)
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        out[key] = _scaled(summary[key], time_scale)
    itl, floor_ms = out["itl_ms"], CLIENT_RESOLUTION_MS * time_scale
    if time_scale > 1 and itl.get("p50") is not None and itl["p50"] < floor_ms:
        out["itl_ms"] = {**{k: None for k in itl}, "n": itl.get("n", 0), "unresolved": (
            f"ITL p50 {itl['p50']:.2f} ms is below the {floor_ms:g} ms of server time the "
            f"client's clock resolves at x{time_scale:g}: tokens arrive in bursts; see TPOT")}
    for key in ("interactivity_tok_s", "e2e_norm_interactivity_tok_s"):
        out[key] = _scaled(summary[key], 1 / time_scale)
    out["throughput"] = _scaled(summary["throughput"], 1 / time_scale)
    if summary.get("goodput"):
        out["goodput"] = {**summary["goodput"], "requests_s": None if summary["goodput"][
            "requests_s"] is None else summary["goodput"]["requests_s"] / time_scale}
    out["qps"] = {**_scaled(summary["qps"], 1 / time_scale),
                  "window_s": summary["qps"]["window_s"] * time_scale}
    if summary.get("window_s") is not None:
        out["window_s"] = summary["window_s"] * time_scale
    out["time_scale"] = time_scale
    return out


def _scaled(stats: dict, factor: float) -> dict:
    # means, percentiles and std are floats and scale; the count `n` (an int) and None stay
    return {k: v * factor if isinstance(v, float) else v for k, v in stats.items()}


# ITL samples are counted per value at this resolution (0.01 ms, far below the client's ~1 ms
# clock resolution, CLIENT_RESOLUTION_MS): the summary's memory is the distinct gaps seen
ITL_RESOLUTION_NS = 10_000


class _Stream:
    """One pass over the records, keeping numbers, never records: per successful request a
    few packed floats (56 B), ITL as counts per 0.01 ms value, so a summary of an hour at 1,024
    streams (~720k requests) does not hold the records it reads."""

    def __init__(self, slo_wall_ms: dict[str, float]) -> None:
        self.slo = slo_wall_ms
        self.met = 0  # successful requests within every SLO given (goodput)
        self.total = self.warm = self.cancelled = 0
        self.by_kind: dict[str, int] = {}
        self.errors = 0
        self.ttft, self.e2e, self.tpot, self.inter, self.e2e_inter = (
            array("d"), array("d"), array("d"), array("d"), array("d"))
        self.itl_counts: dict[int, int] = {}  # ITL in ITL_RESOLUTION_NS units -> samples
        self.sent_ns, self.last_ns = array("q"), array("q")
        self.lateness = array("d")
        # its parts: until the prompt was ready (rendering), and from then to the write
        self.late_render, self.late_loop = array("d"), array("d")
        self.n_in = self.n_out = 0
        self.with_cache = self.prompt_c = self.cached = 0
        self.prompt = PromptAgreement()
        self.ideal = IdealCeiling()
        self.warm_guard = WarmGuard()

    def add(self, r: dict) -> None:
        self.total += 1
        self.warm_guard.add(r)
        if r.get("is_warmup"):
            self.warm += 1
            return
        if r.get("t_target_ns") and r.get("t_send_ns"):
            target, sent = r["t_target_ns"], r["t_send_ns"]
            self.lateness.append((sent - target) / 1e6)
            if ready := r.get("t_ready_ns"):
                ready = min(max(ready, target), sent)
                self.late_render.append((ready - target) / 1e6)
                self.late_loop.append((sent - ready) / 1e6)
        status = r.get("status")
        if status == "cancelled":  # cut off by the end of the run: neither result nor error
            self.cancelled += 1
            return
        if status != "ok":
            self.errors += 1
            kind = r.get("error_kind") or "unknown"
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            return
        if not r.get("t_first_ns"):
            return
        self._ok(r)

    def _ok(self, r: dict) -> None:
        self.ttft.append((r["t_first_ns"] - r["t_send_ns"]) / 1e6)
        e2e_ms = (r["t_last_ns"] - r["t_send_ns"]) / 1e6
        self.e2e.append(e2e_ms)
        n_out = r.get("completion_tokens") or len(r.get("chunk_ns") or ())
        first = (r.get("chunk_tokens") or [1])[0]
        tpot = None
        if n_out - first > 0 and r["t_last_ns"] > r["t_first_ns"]:
            tpot = (r["t_last_ns"] - r["t_first_ns"]) / 1e6 / (n_out - first)
            self.tpot.append(tpot)
            self.inter.append(1000.0 / tpot)
        if self.slo:
            got = {"ttft": self.ttft[-1], "tpot": tpot, "e2e": e2e_ms}
            # a one-token reply has no TPOT to miss
            self.met += all(got[k] is None or got[k] <= v for k, v in self.slo.items())
        if n_out and e2e_ms > 0:
            self.e2e_inter.append(n_out * 1000.0 / e2e_ms)
        # ITL: a chunk gap carrying k tokens gives k samples of gap / k, counted by value at
        # the resolution of ITL_RESOLUTION_NS: memory of the distinct gaps, not of the tokens
        ts = r.get("chunk_ns") or []
        toks = r.get("chunk_tokens") or [1] * len(ts)
        itl = self.itl_counts
        for i in range(1, len(ts)):
            k = max(1, toks[i]) if i < len(toks) else 1
            key = round((ts[i] - ts[i - 1]) / k / ITL_RESOLUTION_NS)
            itl[key] = itl.get(key, 0) + k
        self.sent_ns.append(r["t_send_ns"])
        self.last_ns.append(r["t_last_ns"])
        self.n_in += r.get("prompt_tokens") or r.get("sent_prompt_tokens") or 0
        self.n_out += r.get("completion_tokens") or 0
        if r.get("cached_tokens") is not None:
            self.with_cache += 1
            self.prompt_c += r.get("prompt_tokens") or 0
            self.cached += r["cached_tokens"]
        self.prompt.add(r)
        self.ideal.add(r)

    def itl(self) -> dict:
        keys = np.fromiter(self.itl_counts.keys(), dtype=np.int64, count=len(self.itl_counts))
        counts = np.fromiter(self.itl_counts.values(), dtype=np.int64,
                             count=len(self.itl_counts))
        return describe_weighted(keys * (ITL_RESOLUTION_NS / 1e6), counts)


def describe_weighted(values: np.ndarray, weights: np.ndarray) -> dict:
    """`describe` of each value repeated `weight` times, without building the repeats (a
    chunk of k tokens is k ITL samples): the same numbers as np.percentile's linear
    interpolation over the expanded samples, in memory of the chunks, not of the tokens."""
    n = int(weights.sum())
    if n == 0:
        return describe(())
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order].astype(np.int64)
    ends = np.cumsum(w)  # expanded positions ends[i-1] .. ends[i]-1 hold v[i]

    def at(pos: np.ndarray) -> np.ndarray:
        return v[np.searchsorted(ends, pos, side="right")]

    h = np.asarray(PCTS, dtype=float) / 100 * (n - 1)
    lo, hi = np.floor(h).astype(np.int64), np.ceil(h).astype(np.int64)
    qs = at(lo) + (at(hi) - at(lo)) * (h - lo)
    mean = float((v * w).sum() / n)
    out = {"mean": mean}
    out.update({f"p{p}": float(q) for p, q in zip(PCTS, qs, strict=True)})
    out["std"] = float(np.sqrt(max(0.0, float((w * (v - mean) ** 2).sum()) / n)))
    out["n"] = n
    return _mark_few(out)


def _summarize_wall(records: Iterable[dict], *, num_gpus: int, client: dict | None,
                    slo_wall_ms: dict[str, float]) -> dict:
    acc = _Stream(slo_wall_ms)
    for r in records:
        acc.add(r)
    ok_n = len(acc.ttft)
    if ok_n:
        t0 = min(acc.sent_ns)
        window_s = max((max(acc.last_ns) - t0) / 1e9, 1e-9)
    else:
        t0, window_s = 0, 0.0
    n_in, n_out = acc.n_in, acc.n_out

    def rate(x: float) -> float | None:
        return x / window_s if window_s > 0 else None

    qps: list[int] = []
    if ok_n and window_s >= 1.0:
        ends = (np.frombuffer(acc.last_ns, dtype=np.int64) - t0) / 1e9
        buckets = np.bincount(np.minimum(ends.astype(np.int64), int(window_s)),
                              minlength=int(window_s) + 1)
        qps = buckets[: max(1, int(window_s))].tolist()

    lag_ms = [x / 1e6 for x in (client or {}).get("loop_lag_ns", [])]
    lag_p99 = float(np.percentile(lag_ms, 99)) if lag_ms else None
    def p99(xs: array) -> float | None:
        return float(np.percentile(xs, 99)) if len(xs) else None

    late_p99 = p99(acc.lateness)
    cpu = None
    if client and client.get("wall_s"):
        cpu = client["cpu_s"] / client["wall_s"]
    reasons = []
    if lag_p99 is not None and lag_p99 > LAG_MS_LIMIT:
        reasons.append(f"event-loop lag p99 {lag_p99:.1f} ms > {LAG_MS_LIMIT} ms")
    if late_p99 is not None and late_p99 > LATENESS_MS_LIMIT:
        reasons.append(f"send lateness p99 {late_p99:.1f} ms > {LATENESS_MS_LIMIT} ms")
    if cpu is not None and cpu > CPU_LIMIT:
        reasons.append(f"client CPU {cpu:.2f} cores > {CPU_LIMIT}")

    with_cache = acc.with_cache
    return {
        "requests": {
            "total": acc.total, "profiled": ok_n, "warmup": acc.warm,
            "errors": acc.errors, "errors_by_kind": acc.by_kind, "cancelled": acc.cancelled,
        },
        "ttft_ms": describe(acc.ttft),
        "itl_ms": acc.itl(),
        "tpot_ms": describe(acc.tpot),
        "e2e_ms": describe(acc.e2e),
        "interactivity_tok_s": describe(acc.inter),
        "e2e_norm_interactivity_tok_s": describe(acc.e2e_inter),
        "throughput": {
            "input_tok_s": rate(n_in), "output_tok_s": rate(n_out),
            "total_tok_s": rate(n_in + n_out),
            "output_tok_s_per_gpu": rate(n_out / num_gpus),
            "total_tok_s_per_gpu": rate((n_in + n_out) / num_gpus),
            "requests_s": rate(ok_n),
        },
        # requests per second that met the SLO (AIPerf's and GuideLLM's goodput), when one
        # is given; None otherwise
        "goodput": {"slo_ms": None, "met": acc.met, "of": ok_n,
                    "share": acc.met / ok_n if ok_n else None,
                    "requests_s": rate(acc.met)} if slo_wall_ms else None,
        "qps": {"window_s": 1.0, **describe(qps)},
        "window_s": window_s,
        "tokens": {"input": n_in, "output": n_out},
        "cache": {
            "prompt_tokens": acc.prompt_c if with_cache else None,
            "cached_tokens": acc.cached if with_cache else None,
            "hit_rate": (acc.cached / acc.prompt_c) if with_cache and acc.prompt_c else None,
            "ideal_hit_rate": acc.ideal.result(),
        },
        "prompt": acc.prompt.result(),
        "warm_cache": acc.warm_guard.result(),
        "client": {
            "loop_lag_ms_p99": lag_p99, "send_lateness_ms_p99": late_p99,
            # the lateness until each prompt was rendered, and from then to its write
            # (the budget of bytes a loop pass, a connection, the loop itself)
            "send_lateness_render_ms_p99": p99(acc.late_render),
            "send_lateness_after_render_ms_p99": p99(acc.late_loop),
            "cpu_cores": cpu, "saturated": bool(reasons), "reasons": reasons,
        },
    }


def cache_summary(records: Iterable[dict], *, absent_cached_tokens_are_zero: bool) -> dict:
    """The summary's `cache` block from the records again, reading a successful request that
    reported no cached tokens as 0 where the engine reports only hits (rescore of runs whose
    records were written before the replay knew it)."""
    if absent_cached_tokens_are_zero:
        records = (r if r.get("status") != "ok" or r.get("cached_tokens") is not None
                   else {**r, "cached_tokens": 0} for r in records)
    return summarize(records)["cache"]
