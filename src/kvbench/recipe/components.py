"""Small nested blocks of a recipe: component metadata and multi-node workers."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kvbench.recipe import rules
from kvbench.recipe.base import RecipeModel
from kvbench.recipe.fields import KvOffloadBackendName, WritePolicy


class ComponentMetadata(RecipeModel):
    """A runtime component such as a router: `{name, version}`, both required."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)

    _check_version = field_validator("version")(rules.not_an_image)


class KvOffloadBackend(RecipeModel):
    """The host KV offload backend of a `dram` row; `version` is optional for engine-native
    backends. `size-gb-per-rank` is a kvbench extension: an explicit host pool size per rank
    that the planner uses instead of deriving one from the DRAM budget. `write-policy` is one
    too: the HiCache write policy of this arm (`--hicache-write-policy`, sglang 0.5.17
    `srt/server_args.py` choices), over the launcher's own (plan/data/settings.yaml)."""

    name: KvOffloadBackendName
    version: str | None = Field(default=None, min_length=1)
    size_gb_per_rank: float | None = Field(default=None, alias="size-gb-per-rank", gt=0,
                                           strict=True)
    write_policy: WritePolicy | None = Field(default=None, alias="write-policy")

    _check_version = field_validator("version")(rules.not_an_image)
    _size_in_range = field_validator("size_gb_per_rank")(rules.host_gb_per_rank)
    _policy_is_hicache = model_validator(mode="after")(rules.backend_write_policy)


class Worker(RecipeModel):
    """One prefill or decode role of a multi-node row."""

    num_worker: int = Field(alias="num-worker", ge=0, strict=True)
    tp: int = Field(gt=0, strict=True)
    pp: int = Field(default=1, gt=0, strict=True)
    dcp_size: int = Field(default=1, alias="dcp-size", gt=0, strict=True)
    pcp_size: int = Field(default=1, alias="pcp-size", gt=0, strict=True)
    ep: int = Field(gt=0, strict=True)
    dp_attn: bool = Field(alias="dp-attn", strict=True)
    hardware: str | None = Field(default=None, min_length=1)
    additional_settings: list[str] = Field(default_factory=list, alias="additional-settings")

    _key_value = field_validator("additional_settings")(rules.key_value_settings)
    _workers_in_range = field_validator("num_worker")(rules.worker_count)
    _gpus_in_range = field_validator("tp", "pp", "dcp_size", "pcp_size", "ep")(
        rules.parallelism)
    _topology = model_validator(mode="after")(rules.check_dcp_divides_tp)

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.pcp_size


class AggregateWorker(Worker):
    """The one `worker:` role of an aggregated multi-node row (`disagg: false`, newer
    layout): it serves prefill and decode, so at least one replica (default 1). The
    generator writes it as a prefill worker beside a `num-worker: 0` decode worker
    (InferenceX inferencex-e2e/infx/matrix/generate.py, multinode_worker_pair)."""

    num_worker: int = Field(default=1, alias="num-worker", gt=0, strict=True)
