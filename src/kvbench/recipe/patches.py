"""`patches:` (a kvbench extension of a master-config entry): small source edits to the
engine image that a recipe needs until the upstream fix ships, scoped to the arms that need
them. The launch stage applies them (launch/patcher.py); this is their schema."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import Field, field_validator, model_validator

from kvbench.recipe.arms import ALL_ARMS, PATCH_ARMS, RESIDENT_ARM, arm_of, patches_for
from kvbench.recipe.base import RecipeModel

__all__ = ["ALL_ARMS", "PATCH_ARMS", "RESIDENT_ARM", "EnginePatch", "arm_of", "patches_for"]


class EnginePatch(RecipeModel):
    """Replace `anchor` (exact lines, at any one indentation) with `replacement` in `file`,
    a path inside the installed engine package whose first part is the package
    (`sglang/srt/configs/model_config.py`). `upstream-fix` is text whose presence means the
    fix has shipped (default: the replacement itself). `arms`: `all`, `resident` or offload
    backend names."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._#-]*$")
    file: str = Field(min_length=1)
    anchor: str = Field(min_length=1)
    replacement: str
    upstream_fix: str | None = Field(default=None, alias="upstream-fix", min_length=1)
    arms: list[str] = Field(default_factory=lambda: [ALL_ARMS], min_length=1)
    source: str | None = Field(default=None, min_length=1)

    @field_validator("file")
    @classmethod
    def _inside_package(cls, file: str) -> str:
        path = PurePosixPath(file)
        if path.is_absolute() or ".." in path.parts or len(path.parts) < 2:
            raise ValueError(f"file {file!r} must be a relative path inside the engine "
                             "package, starting with the package (e.g. "
                             "sglang/srt/configs/model_config.py)")
        if path.suffix != ".py":
            raise ValueError(f"file {file!r} must be a Python source file (.py): the patcher "
                             "marks what it applied with a '#' comment")
        return file

    @field_validator("arms")
    @classmethod
    def _known_arms(cls, arms: list[str]) -> list[str]:
        bad = [a for a in arms if a not in PATCH_ARMS]
        if bad:
            raise ValueError(f"arms {bad} are not arms (allowed: {', '.join(PATCH_ARMS)})")
        return arms

    @model_validator(mode="after")
    def _changes_something(self) -> EnginePatch:
        if self.anchor.strip() == self.replacement.strip():
            raise ValueError("replacement equals anchor: the patch would change nothing")
        return self
