"""Recipe authoring: edits to master configs that the seed pull requests made by hand."""

from __future__ import annotations

from kvbench.authoring.mirror import ArmOutcome, MirrorResult, mirror_text

__all__ = ["ArmOutcome", "MirrorResult", "mirror_text"]
