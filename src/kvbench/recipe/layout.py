"""Where an InferenceX checkout keeps its files, in either layout, and what each file is.

Classic (SemiAnalysisAI/InferenceX 843c6254f): `configs/` and `perf-changelog.yaml` at the
repository root. Newer (fabe70b7 and later): the benchmark lives under `inferencex-e2e/`, with
`inferencex-e2e/configs/` and `inferencex-e2e/perf-changelog.yaml`; its `configs/` also holds
`ci-priority.yaml` (CI scheduling policy), `CONFIGS.md` (prose), `deprecated/` (retired
configs) and `srt-recipes/` (srt-slurm launch recipes), none of which is a master config or a
runners file.

Light on purpose (pathlib only): the CLI calls it at start-up to fill in default paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

E2E_DIR = "inferencex-e2e"
CONFIGS_DIR = "configs"
RUNNERS_FILE = "runners.yaml"
CHANGELOG_FILE = "perf-changelog.yaml"
CI_PRIORITY_FILE = "ci-priority.yaml"
MASTER_GLOB = "*master*.yaml"
# the multi-node srt-slurm recipes, under the benchmark folder; rows name them under
# srt-slurm's own folder name (`recipes/<x>`) or by this path
MULTI_NODE_RECIPES = "benchmarks/multi_node/srt-slurm-recipes"
SRT_SLURM_RECIPES = "recipes/"

NO_FILES_HINT = ("pass --config-files FILE..., or run it at the root of an InferenceX checkout "
                 "(configs/ or inferencex-e2e/configs/)")

# What `validate` says about each file or folder that is not a recipe.
NOT_RECIPES = {
    "changelog": "a perf changelog, not a config: kvbench changelog check --head-file {path} "
                 "validates it",
    "ci-priority": "the CI priority policy (scores for scheduling runs), not a config",
    "docs": "documentation, not a config",
    "deprecated": "retired configs, kept for history; the generator does not read them",
    "srt-recipes": "srt-slurm launch recipes, named by rows' srt-recipe; not master configs",
}


@dataclass(frozen=True, slots=True)
class Checkout:
    """The benchmark's base folder (the checkout root, or its `inferencex-e2e/`)."""

    base: Path
    layout: str  # "classic" or "e2e"

    @property
    def configs(self) -> Path:
        return self.base / CONFIGS_DIR

    @property
    def runners(self) -> Path:
        return self.configs / RUNNERS_FILE

    @property
    def changelog(self) -> Path:
        return self.base / CHANGELOG_FILE

    def master_configs(self) -> list[Path]:
        """`configs/*master*.yaml`, sorted (amd before nvidia, as the tests and CI pass them)."""
        return sorted(p for p in self.configs.glob(MASTER_GLOB) if p.is_file())


def find_checkout(start: Path | None = None) -> Checkout | None:
    """The checkout whose root (or benchmark folder, or `configs/`) is `start` (default:
    the working directory); None when neither layout is there."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, here.parent):
        e2e = folder / E2E_DIR
        if (e2e / CONFIGS_DIR / RUNNERS_FILE).is_file():
            return Checkout(e2e, "e2e")
        if (folder / CONFIGS_DIR / RUNNERS_FILE).is_file():
            newer = folder.name == E2E_DIR or (folder / "infx").is_dir()
            return Checkout(folder, "e2e" if newer else "classic")
    return None


def kind_of(path: Path) -> str | None:
    """The kind of a non-recipe file or folder (a NOT_RECIPES key), or None for a file that
    may be a master config or runners file (the caller sniffs its content)."""
    name = path.name
    if path.is_dir():
        if name == "deprecated" or "deprecated" in path.parts[:-1]:
            return "deprecated"
        if name == "srt-recipes":
            return "srt-recipes"
        return None
    parts = set(path.parts[:-1])
    if "deprecated" in parts:
        return "deprecated"
    if "srt-recipes" in parts:
        return "srt-recipes"
    if name == CI_PRIORITY_FILE:
        return "ci-priority"
    if path.suffix.lower() in (".md", ".txt", ".rst"):
        return "docs"
    if name.startswith("perf-changelog"):
        return "changelog"
    return None


def benchmark_folder(config_file: Path) -> Path:
    """The benchmark folder of the checkout a master config belongs to, where its recipes
    are: `configs/`'s parent (the repository root in the classic layout, `inferencex-e2e/` in
    the newer; a root's `.github/configs/` too), else the config file's own folder (a copy of
    the configs outside a checkout, as tests/data/inferencex/ keeps them)."""
    folder = Path(config_file).resolve().parent
    if folder.name == CONFIGS_DIR:
        folder = folder.parent
        if folder.name == ".github":
            folder = folder.parent
    return folder


def multinode_recipe_path(name: str, base: Path) -> Path:
    """Where the srt-slurm recipe a multi-node row names with `CONFIG_FILE=<name>` (its
    `:selector` stripped) lies in the checkout whose benchmark folder is `base`, as the
    NVIDIA runners find it (InferenceX 843c6254f): `recipes/<x>` is srt-slurm's recipes/
    folder, onto which the runner copies the checkout's
    `benchmarks/multi_node/srt-slurm-recipes/<x>` (runners/launch_gb300-nv.sh:152-153,
    launch_h200-dgxc-slurm.sh:20-21); a `benchmarks/multi_node/srt-slurm-recipes/<x>` name
    is the checkout's own path, which the runner copies to the same path in the srt-slurm
    checkout (launch_gb300-nv.sh:272-274); any other name is taken as it is, under `base`."""
    prefix = MULTI_NODE_RECIPES + "/"
    if name.startswith(prefix):
        return base / name
    return base / MULTI_NODE_RECIPES / name.removeprefix(SRT_SLURM_RECIPES)


def srt_recipe_path(row: dict, config_file: Path | None) -> tuple[str, Path | None] | None:
    """A row's `srt-recipe` and where it lies in the checkout of `config_file` (the name is
    relative to the benchmark folder: InferenceX inferencex-e2e
    benchmarks/single_node/srt-slurm-recipes/...); None for a row without one. The path is
    None when the checkout does not hold the file (some recipes ship in the runtime image)."""
    name = row.get("srt-recipe")
    if not name:
        return None
    if config_file is None:
        return name, None
    path = benchmark_folder(config_file) / name
    return name, path if path.is_file() else None
