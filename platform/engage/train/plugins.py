"""Import a user's Python file that registers model builders (``model.module`` in a spec).

A project made by ``engage init`` keeps its own model in a file next to the spec; the spec
names it in ``model.module`` and engage imports it before it looks up ``model.name``, in the
driver and again in every Ray worker (each is a fresh process). The file is imported under
its own stem as module name, once per process, so a second import is free.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class ModelModuleError(ImportError):
    """A ``model.module`` file that is missing, clashes with an imported module or fails."""


def import_model_module(path: str | Path) -> ModuleType:
    """Import the Python file at ``path`` (once per process) and return the module.

    Parameters
    ----------
    path
        A ``.py`` file; relative paths resolve against the current directory (the spec
        loader passes an absolute path).

    Raises
    ------
    ModelModuleError
        If the file is missing or not a ``.py`` file, if its stem is already the name of a
        different imported module, or if executing it raises.
    """
    file = Path(path).expanduser().resolve()
    if file.suffix != ".py" or not file.is_file():
        raise ModelModuleError(f"{file} is not a Python file")
    name = file.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if _same_file(loaded, file):
            return loaded
        raise ModelModuleError(
            f"module name {name!r} is taken by {getattr(loaded, '__file__', None) or 'a built-in'}"
            f"; rename {file.name}"
        )
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ModelModuleError(f"{file} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # user code: any error is the user's to see, not a crash
        del sys.modules[name]
        raise ModelModuleError(f"{file.name} failed on import: {_describe(exc)}") from exc
    return module


def _same_file(module: ModuleType, file: Path) -> bool:
    origin = getattr(module, "__file__", None)
    return origin is not None and Path(origin).resolve() == file


def _describe(exc: Exception) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError at line {exc.lineno}: {exc.msg}"
    return f"{type(exc).__name__}: {exc}"
