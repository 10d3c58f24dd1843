from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.recipes import valid_recipe, write_recipe

from kvbench.errors import RecipeError
from kvbench.recipe import load_master_configs


@pytest.fixture
def recipe_errors(tmp_path: Path):
    """Apply `mutate` to the valid recipe, load it, and return the error lines."""

    def run(mutate) -> list[str]:
        data = valid_recipe()
        mutate(data)
        path = write_recipe(tmp_path, data)
        with pytest.raises(RecipeError) as info:
            load_master_configs([path])
        return info.value.errors

    return run
