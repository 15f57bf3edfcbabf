"""What a run needs to be reproduced: code version, environment, flattened spec."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def git_commit(where: Path) -> str | None:
    """The commit checked out at ``where``, or None outside a git work tree."""
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment_tags() -> dict[str, str]:
    import torch

    import engage

    return {
        "engage.version": engage.__version__,
        "engage.python": sys.version.split()[0],
        "engage.torch": torch.__version__,
        "engage.platform": platform.platform(),
        "engage.host": socket.gethostname(),
    }


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"train": {"epochs": 3}}`` -> ``{"train.epochs": "3"}``; lists become JSON-ish text."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = str(value)
    return out
