"""Scenario blocks: fixed sequence lengths and agentic-coding trace replay."""

from __future__ import annotations

from pydantic import Field, model_validator

from kvbench.recipe.base import RecipeModel
from kvbench.recipe.rows import AgenticRow, FixedMultiNodeRow, FixedSingleNodeRow

# The power-measurement rollout covers one shape only (InferenceX inferencex-e2e/infx/matrix/
# generate.py, _fixed_sequence_entries).
POWER_SEQ_LEN = (8192, 1024)


def check_power(block: object) -> object:
    if block.require_power and (block.isl, block.osl) != POWER_SEQ_LEN:  # type: ignore[attr-defined]
        raise ValueError(f"'require-power' is supported only for isl {POWER_SEQ_LEN[0]} / osl "
                         f"{POWER_SEQ_LEN[1]} (got {block.isl}/{block.osl})")  # type: ignore[attr-defined]
    return block


class FixedSingleNodeBlock(RecipeModel):
    isl: int = Field(gt=0, strict=True)
    osl: int = Field(gt=0, strict=True)
    require_power: bool = Field(default=False, alias="require-power", strict=True)
    search_space: list[FixedSingleNodeRow] = Field(alias="search-space")

    @model_validator(mode="after")
    def _power_shape(self) -> FixedSingleNodeBlock:
        return check_power(self)  # type: ignore[return-value]


class FixedMultiNodeBlock(RecipeModel):
    isl: int = Field(gt=0, strict=True)
    osl: int = Field(gt=0, strict=True)
    require_power: bool = Field(default=False, alias="require-power", strict=True)
    search_space: list[FixedMultiNodeRow] = Field(alias="search-space")

    @model_validator(mode="after")
    def _power_shape(self) -> FixedMultiNodeBlock:
        return check_power(self)  # type: ignore[return-value]


class AgenticBlock(RecipeModel):
    """Rows sharing one `dram-utilization`: the fraction of the node's (capped) host DRAM
    that a `dram` row may fill, scaled by the fraction of the node's GPUs it uses."""

    search_space: list[AgenticRow] = Field(alias="search-space")
    dram_utilization: float | None = Field(default=None, alias="dram-utilization", gt=0, le=1,
                                             strict=True)

    @model_validator(mode="after")
    def _dram_needs_utilization(self) -> AgenticBlock:
        dram_rows = [i for i, row in enumerate(self.search_space) if row.kv_offloading == "dram"]
        if dram_rows and self.dram_utilization is None:
            raise ValueError(
                f"search-space rows {dram_rows} use 'kv-offloading: dram', so the block needs "
                "'dram-utilization' in (0, 1]"
            )
        return self


class SingleNodeScenarios(RecipeModel):
    fixed_seq_len: list[FixedSingleNodeBlock] | None = Field(default=None, alias="fixed-seq-len")
    agentic_coding: list[AgenticBlock] | None = Field(default=None, alias="agentic-coding")

    @model_validator(mode="after")
    def _at_least_one(self) -> SingleNodeScenarios:
        if not self.fixed_seq_len and not self.agentic_coding:
            raise ValueError("give at least one scenario: fixed-seq-len or agentic-coding")
        return self


class MultiNodeScenarios(RecipeModel):
    fixed_seq_len: list[FixedMultiNodeBlock] | None = Field(default=None, alias="fixed-seq-len")
    agentic_coding: list[AgenticBlock] | None = Field(default=None, alias="agentic-coding")

    @model_validator(mode="after")
    def _at_least_one(self) -> MultiNodeScenarios:
        if not self.fixed_seq_len and not self.agentic_coding:
            raise ValueError("give at least one scenario: fixed-seq-len or agentic-coding")
        return self
