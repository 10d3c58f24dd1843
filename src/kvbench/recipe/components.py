"""Small nested blocks of a recipe: component metadata and multi-node workers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kvbench.recipe.base import RecipeModel, check_dcp_divides_tp
from kvbench.recipe.fields import KvOffloadBackendName


def _not_an_image(version: str | None) -> str | None:
    # A version must name the component's own release; image tags hide what actually ran.
    if version is not None and version.startswith("image:"):
        raise ValueError(
            f"version {version!r} must be a release, package version or source commit, "
            "not an image reference"
        )
    return version


class ComponentMetadata(RecipeModel):
    """A runtime component such as a router: `{name, version}`, both required."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)

    _check_version = field_validator("version")(_not_an_image)


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
    write_policy: Literal["write_back", "write_through", "write_through_selective"] | None = \
        Field(default=None, alias="write-policy")

    @model_validator(mode="after")
    def _policy_is_hicache(self) -> KvOffloadBackend:
        if self.write_policy is not None and self.name != "hicache":
            raise ValueError(f"write-policy is a HiCache setting; backend {self.name!r} has none")
        return self

    _check_version = field_validator("version")(_not_an_image)


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

    @field_validator("additional_settings")
    @classmethod
    def _key_value(cls, settings: list[str]) -> list[str]:
        bad = [s for s in settings if "=" not in s or s.startswith("=")]
        if bad:
            raise ValueError(f"additional-settings entries must look like KEY=VALUE (got {bad})")
        return settings

    @model_validator(mode="after")
    def _topology(self) -> Worker:
        check_dcp_divides_tp(self)
        return self

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.pcp_size


class AggregateWorker(Worker):
    """The one `worker:` role of an aggregated multi-node row (`disagg: false`, newer
    layout): it serves prefill and decode, so at least one replica (default 1). The
    generator writes it as a prefill worker beside a `num-worker: 0` decode worker
    (InferenceX inferencex-e2e/infx/matrix/generate.py, multinode_worker_pair)."""

    num_worker: int = Field(default=1, alias="num-worker", gt=0, strict=True)
