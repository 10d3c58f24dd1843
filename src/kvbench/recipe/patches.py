"""`patches:` (a kvbench extension of a master-config entry): small source edits to the
engine image that a recipe needs until the upstream fix ships, scoped to the arms that need
them. The launch stage applies them (launch/patcher.py); this is their schema."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kvbench.recipe import rules
from kvbench.recipe.arms import ALL_ARMS, PATCH_ARMS, RESIDENT_ARM, arm_of, patches_for
from kvbench.recipe.base import RecipeModel
from kvbench.recipe.fields import PATCH_ID_PATTERN

__all__ = ["ALL_ARMS", "PATCH_ARMS", "RESIDENT_ARM", "EnginePatch", "arm_of", "patches_for"]


class EnginePatch(RecipeModel):
    """Replace `anchor` (exact lines, at any one indentation) with `replacement` in `file`,
    a path inside the installed engine package whose first part is the package
    (`sglang/srt/configs/model_config.py`). `upstream-fix` is text whose presence means the
    fix has shipped (default: the replacement itself). `arms`: `all`, `resident` or offload
    backend names."""

    id: str = Field(min_length=1, pattern=PATCH_ID_PATTERN)
    file: str = Field(min_length=1)
    anchor: str = Field(min_length=1)
    replacement: str
    upstream_fix: str | None = Field(default=None, alias="upstream-fix", min_length=1)
    arms: list[str] = Field(default_factory=lambda: [ALL_ARMS], min_length=1)
    source: str | None = Field(default=None, min_length=1)

    _inside_package = field_validator("file")(rules.patch_file)
    _known_arms = field_validator("arms")(rules.patch_arms)
    _changes_something = model_validator(mode="after")(rules.patch_changes_something)
