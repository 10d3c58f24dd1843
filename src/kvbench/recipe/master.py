"""A master-config entry: one config key of amd-master.yaml / nvidia-master.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from kvbench.recipe import rules
from kvbench.recipe.base import RecipeModel
from kvbench.recipe.components import ComponentMetadata
from kvbench.recipe.patches import EnginePatch
from kvbench.recipe.scenarios import MultiNodeScenarios, SingleNodeScenarios


class _MasterEntry(RecipeModel):
    image: str = Field(min_length=1)
    model: str = Field(min_length=1)
    model_prefix: str = Field(alias="model-prefix", min_length=1)
    runner: str = Field(min_length=1)
    precision: str = Field(min_length=1)
    framework: str = Field(min_length=1)
    router: ComponentMetadata | None = None
    kv_p2p_transfer: str | None = Field(default=None, alias="kv-p2p-transfer", min_length=1)
    # kvbench extension: engine-image source patches, scoped to arms (recipe/patches.py)
    patches: list[EnginePatch] | None = None

    # The YAML mapping as written: the generator copies nested blocks (workers, backend,
    # router) into rows verbatim, in the user's key order, as the reference generator does.
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)
    _source: Path | None = PrivateAttr(default=None)

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw

    @property
    def source(self) -> Path | None:
        """The file this entry was read from."""
        return self._source

    _entry_rules = model_validator(mode="after")(rules.master_entry)


class SingleNodeMasterEntry(_MasterEntry):
    multinode: Literal[False]
    disagg: Literal[False] = False
    scenarios: SingleNodeScenarios


class MultiNodeMasterEntry(_MasterEntry):
    multinode: Literal[True]
    disagg: bool = Field(default=False, strict=True)
    scenarios: MultiNodeScenarios


MasterEntry = SingleNodeMasterEntry | MultiNodeMasterEntry
