"""The one internal set of server metrics every engine adapter maps onto.

Counters become deltas over the measured window; gauges become max, mean and last. Units are
in the names; ratios are fractions in [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge"]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: Kind
    doc: str


FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("prompt_tokens", "counter", "prompt tokens received"),
        Field("generation_tokens", "counter", "tokens generated"),
        Field("cached_tokens_device", "counter", "prompt tokens served from the GPU KV cache"),
        Field("cached_tokens_host", "counter", "prompt tokens loaded back from host DRAM"),
        Field("cached_tokens_external", "counter",
              "prompt tokens from an external store or KV connector (L3, LMCache, Mooncake)"),
        Field("offload_bytes_gpu_to_cpu", "counter", "KV bytes written from GPU to host"),
        Field("offload_bytes_cpu_to_gpu", "counter", "KV bytes loaded from host to GPU"),
        Field("offload_tokens_gpu_to_cpu", "counter", "KV tokens written from GPU to host"),
        Field("offload_tokens_cpu_to_gpu", "counter", "KV tokens loaded from host to GPU"),
        Field("preemptions", "counter", "requests preempted for lack of KV space"),
        Field("prefix_cache_lookups", "counter",
              "prompt tokens looked up in the prefix cache, once per scheduling attempt: an "
              "attempt count (a waiting request is looked up again at every step), never the "
              "denominator of a hit rate"),
        Field("connector_lookups", "counter",
              "prompt tokens looked up in a KV connector's store (vLLM external prefix cache "
              "queries): positive only while a connector is attached, so it shows an offload "
              "tier is on even when it never hits; an attempt count, not a denominator"),
        Field("spec_draft_tokens", "counter", "speculative draft tokens proposed"),
        Field("gpu_kv_usage", "gauge", "fraction of the GPU KV pool in use"),
        Field("gpu_kv_capacity_tokens", "gauge", "GPU KV pool size in tokens"),
        Field("host_pool_used_tokens", "gauge", "host KV pool tokens in use"),
        Field("host_pool_total_tokens", "gauge", "host KV pool size in tokens"),
        Field("host_pool_usage", "gauge", "fraction of the host KV pool in use"),
        Field("queue_depth", "gauge", "requests waiting to be scheduled"),
        Field("running_requests", "gauge", "requests being decoded or prefilled"),
        Field("page_size_tokens", "gauge", "KV page (block) size the engine runs with"),
        Field("spec_accept_length", "gauge", "mean accepted speculative length"),
    )
}

TIERS = ("device", "host", "external")
