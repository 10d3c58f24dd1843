"""Data flows one way (DESIGN.md): each subpackage may import only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kvbench"

BASE = {"errors", "units", "bounds", "registry", "files", "redaction", "yamldoc", "expr",
        "__init__"}
# package -> kvbench packages it may import besides BASE (and itself)
ALLOWED: dict[str, set[str]] = {
    "recipe": set(),
    "hardware": {"recipe"},
    "matrix": {"recipe"},
    "models": {"recipe"},
    "plan": {"recipe", "matrix", "models", "hardware"},
    "engines": {"recipe", "matrix", "models", "hardware", "plan"},
    "launch": set(),
    "workload": set(),
    "replay": {"workload"},
    "metrics": set(),
    "telemetry": set(),
    "results": {"recipe", "matrix", "models", "hardware", "plan", "metrics", "replay",
                "telemetry"},
    "report": {"results"},
    # InferenceX's artifact formats from a job directory's files and its result
    "export": {"recipe", "matrix", "metrics", "results"},
    "changelog": {"recipe", "matrix"},
    "authoring": {"recipe", "matrix", "models", "hardware", "plan"},
    "sim": {"models", "hardware", "workload"},
    "calibrate": {"models", "hardware"},
    # capacity runs the simulator in-process (virtual time) and a server through replay; a
    # row's simulated engine settings are what its adapter starts it with (engines)
    "capacity": {"recipe", "matrix", "models", "hardware", "plan", "engines", "workload",
                 "replay", "metrics", "results", "sim"},
    # sweep forecasts the embedded engine's replays with the simulator in virtual time
    "sweep": {"recipe", "matrix", "models", "hardware", "plan", "engines", "launch", "workload",
              "replay", "metrics", "telemetry", "results", "report", "changelog", "sim"},
    "cli": {"*"},
}


def _package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _kvbench_imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "kvbench" and len(parts) > 1:
                out.add(parts[1])
    return out


def test_every_package_is_in_the_table():
    packages = {_package_of(p) for p in SRC.rglob("*.py")}
    unknown = packages - BASE - set(ALLOWED) - {"__main__"}
    assert not unknown, f"add these packages to ALLOWED with their layer: {sorted(unknown)}"


def test_imports_flow_one_way():
    violations = []
    for path in SRC.rglob("*.py"):
        pkg = _package_of(path)
        if pkg == "__main__":
            continue
        allowed = BASE if pkg in BASE else ALLOWED[pkg] | BASE | {pkg}
        if "*" in allowed:
            continue
        for imported in _kvbench_imports(ast.parse(path.read_text())):
            if imported not in allowed:
                violations.append(f"{path.relative_to(SRC)} imports kvbench.{imported}")
    assert not violations, "\n".join(violations)
