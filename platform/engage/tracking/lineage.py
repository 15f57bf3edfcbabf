"""What a run needs to be reproduced: code version, environment, flattened spec.

``capture_lineage`` gathers the git state (commit, branch, the diff of a dirty tree), the
installed packages and the machine (Python, torch, CUDA, GPUs and driver, CPUs, memory);
``Lineage.artifacts()`` and ``Lineage.tags()`` turn it into what a run logs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIFF_CAP_BYTES = 1_000_000
_MAX_UNTRACKED = 1000
_GIT_TIMEOUT_S = 30
_NVIDIA_SMI_TIMEOUT_S = 5


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


@dataclass(frozen=True)
class GitState:
    """The git work tree a run started from; ``diff`` is ``git diff HEAD`` (tracked files)."""

    commit: str | None
    branch: str | None
    dirty: bool
    diff: str
    untracked: tuple[str, ...] = ()
    truncated: bool = False


@dataclass(frozen=True)
class Lineage:
    """Everything captured about where and with what a run ran."""

    git: GitState | None
    requirements: str
    system: Mapping[str, Any] = field(default_factory=dict)

    def artifacts(self) -> dict[str, str]:
        """Artifact file name -> text: requirements, system, and git state (diff when dirty)."""
        out = {
            "lineage/requirements.txt": self.requirements,
            "lineage/system.json": json.dumps(self.system, indent=2, sort_keys=True),
        }
        if self.git is not None:
            git = {k: v for k, v in vars(self.git).items() if k != "diff"}
            git["untracked"] = list(self.git.untracked)
            out["lineage/git.json"] = json.dumps(git, indent=2)
            if self.git.dirty:
                out["lineage/git.diff"] = self.git.diff
        return out

    def tags(self) -> dict[str, str]:
        """Run tags: git commit/branch/dirty, Python, torch, CUDA, GPUs, driver, host."""
        system = self.system
        tags = {
            "engage.version": str(system.get("engage")),
            "engage.python": str(system.get("python")),
            "engage.torch": str(system.get("torch", "none")),
            "engage.cuda": str(system.get("cuda") or "none"),
            "engage.cuda_available": str(system.get("cuda_available", False)).lower(),
            "engage.gpus": _count_names(system.get("gpus", [])) or "none",
            "engage.host": str(system.get("host")),
            "engage.cpus": str(system.get("cpu_count")),
        }
        for key in ("gpu_driver", "memory_total_bytes", "ray", "mlflow"):
            if system.get(key) is not None:
                tags[f"engage.{key}"] = str(system[key])
        if self.git is not None:
            if self.git.commit:
                tags["mlflow.source.git.commit"] = self.git.commit
            if self.git.branch:
                tags["engage.git.branch"] = self.git.branch
            tags["engage.git.dirty"] = str(self.git.dirty).lower()
            tags["engage.git.untracked"] = str(len(self.git.untracked))
        return tags


def capture_lineage(where: Path) -> Lineage:
    """Git state of ``where``, installed packages and the machine, captured once."""
    return Lineage(git_state(where), pip_freeze(), system_info())


def lineage_artifacts(where: Path) -> dict[str, str]:
    """``capture_lineage(where).artifacts()``; capture once when you need tags too."""
    return capture_lineage(where).artifacts()


def lineage_tags(where: Path) -> dict[str, str]:
    """``capture_lineage(where).tags()``; capture once when you need artifacts too."""
    return capture_lineage(where).tags()


def git_state(where: Path) -> GitState | None:
    """Commit, branch, tracked changes (``git diff HEAD``, capped) and untracked names.

    None outside a git work tree (or without git).
    """
    if _git(where, "rev-parse", "--is-inside-work-tree") != "true":
        return None
    commit = git_commit(where)
    branch = _git(where, "symbolic-ref", "--short", "-q", "HEAD") or None
    # On a branch without commits there is no HEAD: what is staged is the whole change.
    base = ["diff", "HEAD"] if commit else ["diff", "--cached"]
    raw, truncated = _capped(["git", "-C", str(where), *base, "--no-color", "--no-ext-diff"])
    diff = raw.decode("utf-8", errors="replace")
    if truncated:
        diff += f"\n# engage: diff truncated at {DIFF_CAP_BYTES:,} bytes\n"
    listed = _git(where, "ls-files", "--others", "--exclude-standard", "-z") or ""
    untracked = tuple(name for name in listed.split("\0") if name)[:_MAX_UNTRACKED]
    return GitState(commit, branch, bool(raw), diff, untracked, truncated)


def pip_freeze() -> str:
    """``name==version`` of every installed distribution, sorted; no subprocess."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            # The first one on sys.path wins, as for import.
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), f"{name}=={dist.version}")
    return "".join(f"{found[key]}\n" for key in sorted(found))


def system_info() -> dict[str, Any]:
    """Python, platform, host, CPUs, memory, torch/CUDA, GPUs and driver, ray and mlflow.

    Keys whose value is unknown (no GPU, no nvidia-smi, no psutil) are absent.
    """
    import torch

    import engage

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "engage": engage.__version__,
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "ray": _version("ray"),
        "mlflow": _version("mlflow"),
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        import psutil

        info["memory_total_bytes"] = psutil.virtual_memory().total
    except ImportError:
        pass
    gpus = _nvidia_smi()
    if gpus:
        info["gpus"] = [name for name, _ in gpus]
        info["gpu_driver"] = gpus[0][1]
    return {k: v for k, v in info.items() if v is not None}


@functools.cache
def _nvidia_smi() -> tuple[tuple[str, str], ...]:
    """(name, driver version) per GPU; empty without nvidia-smi. Cached: GPUs stay put."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    rows = [line.rsplit(",", 1) for line in out.splitlines() if "," in line]
    return tuple((name.strip(), driver.strip()) for name, driver in rows)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(where: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(where), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _capped(args: list[str]) -> tuple[bytes, bool]:
    """The first DIFF_CAP_BYTES of a command's output, and whether there was more.

    Reads no more than the cap, so a diff of a huge tracked file never fills memory.
    """
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return b"", False
    timer = threading.Timer(_GIT_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        data = proc.stdout.read(DIFF_CAP_BYTES + 1)
    finally:
        timer.cancel()
        proc.kill()
        proc.communicate()
    return data[:DIFF_CAP_BYTES], len(data) > DIFF_CAP_BYTES


def _count_names(names: list[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())
