"""A master-config entry: one config key of amd-master.yaml / nvidia-master.yaml."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from kvbench.recipe.base import RecipeModel, RuleError
from kvbench.recipe.components import ComponentMetadata
from kvbench.recipe.fields import CLUSTER_LABEL_PREFIX
from kvbench.recipe.patches import EnginePatch
from kvbench.recipe.rows import AgenticRow, FixedMultiNodeRow, FixedSingleNodeRow
from kvbench.recipe.scenarios import MultiNodeScenarios, SingleNodeScenarios

Row = FixedSingleNodeRow | FixedMultiNodeRow | AgenticRow


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

    def rows(self) -> Iterator[tuple[tuple[str | int, ...], Row]]:
        """Every search-space row with its path below `scenarios`."""
        scenarios = self.scenarios  # type: ignore[attr-defined]
        for name, blocks in (
            ("fixed-seq-len", scenarios.fixed_seq_len),
            ("agentic-coding", scenarios.agentic_coding),
        ):
            for b, block in enumerate(blocks or []):
                for r, row in enumerate(block.search_space):
                    yield ("scenarios", name, b, "search-space", r), row

    @model_validator(mode="after")
    def _entry_rules(self) -> _MasterEntry:
        multinode = self.multinode  # type: ignore[attr-defined]
        if self.scenarios.agentic_coding and not self.runner.startswith(CLUSTER_LABEL_PREFIX):  # type: ignore[attr-defined]
            raise RuleError(
                f"agentic-coding entries must run on a '{CLUSTER_LABEL_PREFIX}<name>' runner so "
                f"every point runs on one known hardware fleet (got runner {self.runner!r})",
                ("runner",),
            )
        if not multinode and self.kv_p2p_transfer is not None:
            raise RuleError(
                "'kv-p2p-transfer' is only valid with 'multinode: true'", ("kv-p2p-transfer",)
            )
        ids = [p.id for p in self.patches or []]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise RuleError(f"patch id {dup!r} is used twice; give each patch its own id",
                            ("patches", ids.index(dup), "id"))
        rows = list(self.rows())
        for field, attr in (("router", "router"), ("kv-p2p-transfer", "kv_p2p_transfer")):
            if getattr(self, attr) is None:
                continue
            for loc, row in rows:
                if getattr(row, attr, None) is not None:
                    raise RuleError(
                        f"'{field}' is declared at the top level and in this row; declare it "
                        "in one place only",
                        (*loc, field),
                    )
        for loc, row in rows:
            if not multinode and getattr(row, "kv_p2p_transfer", None) is not None:
                raise RuleError(
                    "'kv-p2p-transfer' is only valid with 'multinode: true'",
                    (*loc, "kv-p2p-transfer"),
                )
            if self.disagg and getattr(row, "worker", None) is not None:  # type: ignore[attr-defined]
                raise RuleError(
                    "'disagg: true' rows give 'prefill' and 'decode'; an aggregated 'worker' "
                    "(with 'num-nodes') needs 'disagg: false'", (*loc, "worker"))
            if isinstance(row, AgenticRow) and row.is_multinode != multinode:
                want = "'prefill' and 'decode'" if multinode else "'tp'"
                raise RuleError(
                    f"rows of a 'multinode: {str(multinode).lower()}' entry use {want}", loc
                )
        if self.disagg and self.kv_p2p_transfer is None:  # type: ignore[attr-defined]
            missing = [loc for loc, row in rows if getattr(row, "kv_p2p_transfer", None) is None]
            if missing or not rows:
                raise RuleError(
                    "'disagg: true' requires 'kv-p2p-transfer' at the top level or in every "
                    "search-space row",
                    missing[0] if missing else ("disagg",),
                )
        return self


class SingleNodeMasterEntry(_MasterEntry):
    multinode: Literal[False]
    disagg: Literal[False] = False
    scenarios: SingleNodeScenarios


class MultiNodeMasterEntry(_MasterEntry):
    multinode: Literal[True]
    disagg: bool = Field(default=False, strict=True)
    scenarios: MultiNodeScenarios


MasterEntry = SingleNodeMasterEntry | MultiNodeMasterEntry
