"""/metrics of the simulated server under SGLang's names (kvoffload.md 2.1), so that the
same scraper and per-engine mapping read it as they read a real SGLang server.

Values are read from the engine when scraped; counters accumulate as prefills complete;
latency histograms (TTFT, E2E, queue time) are in simulated seconds.
The HiCache L2 gauges exist only when a host tier is configured, as in SGLang, and a
`cache_source` child exists for both tiers from the start (zero until the first hit)."""

from __future__ import annotations

import bisect
from collections import deque
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from kvbench.sim.request import SimRequest
    from kvbench.sim.server import SimServer

# sglang:cache_hit_rate is a ratio over recent prefills; SGLang logs it per prefill batch.
_RECENT = 64
# Latency buckets in (simulated) seconds, of the order of SGLang's.
SIM_CLOCK_METRIC = "kvbench:sim_clock_seconds"
_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS, value)] += 1
        self.total += value

    def family(self, name: str, doc: str, labels: list[str], values: list[str]):
        m = HistogramMetricFamily(name, doc, labels=labels)
        cumulative, buckets = 0, []
        for bound, count in zip((*_BUCKETS, float("inf")), self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        m.add_metric(values, buckets, self.total)
        return m


class SimMetrics:
    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cached_device = 0
        self.cached_host = 0
        self.requests = 0
        self._recent: deque[tuple[int, int]] = deque(maxlen=_RECENT)
        self.ttft = _Histogram()
        self.e2e = _Histogram()
        self.queue = _Histogram()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def on_prefill(self, req: SimRequest) -> None:
        self.requests += 1
        self.prompt_tokens += req.input_tokens
        self.cached_device += req.device_hit_tokens
        self.cached_host += req.host_hit_tokens
        self._recent.append((req.cached_tokens, req.input_tokens))
        self.ttft.observe(req.ttft_s)
        self.queue.observe(req.admit_s - req.arrival_s)

    def on_finish(self, req: SimRequest) -> None:
        self.generation_tokens += req.output_tokens
        self.e2e.observe(req.e2e_s)

    def collect(self):
        cfg, engine, cache = self.server.config, self.server.engine, self.server.cache
        labels = ["model_name", "tp_rank"]
        values = [cfg.served_model_name, "0"]

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            m = CounterMetricFamily(name, doc, labels=labels)
            m.add_metric(values, value)
            return m

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            m = GaugeMetricFamily(name, doc, labels=labels)
            m.add_metric(values, value)
            return m

        yield counter("sglang:prompt_tokens", "Prompt tokens processed", self.prompt_tokens)
        yield counter("sglang:generation_tokens", "Generated tokens", self.generation_tokens)
        yield counter("sglang:num_requests", "Requests prefilled", self.requests)
        cached = CounterMetricFamily("sglang:cached_tokens", "Prompt tokens served from cache",
                                     labels=[*labels, "cache_source"])
        cached.add_metric([*values, "device"], self.cached_device)
        cached.add_metric([*values, "host"], self.cached_host)
        yield cached
        hit = sum(c for c, _ in self._recent)
        total = sum(n for _, n in self._recent)
        yield gauge("sglang:cache_hit_rate", "Prefix hit ratio over recent prefills",
                    hit / total if total else 0.0)
        if cfg.clock == "wall":
            yield GaugeMetricFamily("kvbench:sim_time_scale", "Simulated seconds per wall-clock "
                                    "second (serve-sim --time-scale)", value=cfg.time_scale)
        # the engine's clock when scraped: a timeline in simulated time under either clock
        yield GaugeMetricFamily(SIM_CLOCK_METRIC, "Simulated seconds since the server started",
                                value=self.server.now_s())
        capacity = cache.device_capacity
        finite = capacity != float("inf")
        yield gauge("sglang:max_total_num_tokens", "Device KV pool tokens per rank",
                    capacity if finite else 0)
        yield gauge("sglang:num_used_tokens", "Device KV tokens in use", cache.device_used)
        yield gauge("sglang:token_usage", "Device KV pool usage ratio",
                    cache.device_used / capacity if finite else 0.0)
        yield gauge("sglang:num_running_reqs", "Running requests", engine.num_running)
        yield gauge("sglang:num_queue_reqs", "Queued requests", engine.num_queued)
        c = cache.counters
        yield counter("sglang:load_back_tokens", "Tokens loaded host to device", c.load_tokens)
        yield counter("sglang:evicted_tokens", "Tokens evicted from device",
                      c.device_evicted_tokens)
        if cache.host_capacity > 0:
            yield gauge("sglang:hicache_host_used_tokens", "Host KV pool tokens in use",
                        cache.host_used)
            yield gauge("sglang:hicache_host_total_tokens", "Host KV pool tokens",
                        cache.host_capacity)
            yield counter("sglang:hicache_backup_tokens", "Tokens backed up device to host",
                          c.backup_tokens + c.sync_backup_tokens)

        yield self.ttft.family("sglang:time_to_first_token_seconds",
                               "Time to first token (simulated seconds)", labels, values)
        yield self.e2e.family("sglang:e2e_request_latency_seconds",
                              "End-to-end latency (simulated seconds)", labels, values)
        yield self.queue.family("sglang:queue_time_seconds",
                                "Time waiting for admission (simulated seconds)", labels, values)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
