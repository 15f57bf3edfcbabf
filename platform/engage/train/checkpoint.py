"""Atomic, verified training checkpoints, and the restore that skips a damaged one.

A checkpoint is a folder holding ``model.pt`` (the state: tensors and plain containers
only) and ``manifest.json`` (each file's size and SHA-256, written last). It is built under
a temporary name, every file synced, and renamed into place, so a reader never sees a half
written folder under its final name. Ray Train then copies the folder to the run's storage
file by file, which is not atomic (ray-project/ray #41700): a worker killed during that copy
leaves a folder whose manifest is missing or whose hash does not match, and
:func:`load_latest_valid` skips it, with a warning, for the previous valid one.

State is read with ``torch.load(..., weights_only=True)``: a file that holds anything but
tensors and plain containers (a pickled object that would run code on load) is refused
without running it. The RNG state (torch, CUDA, numpy, Python) travels as tensors and ints
for the same reason (:func:`rng_state`, :func:`set_rng_state`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engage.errors import TrainingError

PAYLOAD = "model.pt"
MANIFEST = "manifest.json"
FORMAT = 1
#: Ray Train names each checkpoint folder ``checkpoint_<timestamp>``; the names sort in time.
RAY_PREFIX = "checkpoint_"
_CHUNK = 1 << 20

_log = logging.getLogger(__name__)


class CheckpointError(TrainingError):
    """A checkpoint is incomplete, damaged, or holds more than tensors and containers."""

    headline = "invalid checkpoint"


@dataclass(frozen=True)
class Restored:
    """What :func:`load_latest_valid` found: the folder used, its state, and every newer
    folder skipped with the reason (newest first)."""

    path: Path
    state: dict[str, Any]
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, write: Any) -> None:
    with path.open("wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def write_checkpoint(directory: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` as a verified checkpoint folder at ``directory``, atomically.

    The payload and then the manifest (sizes and SHA-256) are written and synced in a
    sibling folder with a temporary name, which is renamed to ``directory`` last.

    Parameters
    ----------
    directory : Path
        Where the checkpoint folder goes; it must not exist yet, or be empty.
    state : dict
        Tensors and plain containers (dict, list, tuple, str, int, float, bool, None).

    Returns
    -------
    Path
        ``directory``.

    Raises
    ------
    CheckpointError
        If ``directory`` exists and is not empty.
    """
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise CheckpointError(f"checkpoint folder {directory} exists and is not empty")
    partial = directory.with_name(f".{directory.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    _write_synced(partial / PAYLOAD, lambda f: torch.save(state, f))
    manifest = {
        "format": FORMAT,
        "epoch": state.get("epoch"),
        "files": {
            PAYLOAD: {
                "bytes": (partial / PAYLOAD).stat().st_size,
                "sha256": _sha256(partial / PAYLOAD),
            }
        },
    }
    _write_synced(partial / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    _fsync_dir(partial)
    if directory.exists():
        directory.rmdir()
    os.replace(partial, directory)
    _fsync_dir(directory.parent)
    return directory


def verify(directory: Path) -> dict[str, Any]:
    """Check a checkpoint folder against its manifest; returns the manifest.

    Raises
    ------
    CheckpointError
        If the manifest is missing or unreadable, or a file it lists is missing or differs
        in size or SHA-256 (a truncated copy, a flipped byte).
    """
    directory = Path(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        raise CheckpointError(f"{directory.name}: no {MANIFEST} (incomplete write)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{directory.name}: unreadable {MANIFEST}: {exc}") from None
    if PAYLOAD not in files:
        raise CheckpointError(f"{directory.name}: {MANIFEST} lists no {PAYLOAD}")
    for name, expect in files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{directory.name}: {name} is missing")
        size = path.stat().st_size
        if size != expect.get("bytes"):
            raise CheckpointError(
                f"{directory.name}: {name} has {size} bytes, its manifest says {expect.get('bytes')}"
            )
        if _sha256(path) != expect.get("sha256"):
            raise CheckpointError(f"{directory.name}: {name} does not match its SHA-256")
    return manifest


def load_checkpoint(directory: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """The state of a verified checkpoint folder, read with ``weights_only=True``.

    Raises
    ------
    CheckpointError
        If :func:`verify` fails, or the payload holds anything but tensors and plain
        containers (the object is refused, never constructed).
    """
    directory = Path(directory)
    verify(directory)
    try:
        state = torch.load(directory / PAYLOAD, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{directory.name}: refused {PAYLOAD}: it holds more than tensors and plain "
            f"containers ({first})"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{directory.name}: {PAYLOAD} holds a {type(state).__name__}, not a dict"
        )
    return state


def candidates(root: Path, latest: Path | None = None) -> list[Path]:
    """The Ray Train checkpoint folders of a run, newest first; ``latest`` first if given.

    Ray Train's own record (``ray.train.get_checkpoint()``) only holds checkpoints whose
    report it processed before a failure: a worker killed right after its epoch's checkpoint
    was copied leaves a complete folder Ray never registered. Every folder is therefore a
    candidate; :func:`load_latest_valid` verifies each before use.

    Parameters
    ----------
    root : Path
        The run's storage folder holding its ``checkpoint_<timestamp>`` folders (the names
        sort in time).
    latest : Path, optional
        The checkpoint Ray Train reports as its latest, tried first when it lies elsewhere.
    """
    root = Path(root)
    found = sorted(
        (p for p in root.glob(f"{RAY_PREFIX}*") if p.is_dir()), key=lambda p: p.name, reverse=True
    )
    if latest is not None and Path(latest) not in found:
        found.insert(0, Path(latest))
    return found


def load_latest_valid(paths: Iterable[Path], map_location: Any = "cpu") -> Restored | None:
    """Load the first valid checkpoint of ``paths`` (newest first); None if none is valid.

    Each folder that fails :func:`load_checkpoint` is skipped with a warning on this
    module's logger and listed in :attr:`Restored.skipped`.
    """
    skipped: list[tuple[Path, str]] = []
    for path in paths:
        try:
            state = load_checkpoint(path, map_location)
        except CheckpointError as exc:
            _log.warning("skipping checkpoint %s: %s", path, exc.message)
            skipped.append((Path(path), exc.message))
            continue
        return Restored(Path(path), state, skipped)
    for path, reason in skipped:
        _log.warning("no valid checkpoint: %s was %s", path, reason)
    return None


def rng_state() -> dict[str, Any]:
    """The torch, CUDA, numpy and Python random states, as tensors and ints only."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": {
            "version": version,
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (the CUDA part only where CUDA is present)."""
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
