"""An srt-slurm recipe: the YAML that NVIDIA's `srtctl` renders into a Slurm job of Dynamo
(or direct vLLM) workers, and that InferenceX names in a multi-node row's `CONFIG_FILE=`.

The recipes are the user's: they lie in the InferenceX checkout the row's master config
belongs to (`benchmarks/multi_node/srt-slurm-recipes/` of its benchmark folder,
recipe/layout.py `benchmark_folder`), which the NVIDIA runners overlay onto the srt-slurm
checkout (`cp -rT` into `recipes/<x>`, or kept at their InferenceX path for the dynamo-trt
ones). A row names one as `recipes/<x>` or `benchmarks/multi_node/srt-slurm-recipes/<x>`
(recipe/layout.py `multinode_recipe_path`), optionally with a `:zip_override_<group>[i]`
selector, resolved as srtctl does (core/config.py `resolve_override_config`: `base`
deep-merged with the i-th slice of the group, lists of length one broadcast, the name
`<base name>_<group>_<i>`)."""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvbench import bounds, yamldoc
from kvbench.engines.srt_source import CLONES_ENV, read_recipe, source_for
from kvbench.errors import EngineError, shown, validation_message
from kvbench.plan.image import dynamo_mods, image_mods, resolved
from kvbench.recipe.layout import benchmark_folder, multinode_recipe_path

if TYPE_CHECKING:
    from kvbench.matrix import Job

_SELECTOR = re.compile(r"^zip_override_(?P<group>[\w.-]+)\[(?P<index>\d+)\]$")
_FORBID = ConfigDict(extra="forbid")


_GPUS_PER_NODE = Annotated[int, bounds.GPUS_PER_NODE.validator()]
_NODES = Annotated[int, bounds.NODES.validator()]
_WORKERS = Annotated[int, bounds.WORKER_COUNT.validator()]
_GPUS = Annotated[int, bounds.PARALLELISM.validator()]


class Resources(BaseModel):
    """srtctl core/schema.py ResourceConfig (the fields InferenceX's recipes set), each
    count within its physical range (kvbench/bounds.py): placement loops over them."""

    model_config = _FORBID
    gpu_type: str
    gpus_per_node: _GPUS_PER_NODE
    prefill_nodes: _NODES = 0
    decode_nodes: _NODES = 0
    agg_nodes: _NODES = 0
    prefill_workers: _WORKERS = 0
    decode_workers: _WORKERS = 0
    agg_workers: _WORKERS = 0
    gpus_per_prefill: _GPUS | None = None
    gpus_per_decode: _GPUS | None = None
    gpus_per_agg: _GPUS | None = None
    het_jobs: bool = False
    spread_workers: bool = False

    def gpus_per(self, mode: str) -> int:
        """schema.py ResourceConfig.gpus_per_<mode>: the explicit count, else the mode's nodes
        x gpus_per_node spread over its workers."""
        explicit = getattr(self, f"gpus_per_{mode}")
        if explicit:
            return int(explicit)
        workers = getattr(self, f"{mode}_workers")
        nodes = getattr(self, f"{mode}_nodes")
        return nodes * self.gpus_per_node // workers if workers else 0


class Recipe(BaseModel):
    """The top level of a recipe (srtctl core/schema.py `SrtConfig`, the union of its fields
    over the srt-slurm refs InferenceX's runners pin: sa-submission-q2-2026, v1.0.38-v1.0.50,
    a98738de, c180328b); the engine sections stay the free-form dicts srtctl turns into flags
    and environment."""

    model_config = _FORBID
    name: str
    model: dict[str, Any]
    resources: Resources
    # srtctl defaults a missing backend, and a backend without `type`, to SGLang
    # (schema.py BackendConfigField._deserialize: `value.get("type", "sglang")`)
    backend: dict[str, Any] = Field(default_factory=dict)
    frontend: dict[str, Any] = Field(default_factory=dict)
    benchmark: dict[str, Any] = Field(default_factory=dict)
    health_check: dict[str, Any] = Field(default_factory=dict)
    dynamo: dict[str, Any] = Field(default_factory=dict)
    srun_options: dict[str, Any] = Field(default_factory=dict)
    infra: dict[str, Any] = Field(default_factory=dict)
    sbatch_directives: dict[str, Any] = Field(default_factory=dict)
    slurm: dict[str, Any] = Field(default_factory=dict)
    identity: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    setup_script: str | None = None
    profiling: dict[str, Any] = Field(default_factory=dict)
    output: dict[str, Any] = Field(default_factory=dict)
    observability: dict[str, Any] = Field(default_factory=dict)
    telemetry: dict[str, Any] = Field(default_factory=dict)
    reporting: dict[str, Any] = Field(default_factory=dict)
    container_mounts: dict[str, Any] = Field(default_factory=dict)
    extra_mount: list[str] | None = None
    enable_config_dump: bool | None = None

    @model_validator(mode="after")
    def _read_shapes(self) -> Recipe:
        """What kvbench reads out of the free-form sections has the shape srtctl gives it
        (core/schema.py): a string backend type, mappings where it reads mappings, and a
        count of extra frontends within bounds."""
        kind = self.backend.get("type", "sglang")  # srtctl's default (backend_type)
        if not isinstance(kind, str):
            raise ValueError(f"backend.type {shown(kind)} must be a string (a backend name)")
        section = self.backend.get(f"{kind}_config")
        mappings = [(f"backend.{kind}_config", section)]
        if isinstance(section, dict):
            mappings += [(f"backend.{kind}_config.{m}", section.get(m))
                         for m in ("prefill", "decode", "aggregated")]
        mappings += [(f"backend.{m}_environment", self.backend.get(f"{m}_environment"))
                     for m in ("prefill", "decode", "aggregated")]
        mappings += [(f"frontend.{k}", self.frontend.get(k)) for k in ("args", "env")]
        for where, value in mappings:
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{where} {shown(value)} must be a mapping")
        extra = self.frontend.get("num_additional_frontends")
        if extra is not None and (problem := bounds.WORKER_COUNT.problem(extra)):
            raise ValueError(f"frontend.num_additional_frontends {shown(extra)}: {problem}")
        return self

    @property
    def backend_type(self) -> str:
        return str(self.backend.get("type") or "sglang")

    @property
    def frontend_type(self) -> str:
        return str(self.frontend.get("type") or "dynamo")

    def mode_config(self, mode: str) -> dict[str, Any]:
        """backend.<type>_config.<prefill|decode|aggregated> (schema.py get_config_for_mode)."""
        section = self.backend.get(f"{self.backend_type}_config") or {}
        return dict(section.get("aggregated" if mode == "agg" else mode) or {})

    def mode_environment(self, mode: str) -> dict[str, str]:
        key = "aggregated_environment" if mode == "agg" else f"{mode}_environment"
        return {k: str(v) for k, v in (self.backend.get(key) or {}).items()}


# srt-slurm src/srtctl/core/schema.py DynamoConfig (v1.0.45..v1.0.50): a recipe naming no
# version, hash or wheel installs this one
DYNAMO_DEFAULT_VERSION = "0.8.0"
# runners/launch_gb200-nv.sh:735-738 at InferenceX 843c6254f: every dynamo-sglang row is
# applied with `--setup-script install-torchao.sh`, which the job script exports as
# SRTCTL_SETUP_SCRIPT and srtctl prefers to the recipe's own (cli/do_sweep.py, v1.0.45:784-788)
RUNNER_SETUP_SCRIPTS = {("gb200-nv", "dynamo-sglang"): ("install-torchao.sh",
                                                         "runners/launch_gb200-nv.sh:735-736")}


def setup_script_of(recipe: Recipe, row: dict[str, Any]) -> tuple[str | None, str]:
    """The setup script the workers run first (srt-slurm cli/mixins/worker_stage.py
    _build_worker_preamble), and where it comes from: the runner's override, else the
    recipe's `setup_script`."""
    cluster = str(row.get("runner", "")).rsplit(":", 1)[-1]
    override = RUNNER_SETUP_SCRIPTS.get((cluster, str(row.get("framework"))))
    if override is not None:
        return override
    return recipe.setup_script, "the recipe's setup_script"


def recipe_image_mods(recipe: Recipe, config_file: str, row: dict[str, Any]
                      ) -> list[dict[str, Any]]:
    """What a recipe's workers change in the image before they start, in srtctl's order: the
    setup script (plan/data/image.yaml `setup-script` rules; one no rule knows is refused by
    name), then the Dynamo it installs where the frontend is Dynamo's (schema.py
    installs_dynamo: frontend.type dynamo and dynamo.install)."""
    out: list[dict[str, Any]] = []
    script, where = setup_script_of(recipe, row)
    if script:
        known = image_mods({}, multinode=True, setup_script=script)
        out += [{**m, "setup-script": script} for m in known] or [{
            "id": f"setup-script-{script}", "kind": "build", "setup-script": script,
            "source": f"{where} ({config_file})",
            "what": f"srt-slurm setup script {script}, which plan/data/image.yaml does not "
                    "describe"}]
    if recipe.frontend_type == "dynamo":
        dynamo = dict(recipe.dynamo)
        if not any(dynamo.get(k) for k in ("version", "hash", "wheel", "top_of_tree")):
            dynamo["version"] = DYNAMO_DEFAULT_VERSION
        out += dynamo_mods(dynamo, f"recipe {config_file}")
    return resolved(out, None)


def recipe_path(config_file: str, config_source: Path | None) -> tuple[Path, str | None]:
    """(the file, its selector) of a row's CONFIG_FILE value, in the checkout of the master
    config the row comes from (`config_source`)."""
    name, _, selector = config_file.partition(":")
    if config_source is None:
        raise EngineError(f"CONFIG_FILE {config_file}: the row names no master config file, "
                          "so no checkout to find its srt-slurm recipe in",
                          hint="select the row with --config-files from an InferenceX checkout")
    return multinode_recipe_path(name, benchmark_folder(config_source)), selector or None


def recipe_of(job: Job, config_file: str, runners: Any | None = None) -> Recipe:
    """The srt-slurm recipe `config_file` (the row's CONFIG_FILE value) names, found as
    InferenceX's runner finds it: in the checkout of the job's master config (the folders the
    runner copies over its srt-slurm clone), else in that clone, at the ref the runner checks
    out for the row (srt_source.py; `runners`: the runners file, to tell the runner script)."""
    path, selector = recipe_path(config_file, job.config_file)
    if path.is_file():
        return load_recipe(path, selector, config_file)
    source = source_for(job.row, config_file, runners)
    if source is None:
        raise EngineError(f"CONFIG_FILE {config_file}: no srt-slurm recipe at {path} (the "
                          "runner copies the checkout's benchmarks/multi_node/srt-slurm-recipes/"
                          " onto srt-slurm's recipes/; without the file `srtctl apply -f` has "
                          "nothing to render and the runner exits 1)")
    found = read_recipe(source, config_file.partition(":")[0])
    if found is None:
        raise EngineError(
            f"CONFIG_FILE {config_file}: not in the checkout ({path}); InferenceX's runner "
            f"reads it from its srt-slurm clone, {source.where}",
            hint=f"set {CLONES_ENV} to a clone of https://github.com/{source.repo}.git "
                 f"holding {source.ref or 'its default branch'}")
    text, where = found
    raw = yamldoc.load_text(text, f"srt-slurm recipe {config_file} ({where})", EngineError)
    return _validated(raw, selector, config_file, where)


@cache
def load_recipe(path: Path, selector: str | None, config_file: str) -> Recipe:
    """The recipe at `path` (with its zip_override `selector`), named `config_file` in
    messages; a missing file is a one-line refusal naming the path searched."""
    if not path.is_file():
        raise EngineError(f"CONFIG_FILE {config_file}: no srt-slurm recipe at {path}")
    raw = yamldoc.load_file(path, "srt-slurm recipe", EngineError)
    return _validated(raw, selector, config_file, str(path))


def _validated(raw: Any, selector: str | None, config_file: str, where: str) -> Recipe:
    if not isinstance(raw, dict):
        raise EngineError(f"recipe {config_file} ({where}): not a mapping of srtctl fields")
    if selector is not None:
        raw = _select(raw, selector, config_file)
    try:
        return Recipe.model_validate(raw)
    except ValidationError as e:
        raise EngineError(validation_message(e, f"recipe {config_file} ({where})")) from None


def _select(raw: dict[str, Any], selector: str, where: str) -> dict[str, Any]:
    m = _SELECTOR.match(selector)
    group = raw.get(f"zip_override_{m['group']}") if m else None
    if group is None or "base" not in raw:
        raise EngineError(f"{where}: selector {selector!r} names no zip_override group")
    lengths = _list_lengths(group)
    n = max((x for x in lengths if x != 1), default=1)
    index = int(m["index"])
    if index >= n:
        raise EngineError(f"{where}: {selector} is past the group's {n} variants")
    merged = deep_merge(raw["base"], _slice(group, index))
    if not isinstance(group.get("name"), list):
        merged["name"] = f"{raw['base'].get('name', 'unnamed')}_{m['group']}_{index}"
    return merged


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """srtctl core/config.py deep_merge: dicts merge, lists and scalars replace, None
    deletes."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _list_lengths(d: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for v in d.values():
        if isinstance(v, list):
            out.append(len(v))
        elif isinstance(v, dict):
            out += _list_lengths(v)
    return out


def _slice(d: dict[str, Any], index: int) -> dict[str, Any]:
    return {k: (v[0 if len(v) == 1 else index] if isinstance(v, list)
                else _slice(v, index) if isinstance(v, dict) else v) for k, v in d.items()}


def config_file_of(row: dict[str, Any]) -> str | None:
    for role in ("prefill", "decode"):
        for setting in (row.get(role) or {}).get("additional-settings") or []:
            name, _, value = str(setting).partition("=")
            if name == "CONFIG_FILE":
                return value
    return None
