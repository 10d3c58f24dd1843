"""The vocabulary of the InferenceX master-config format: closed value sets and constants.

Schema Literals, error messages and the matrix generator all read these names, so the
allowed values a user is told about are the ones the code accepts."""

from __future__ import annotations

from typing import Literal, get_args

SpecDecoding = Literal["mtp", "draft_model", "none"]
KvOffloading = Literal["none", "dram"]
# Backend names seen in the real catalog; adding one here is what makes it valid.
KvOffloadBackendName = Literal[
    "hicache", "vllm-native", "vllm-simple", "lmcache", "mooncake", "native"
]
ScenarioType = Literal["fixed-seq-len", "agentic-coding"]
# HiCache write policies (`--hicache-write-policy`, sglang 0.5.17 `srt/server_args.py` choices)
WritePolicy = Literal["write_back", "write_through", "write_through_selective"]
# a `clusters:` record's CPU architecture (newer runners.yaml)
Arch = Literal["x86_64", "aarch64"]

SPEC_DECODINGS: tuple[str, ...] = get_args(SpecDecoding)
KV_OFFLOADINGS: tuple[str, ...] = get_args(KvOffloading)
KV_OFFLOAD_BACKENDS: tuple[str, ...] = get_args(KvOffloadBackendName)
SCENARIO_TYPES: tuple[str, ...] = get_args(ScenarioType)
WRITE_POLICIES: tuple[str, ...] = get_args(WritePolicy)
ARCHES: tuple[str, ...] = get_args(Arch)

# an engine patch's `id` (recipe/patches.py)
PATCH_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._#-]*$"
CLUSTER_LABEL_PREFIX = "cluster:"
DEFAULT_AGENTIC_DURATION_SECONDS = 3600
