"""What a model version is monitored against, captured at training time.

A :class:`Reference` holds a sample of training rows (raw units, in time order), model
outputs for a sample of training windows, and per-feature statistics. It is saved as
``reference.npz`` (arrays, loaded with ``allow_pickle=False``) plus ``reference.json``
(names and statistics) and logged with the run under ``reference/``, so any deployment
of that version can be monitored without re-reading the training data.

Rows, not windows: drift is tested on the per-row distribution of each feature. Windows
of stride 1 overlap, so each window's *last* row is kept: that recovers every training row
once, in time order within a group (what the stuck-sensor check and block bootstrap need).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

BLOCK = 50
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
NPZ, JSON = "reference.npz", "reference.json"
ARTIFACT_PATH = "reference"
CONSTANT_SPAN = 5  # rows per window when constant spans are measured on rows


@dataclass(frozen=True)
class FeatureStats:
    """One feature's training statistics (raw units)."""

    mean: float
    std: float
    min: float
    max: float
    quantiles: dict[str, float]
    constant_window_rate: float  # share of training windows in which it never changed
    # Longest run of identical consecutive training rows (0: unknown, e.g. captured from
    # windows in random order): a live span up to twice as long is normal, not stuck.
    longest_constant: int = 0
    # Share of consecutive readings (rows in time order, or steps within a window) equal to
    # the one before, over ``repeat_pairs`` pairs (0: unknown): a quantised sensor repeats
    # by chance, and a run that rate makes likely is not a stuck sensor.
    repeat_rate: float = 0.0
    repeat_pairs: int = 0


@dataclass(frozen=True)
class Reference:
    """A model version's reference: rows ``(n, F)``, outputs ``(m, k)``, feature stats."""

    features: tuple[str, ...]
    rows: np.ndarray
    outputs: np.ndarray | None
    stats: dict[str, FeatureStats]
    window: int = 1
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rows.ndim != 2 or self.rows.shape[1] != len(self.features):
            raise ValueError(
                f"reference rows must have shape (n, {len(self.features)}), got {self.rows.shape}"
            )

    @property
    def mean(self) -> np.ndarray:
        """Per-feature training means, in feature order."""
        return np.array([self.stats[f].mean for f in self.features])

    @property
    def std(self) -> np.ndarray:
        """Per-feature training standard deviations (1.0 for a constant feature)."""
        return np.array([self.stats[f].std or 1.0 for f in self.features])

    def as_rows(self, x: np.ndarray) -> np.ndarray:
        """``x`` as float rows ``(n, F)``: windows ``(n, w, F)`` give their last row."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 3:
            x = x[:, -1, :]
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(
                f"expected rows with {len(self.features)} features {list(self.features)}, "
                f"got shape {x.shape}"
            )
        return x

    def save(self, folder: Path) -> Path:
        """Write ``reference.npz`` and ``reference.json`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {"rows": self.rows}
        if self.outputs is not None:
            arrays["outputs"] = self.outputs
        np.savez_compressed(folder / NPZ, **arrays)
        doc = {
            "features": list(self.features),
            "window": self.window,
            "stats": {k: vars(v) for k, v in self.stats.items()},
            "meta": self.meta,
        }
        (folder / JSON).write_text(json.dumps(doc, indent=2))
        return folder

    @classmethod
    def load(cls, folder: Path) -> Reference:
        """Read a reference saved by :meth:`save` (no pickle)."""
        folder = Path(folder)
        doc = json.loads((folder / JSON).read_text())
        with np.load(folder / NPZ, allow_pickle=False) as arrays:
            rows = arrays["rows"]
            outputs = arrays["outputs"] if "outputs" in arrays.files else None
        stats = {k: FeatureStats(**v) for k, v in doc["stats"].items()}
        return cls(tuple(doc["features"]), rows, outputs, stats, doc["window"], doc["meta"])


def capture_reference(
    x_train_raw: np.ndarray,
    outputs: np.ndarray | None,
    features: list[str] | tuple[str, ...],
    max_rows: int = 5000,
    seed: int = 0,
) -> Reference:
    """Build the reference of a model version from its raw (unnormalised) training inputs.

    Parameters
    ----------
    x_train_raw : numpy.ndarray
        Training windows ``(n, window, F)`` or rows ``(n, F)``, raw units, time order.
    outputs : numpy.ndarray or None
        Model outputs (logits or values) for the same samples, shape ``(n,)`` or ``(n, k)``.
    features : sequence of str
        Feature names, in column order.
    max_rows : int
        At most this many rows (and outputs) are kept, as contiguous blocks of
        ``BLOCK`` rows drawn across the whole training span (every group is represented,
        and time order survives within a block for the block bootstrap).
    seed : int
        Seed of the output subsample when outputs outnumber ``max_rows``.
    """
    x = np.asarray(x_train_raw, dtype=np.float64)
    window = x.shape[1] if x.ndim == 3 else 1
    rows = x[:, -1, :] if x.ndim == 3 else x
    if rows.shape[1] != len(features):
        raise ValueError(f"{len(features)} feature names for {rows.shape[1]} columns")
    stats = {
        f: _stats(rows[:, j], x[..., j] if x.ndim == 3 else None, x.ndim == 2)
        for j, f in enumerate(features)
    }
    kept = rows[_blocks(len(rows), max_rows, seed)].astype(np.float32)
    out = None
    if outputs is not None:
        out = np.asarray(outputs, dtype=np.float32)
        out = out[:, None] if out.ndim == 1 else out.reshape(len(out), -1)
        if len(out) > max_rows:
            pick = np.sort(np.random.default_rng(seed).choice(len(out), max_rows, replace=False))
            out = out[pick]
    meta = {"train_rows": len(rows), "kept_rows": len(kept)}
    return Reference(tuple(features), kept, out, stats, window, meta)


def _blocks(n: int, max_rows: int, seed: int) -> np.ndarray:
    """Sorted indices of ``max_rows // BLOCK`` non-overlapping blocks (all rows if n fits)."""
    if n <= max_rows:
        return np.arange(n)
    slots = n // BLOCK
    chosen = np.random.default_rng(seed).choice(slots, max(1, max_rows // BLOCK), replace=False)
    return (np.sort(chosen)[:, None] * BLOCK + np.arange(BLOCK)).ravel()


def _stats(values: np.ndarray, windows: np.ndarray | None, in_order: bool) -> FeatureStats:
    """Statistics of one feature; ``in_order``: ``values`` are consecutive rows in time
    order, so constant spans can be measured on them (windows of ``CONSTANT_SPAN`` rows)."""
    finite = values[np.isfinite(values)]
    q = np.quantile(finite, QUANTILES) if len(finite) else np.full(len(QUANTILES), np.nan)
    constant, longest, repeats = 0.0, 0, np.empty(0, dtype=bool)
    if windows is not None:
        constant = float(np.mean(np.ptp(windows, axis=1) == 0))
        repeats = (windows[:, 1:] == windows[:, :-1]).ravel()
    elif in_order and len(values) >= CONSTANT_SPAN:
        flat = np.ptp(sliding_window_view(values, CONSTANT_SPAN), axis=1) == 0
        constant, longest = float(flat.mean()), _longest_run(values)
        repeats = values[1:] == values[:-1]
    return FeatureStats(
        mean=float(finite.mean()),
        std=float(finite.std()),
        min=float(finite.min()),
        max=float(finite.max()),
        quantiles={f"{p:g}": float(v) for p, v in zip(QUANTILES, q, strict=True)},
        constant_window_rate=constant,
        longest_constant=longest,
        repeat_rate=float(repeats.mean()) if len(repeats) else 0.0,
        # Sliding windows share their steps: count one fresh pair per window, not w - 1.
        repeat_pairs=len(windows) if windows is not None else len(repeats),
    )


def _longest_run(values: np.ndarray) -> int:
    """Length of the longest run of identical consecutive values."""
    change = np.flatnonzero(np.diff(values) != 0)
    bounds = np.concatenate([[-1], change, [len(values) - 1]])
    return int(np.diff(bounds).max())


def log_reference(run: Any, reference: Reference) -> int:
    """Spool ``reference`` with ``run`` (a PipelineRun) under the artifact path ``reference/``.

    Returns the spool entry's seq. The files are copied into the spool before this returns.
    """
    with tempfile.TemporaryDirectory(prefix="engage-reference-") as tmp:
        reference.save(Path(tmp))
        return run.log_artifacts(Path(tmp), ARTIFACT_PATH)
