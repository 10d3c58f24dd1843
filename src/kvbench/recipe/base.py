"""The strict base model and the row rules shared by several recipe models.

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

from kvbench.units import MAX_SESSION_LANES  # noqa: E402


class RecipeModel(BaseModel):
    """Frozen, kebab-case only, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class RuleError(ValueError):
    """A cross-field rule broken below the model that checks it; `loc` is the path from that
    model to the offending place, so the message can point at the exact row."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.loc = loc


def check_concurrency(row: object) -> None:
    """A row gives `conc-list` or both `conc-start` and `conc-end`, all positive."""
    start, end, values = row.conc_start, row.conc_end, row.conc_list  # type: ignore[attr-defined]
    has_range = start is not None or end is not None
    has_list = bool(values)
    if has_range and has_list:
        raise ValueError(
            "give either 'conc-list' or 'conc-start'/'conc-end', not both "
            f"(got conc-list={values}, conc-start={start}, conc-end={end})"
        )
    if not has_range and not has_list:
        raise ValueError("a row needs 'conc-list' or both 'conc-start' and 'conc-end'")
    if has_range:
        if start is None or end is None:
            missing = "conc-end" if end is None else "conc-start"
            raise ValueError(f"'conc-start' and 'conc-end' go together: '{missing}' is missing")
        if start <= 0 or end <= 0:
            raise ValueError(
                f"'conc-start' and 'conc-end' must be > 0 (got {start} and {end})"
            )
        if start > end:
            raise ValueError(f"'conc-start' ({start}) must be <= 'conc-end' ({end})")
        if end > MAX_SESSION_LANES:
            raise ValueError(f"'conc-end' {end} is above the most session lanes kvbench runs "
                             f"({MAX_SESSION_LANES:,})")
    if has_list:
        bad = [c for c in values if c <= 0]
        if bad:
            raise ValueError(f"'conc-list' entries must be > 0 (got {bad})")
        big = [c for c in values if c > MAX_SESSION_LANES]
        if big:
            raise ValueError(f"'conc-list' entries must be at most {MAX_SESSION_LANES:,}, the "
                             f"most session lanes kvbench runs (got {big})")


def check_dcp_divides_tp(row: object) -> None:
    """Decode context parallelism splits the TP group, so it must divide it."""
    tp, dcp = row.tp, row.dcp_size  # type: ignore[attr-defined]
    if tp is not None and tp % dcp != 0:
        raise ValueError(f"'tp' ({tp}) must be divisible by 'dcp-size' ({dcp})")


def check_kv_offload(row: object) -> None:
    """`kv-offload-backend` is required with `dram`, forbidden with `none` or unset."""
    mode, backend = row.kv_offloading, row.kv_offload_backend  # type: ignore[attr-defined]
    if mode is None:
        if backend is not None:
            raise ValueError("'kv-offload-backend' requires 'kv-offloading: dram'")
        return
    if mode == "none" and backend is not None:
        raise ValueError(
            f"'kv-offload-backend' ({backend.name}) is only allowed with "
            "'kv-offloading: dram', not 'none'"
        )
    if mode != "none" and backend is None:
        raise ValueError(f"'kv-offloading: {mode}' requires 'kv-offload-backend' (name, version?)")


def check_worker_hardware_pair(row: object) -> None:
    """Prefill and decode name their hardware together or not at all."""
    prefill, decode = row.prefill, row.decode  # type: ignore[attr-defined]
    if prefill is None or decode is None:
        return
    if bool(prefill.hardware) != bool(decode.hardware):
        raise ValueError(
            "'hardware' must be given for both 'prefill' and 'decode', or neither "
            f"(got prefill={prefill.hardware!r}, decode={decode.hardware!r})"
        )


def restore_plugin_setting() -> None:
    """Put PYDANTIC_DISABLE_PLUGINS back as it was before the recipe models were built."""
    if _plugins_before is None:
        os.environ.pop(_PLUGINS_ENV, None)
    else:
        os.environ[_PLUGINS_ENV] = _plugins_before
