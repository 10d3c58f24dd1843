"""The job JSON InferenceX's sweep workflow consumes: `run-sweep.yml`'s search-space-config.

`process_changelog.py` validates its output against `ChangelogMatrixEntry` and prints
`model_dump_json(by_alias=True, exclude_none=True)` (InferenceX 843c6254f
utils/process_changelog.py:659-661); the workflow reads its buckets with `fromJson`. These
models are that contract: the same fields in the same order with the same defaults, so the
document kvbench prints is byte for byte the one CI would (utils/matrix_logic/validation.py
:102-382 the rows, :931-971 the document). A field CI does not know (a kvbench extension such
as `kv-offload-backend.size-gb-per-rank`) is refused here, before any workflow sees it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvbench.changelog.entry import ChangelogEntry, E2eChangelogEntry

SpecDecoding = Literal["mtp", "draft_model", "none"]
_FINGERPRINT = r"^[0-9a-f]{64}$"


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Component(_Contract):
    """A router or other runtime component: validation.py:102-118."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)


class OffloadBackend(_Contract):
    """validation.py:121-137: name, and a version only where the backend has its own."""

    name: str = Field(min_length=1)
    version: str | None = Field(default=None, min_length=1)


class Worker(_Contract):
    """A prefill or decode role: validation.py:190-209 (the defaults CI writes back)."""

    num_worker: int = Field(alias="num-worker")
    tp: int
    pp: int = Field(default=1, gt=0, strict=True)
    dcp_size: int = Field(default=1, alias="dcp-size", gt=0, strict=True)
    pcp_size: int = Field(default=1, alias="pcp-size", gt=0, strict=True)
    ep: int
    dp_attn: bool = Field(alias="dp-attn")
    hardware: str | None = Field(default=None, min_length=1)
    additional_settings: list[str] | None = Field(default_factory=list,
                                                  alias="additional-settings")


class _Row(_Contract):
    image: str
    model: str
    model_prefix: str = Field(alias="model-prefix")
    precision: str
    framework: str


class FixedSingleNodeRow(_Row):
    """validation.py:150-187 (`SingleNodeMatrixEntry`)."""

    spec_decoding: SpecDecoding = Field(alias="spec-decoding")
    runner: str
    isl: int
    osl: int
    tp: int
    pp: int = Field(gt=0, strict=True)
    dcp_size: int = Field(alias="dcp-size", gt=0, strict=True)
    pcp_size: int = Field(alias="pcp-size", gt=0, strict=True)
    ep: int
    dp_attn: bool = Field(alias="dp-attn")
    conc: int | list[int]
    max_model_len: int = Field(alias="max-model-len")
    exp_name: str = Field(alias="exp-name")
    disagg: Literal[False]
    run_eval: bool = Field(alias="run-eval")
    eval_only: bool = Field(default=False, alias="eval-only")
    router: Component | None = None
    recipe_fingerprint: str | None = Field(default=None, alias="recipe-fingerprint",
                                           pattern=_FINGERPRINT)


class FixedMultiNodeRow(_Row):
    """validation.py:222-271 (`MultiNodeMatrixEntry`)."""

    spec_decoding: SpecDecoding = Field(alias="spec-decoding")
    runner: str
    isl: int
    osl: int
    prefill: Worker
    decode: Worker
    conc: list[int]
    max_model_len: int = Field(alias="max-model-len")
    exp_name: str = Field(alias="exp-name")
    disagg: bool
    run_eval: bool = Field(alias="run-eval")
    eval_only: bool = Field(default=False, alias="eval-only")
    eval_conc: int | None = Field(default=None, alias="eval-conc")
    eval_all_concs: bool = Field(default=False, alias="eval-all-concs")
    router: Component | None = None
    kv_p2p_transfer: str | None = Field(default=None, alias="kv-p2p-transfer", min_length=1)
    recipe_fingerprint: str | None = Field(default=None, alias="recipe-fingerprint",
                                           pattern=_FINGERPRINT)


class AgenticSingleNodeRow(_Row):
    """validation.py:274-321 (`SingleNodeAgenticMatrixEntry`); run-eval and eval-only only on
    eval rows."""

    runner: str
    tp: int
    pp: int = Field(gt=0, strict=True)
    dcp_size: int = Field(alias="dcp-size", gt=0, strict=True)
    pcp_size: int = Field(alias="pcp-size", gt=0, strict=True)
    ep: int
    dp_attn: bool = Field(alias="dp-attn")
    spec_decoding: SpecDecoding = Field(default="none", alias="spec-decoding")
    conc: int
    kv_offloading: Literal["none", "dram"] = Field(alias="kv-offloading")
    kv_offload_backend: OffloadBackend | None = Field(default=None, alias="kv-offload-backend")
    router: Component | None = None
    total_cpu_dram_gb: int = Field(alias="total-cpu-dram-gb", ge=0)
    duration: int
    exp_name: str = Field(alias="exp-name")
    scenario_type: str = Field(alias="scenario-type")
    run_eval: bool | None = Field(default=None, alias="run-eval")
    eval_only: bool | None = Field(default=None, alias="eval-only")
    recipe_fingerprint: str | None = Field(default=None, alias="recipe-fingerprint",
                                           pattern=_FINGERPRINT)


class AgenticMultiNodeRow(_Row):
    """validation.py:324-382 (`MultiNodeAgenticMatrixEntry`)."""

    spec_decoding: SpecDecoding = Field(alias="spec-decoding")
    runner: str
    prefill: Worker
    decode: Worker
    conc: list[int]
    kv_offloading: Literal["none", "dram"] = Field(alias="kv-offloading")
    kv_offload_backend: OffloadBackend | None = Field(default=None, alias="kv-offload-backend")
    router: Component | None = None
    kv_p2p_transfer: str | None = Field(default=None, alias="kv-p2p-transfer", min_length=1)
    total_cpu_dram_gb: int = Field(alias="total-cpu-dram-gb", ge=0)
    duration: int
    exp_name: str = Field(alias="exp-name")
    disagg: bool
    scenario_type: str = Field(alias="scenario-type")
    run_eval: bool | None = Field(default=None, alias="run-eval")
    eval_only: bool | None = Field(default=None, alias="eval-only")
    eval_conc: int | None = Field(default=None, alias="eval-conc")
    recipe_fingerprint: str | None = Field(default=None, alias="recipe-fingerprint",
                                           pattern=_FINGERPRINT)


def row_model(row: dict) -> type[_Row]:
    """The contract a generator row is held to: agentic or fixed-seq-len, single or multi-node
    (the member of the document's unions it validates as)."""
    agentic = row.get("scenario-type") == "agentic-coding"
    if row.get("prefill") is not None:
        return AgenticMultiNodeRow if agentic else FixedMultiNodeRow
    return AgenticSingleNodeRow if agentic else FixedSingleNodeRow


class ChangelogMetadata(_Contract):
    """validation.py:931-937: the refs as given and the added entries."""

    base_ref: str
    head_ref: str
    entries: list[ChangelogEntry]


class SearchSpace(_Contract):
    """The whole document (validation.py:940-971): benchmark rows bucketed by node kind and
    then by seq-len name or `agentic`, and the eval rows in four buckets, one per dispatch
    job of run-sweep.yml."""

    single_node: dict[str, list[FixedSingleNodeRow | AgenticSingleNodeRow]] = Field(
        default_factory=dict)
    multi_node: dict[str, list[FixedMultiNodeRow | AgenticMultiNodeRow]] = Field(
        default_factory=dict)
    evals: list[FixedSingleNodeRow] = Field(default_factory=list)
    agentic_evals: list[AgenticSingleNodeRow] = Field(default_factory=list)
    multinode_evals: list[FixedMultiNodeRow] = Field(default_factory=list)
    multinode_agentic_evals: list[AgenticMultiNodeRow] = Field(default_factory=list)
    changelog_metadata: ChangelogMetadata

    def to_json(self) -> str:
        """The document as process_changelog.py prints it (compact, aliases, no nulls)."""
        return self.model_dump_json(by_alias=True, exclude_none=True)


class E2eChangelogMetadata(ChangelogMetadata):
    entries: list[E2eChangelogEntry]


class E2eSearchSpace(SearchSpace):
    """The same document for a newer-layout checkout (inferencex-e2e/), whose rows carry the
    newer generator's fields (srt-recipe, node-count, eval-framework, ...). Its CI builds jobs
    with other programs (infx/matrix/plan.py), not verified here: the rows go out as the
    generator makes them, unchecked against a contract."""

    single_node: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    multi_node: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    evals: list[dict[str, Any]] = Field(default_factory=list)
    agentic_evals: list[dict[str, Any]] = Field(default_factory=list)
    multinode_evals: list[dict[str, Any]] = Field(default_factory=list)
    multinode_agentic_evals: list[dict[str, Any]] = Field(default_factory=list)
    changelog_metadata: E2eChangelogMetadata
