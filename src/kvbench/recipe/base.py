"""The strict base model of every recipe model (the rules they attach: recipe/rules.py).

Every recipe model forbids unknown keys: the InferenceX format is the source of truth for a
sweep, and a misspelt key silently falling back to a default would run the wrong benchmark."""

from __future__ import annotations

import os

# pydantic looks for plugins on the first model it builds by scanning the entry points of
# every installed distribution (pydantic/plugin/_loader.py, get_plugins): 0.05-0.1 s with
# an inference stack installed, on every `kvbench matrix` with a cold parse cache. kvbench
# uses no pydantic plugin, so the recipe models are built with the scan off (the documented
# PYDANTIC_DISABLE_PLUGINS); a value the user set is kept, and it is restored afterwards
# once the loader has built them (recipe/loader.py).
_PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"
_plugins_before = os.environ.get(_PLUGINS_ENV)
os.environ.setdefault(_PLUGINS_ENV, "__all__")

from pydantic import BaseModel, ConfigDict  # noqa: E402


class RecipeModel(BaseModel):
    """Frozen, kebab-case only, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


def restore_plugin_setting() -> None:
    """Put PYDANTIC_DISABLE_PLUGINS back as it was before the recipe models were built."""
    if _plugins_before is None:
        os.environ.pop(_PLUGINS_ENV, None)
    else:
        os.environ[_PLUGINS_ENV] = _plugins_before
