"""The batch path: a table of current rows checked against a reference in one go.

Input is flat, one row per time step with the model's feature columns (other columns
are ignored; rows in the order given). That is the format of training tables and of
what the sampler stores per request (a served window's last row), so no re-windowing is
needed: drift is tested on per-row feature distributions, as in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engage.drift.base import DriftResult, make_detector
from engage.drift.policy import DriftDecision, DriftPolicy
from engage.drift.quality import check_quality, quality_result
from engage.drift.reference import Reference

# ks_ess: KS at effective sample sizes with an effect size (dependence.py): rows of a
# table are autocorrelated, and a plain KS finds any two slices of one process different.
DEFAULT_DETECTORS = ("quality", "ks_ess")


@dataclass(frozen=True)
class BatchReport:
    """Every detector's result on the table, the decision, and what could not run."""

    rows: int
    results: tuple[DriftResult, ...]
    decision: DriftDecision
    missing: tuple[str, ...]
    skipped: tuple[str, ...]


def frame_rows(frame: Any, reference: Reference) -> tuple[np.ndarray, tuple[str, ...]]:
    """The reference's feature columns of ``frame`` as float rows; missing ones are NaN."""
    missing = tuple(f for f in reference.features if f not in frame.columns)
    cols = [
        frame[f].to_numpy(dtype=np.float64, na_value=np.nan)
        if f not in missing
        else np.full(len(frame), np.nan)
        for f in reference.features
    ]
    return np.column_stack(cols) if cols else np.empty((len(frame), 0)), missing


def check_batch(
    reference: Reference,
    frame: Any,
    detectors: Sequence[str] = DEFAULT_DETECTORS,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    policy: DriftPolicy | None = None,
) -> BatchReport:
    """Run ``detectors`` (registered names) on ``frame`` and decide.

    ``quality`` sees every row; the other detectors see the rows whose features are all
    finite, and are skipped (and say so) when a feature column is missing. A ``cusum``
    without an explicit ``ert`` gets ``20 * rows``, so a whole table of undrifted rows
    false-alarms with probability about 5 %.
    """
    rows, missing = frame_rows(frame, reference)
    options = options or {}
    results, skipped = [], []
    finite = rows[np.isfinite(rows).all(axis=1)]
    for name in detectors:
        if name == "quality":
            opts = dict(options.get(name, {}))
            report = check_quality(
                rows,
                reference,
                window=opts.get("window"),
                margin=opts.get("margin", 0.5),
                missing=missing,
            )
            results.append(quality_result(report, opts.get("max_rate", 0.01)))
            continue
        if missing:
            skipped.append(f"{name}: feature(s) {', '.join(missing)} missing")
            continue
        opts = dict(options.get(name, {}))
        if name == "cusum":
            opts.setdefault("ert", max(10_000.0, 20.0 * len(finite)))
        detector = make_detector(name, **opts).fit(reference)
        if len(finite) < 2:
            results.append(DriftResult.failed(name, f"only {len(finite)} complete rows"))
            continue
        results.append(detector.check(finite))
    decision = (policy or DriftPolicy()).decide(results, n_features=len(reference.features))
    return BatchReport(len(rows), tuple(results), decision, missing, tuple(skipped))
