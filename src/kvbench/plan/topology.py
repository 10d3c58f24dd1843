"""What a job row says about the server the planner sizes: engine, parallelism, budget share.

A multi-node row is sized by its prefill workers: the reference generator budgets host DRAM for
the prefill role only (reference/inferencex.md 2.3), so that is the share the planner spends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kvbench.errors import PlanError

# The embedded engine's framework name: kvbench's own (its rows are the quickstart's and
# examples/), served by `kvbench serve-sim`, launched by no InferenceX launcher.
EMBEDDED_FRAMEWORK = "sim"

# Framework names of the recipe format -> the engine that actually serves.
ENGINE_OF_FRAMEWORK = {
    "sglang": "sglang",
    "sglang-disagg": "sglang",
    "dynamo-sglang": "sglang",
    "vllm": "vllm",
    "dynamo-vllm": "vllm",
    "trt": "trtllm",
    "dynamo-trt": "trtllm",
    "atom": "atom",
    # The embedded engine (kvbench serve-sim) follows SGLang's HiCache sizing semantics.
    EMBEDDED_FRAMEWORK: "sglang",
}


def inferencex_row(row: dict[str, Any]) -> bool:
    """Whether a job row carries an InferenceX exp-name, so that running it is running the
    experiment InferenceX publishes under that name: every framework's row but the embedded
    engine's (kvbench's own rows). Such a row gets its launcher's host sizing and image
    modifications (planner.py) and replays the AgentX workload (sweep/options.py)."""
    return row.get("framework") != EMBEDDED_FRAMEWORK


class JobLike(Protocol):
    config_key: str
    row: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Topology:
    exp_name: str
    framework: str
    engine: str
    image: str
    model: str
    precision: str
    runner: str
    tp: int
    pp: int
    pcp: int
    dcp: int
    ep: int
    dp_attention: bool
    spec_decoding: str
    conc: int
    is_multinode: bool
    num_workers: int
    kv_offloading: str
    backend: str | None
    backend_version: str | None
    size_gb_per_rank: float | None
    write_policy: str | None
    budget_gb: int

    @property
    def engine_gpus(self) -> int:
        """GPUs of one engine replica (the prefill worker for multi-node rows)."""
        return self.tp * self.pp * self.pcp

    @property
    def weight_shards(self) -> int:
        """Ways the weights are split: TP*PP, or EP when experts are spread wider."""
        return max(self.engine_gpus, self.ep)

    def ranks_on_node(self, gpus_per_node: int) -> int:
        """Ranks sharing one node's budget: one replica's share of the node."""
        return min(self.engine_gpus, gpus_per_node)

    def max_running_requests(self) -> int:
        """InferenceX launchers allow 2 x concurrency (sub-agent fan-out), per DP rank."""
        dp = self.tp if self.dp_attention else 1
        return max(1, -(-2 * self.conc // dp))


def topology_of(job: JobLike) -> Topology:
    row = job.row
    framework = row.get("framework", "")
    engine = ENGINE_OF_FRAMEWORK.get(framework)
    if engine is None:
        raise PlanError(
            f"{row.get('exp-name', job.config_key)}: framework {framework!r} has no engine; "
            f"known: {', '.join(sorted(ENGINE_OF_FRAMEWORK))}"
        )
    multinode = "prefill" in row
    worker = row["prefill"] if multinode else row
    backend = row.get("kv-offload-backend") or {}
    conc = row.get("conc", 1)
    return Topology(
        exp_name=row.get("exp-name", job.config_key),
        framework=framework,
        engine=engine,
        image=row.get("image", ""),
        model=row["model"],
        precision=row.get("precision", "bf16"),
        runner=row.get("runner", ""),
        tp=int(worker["tp"]),
        pp=int(worker.get("pp", 1)),
        pcp=int(worker.get("pcp-size", 1)),
        dcp=int(worker.get("dcp-size", 1)),
        ep=int(worker.get("ep", 1) or 1),
        dp_attention=bool(worker.get("dp-attn", False)),
        spec_decoding=row.get("spec-decoding", "none"),
        conc=int(conc[0] if isinstance(conc, list) else conc),
        is_multinode=multinode,
        num_workers=int(worker.get("num-worker", 1)),
        kv_offloading=row.get("kv-offloading", "none"),
        backend=backend.get("name"),
        backend_version=backend.get("version"),
        size_gb_per_rank=backend.get("size-gb-per-rank"),
        write_policy=backend.get("write-policy"),
        budget_gb=int(row.get("total-cpu-dram-gb", 0)),
    )
