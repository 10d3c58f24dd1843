"""Scenario blocks: fixed sequence lengths and agentic-coding trace replay."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kvbench.recipe import rules
from kvbench.recipe.base import RecipeModel
from kvbench.recipe.rows import AgenticRow, FixedMultiNodeRow, FixedSingleNodeRow


class FixedSingleNodeBlock(RecipeModel):
    isl: int = Field(gt=0, strict=True)
    osl: int = Field(gt=0, strict=True)
    require_power: bool = Field(default=False, alias="require-power", strict=True)
    search_space: list[FixedSingleNodeRow] = Field(alias="search-space")

    _isl_in_range = field_validator("isl")(rules.prompt_tokens)
    _osl_in_range = field_validator("osl")(rules.output_tokens)
    _power_shape = model_validator(mode="after")(rules.power_shape)


class FixedMultiNodeBlock(RecipeModel):
    isl: int = Field(gt=0, strict=True)
    osl: int = Field(gt=0, strict=True)
    require_power: bool = Field(default=False, alias="require-power", strict=True)
    search_space: list[FixedMultiNodeRow] = Field(alias="search-space")

    _isl_in_range = field_validator("isl")(rules.prompt_tokens)
    _osl_in_range = field_validator("osl")(rules.output_tokens)
    _power_shape = model_validator(mode="after")(rules.power_shape)


class AgenticBlock(RecipeModel):
    """Rows sharing one `dram-utilization`: the fraction of the node's (capped) host DRAM
    that a `dram` row may fill, scaled by the fraction of the node's GPUs it uses."""

    search_space: list[AgenticRow] = Field(alias="search-space")
    dram_utilization: float | None = Field(default=None, alias="dram-utilization", gt=0, le=1,
                                             strict=True)

    _dram_needs_utilization = model_validator(mode="after")(rules.dram_needs_utilization)


class SingleNodeScenarios(RecipeModel):
    fixed_seq_len: list[FixedSingleNodeBlock] | None = Field(default=None, alias="fixed-seq-len")
    agentic_coding: list[AgenticBlock] | None = Field(default=None, alias="agentic-coding")

    _at_least_one = model_validator(mode="after")(rules.some_scenario)


class MultiNodeScenarios(RecipeModel):
    fixed_seq_len: list[FixedMultiNodeBlock] | None = Field(default=None, alias="fixed-seq-len")
    agentic_coding: list[AgenticBlock] | None = Field(default=None, alias="agentic-coding")

    _at_least_one = model_validator(mode="after")(rules.some_scenario)
