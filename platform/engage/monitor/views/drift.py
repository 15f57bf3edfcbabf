"""The Drift page: per deployment, detector results over time and the drift alerts.

Live drift checks (``engage.drift.watch``) report per detector and feature gauges;
the serving replica's aggregator logs their latest values to the deployment's monitoring
run in MLflow (experiment ``engage-serving``) as ``drift_statistic_<detector>_<feature>``,
``drift_threshold_<detector>_<feature>``, ``drift_detected_<detector>`` and
``drift_checks_<outcome>`` (the label-free prediction proxy as detector
``prediction_shift``). Alerts (``EngageDriftDetected``, ``EngageDriftCheckFailed``,
``EngagePredictionShift``, labelled with model and version, the moved features in the
event) are in the event store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from engage.monitor._schema import AlertRecord
from engage.monitor.store import EventStore
from engage.monitor.views.sources import local_time, named_events, reading_mlflow

# The first is the input drift alert whose features the page shows as "moved".
DRIFT_RULES = ("EngageDriftDetected", "EngageDriftCheckFailed", "EngagePredictionShift")
_STAT, _THRESHOLD, _DETECTED, _CHECKS = (
    "drift_statistic_",
    "drift_threshold_",
    "drift_detected_",
    "drift_checks_",
)


@dataclass(frozen=True)
class DriftView:
    """One deployment (or, without a monitoring run, one model) and what its checks found."""

    app: str | None
    model: str
    versions: tuple[str, ...]
    run_id: str | None = None
    latest: pd.DataFrame = field(default_factory=pd.DataFrame)  # detector, feature, ...
    history: pd.DataFrame = field(default_factory=pd.DataFrame)  # time, detector, feature, ...
    checks: dict[str, float] = field(default_factory=dict)  # outcome -> checks counted
    alerts: tuple[AlertRecord, ...] = ()
    moved: tuple[str, ...] = ()  # features of the newest drift alert
    moved_firing: bool = False  # ...and whether that alert still fires

    @property
    def title(self) -> str:
        """``deployment APP: MODEL version V`` (no deployment part without a monitoring run)."""
        where = f"deployment {self.app}: " if self.app else ""
        versions = ", ".join(self.versions) or "?"
        return f"{where}{self.model} version {versions}"


def drift_views(store: EventStore | None, client: Any | None) -> list[DriftView]:
    """Every monitored deployment, plus models that raised drift alerts without one."""
    alerts = [a for a in (store.alerts(limit=1000) if store else []) if a.rule in DRIFT_RULES]
    moved = _moved_features(store) if store else {}
    views = []
    for run in _monitoring_runs(client) if client is not None else []:
        views.append(_deployment(client, run, alerts, moved))
    covered = {v.model for v in views}
    by_model: dict[str, list[AlertRecord]] = {}
    for a in alerts:
        model = a.labels.get("model", "?")
        if model not in covered:
            by_model.setdefault(model, []).append(a)
    for model, found in by_model.items():
        versions = tuple(sorted({a.labels.get("version", "?") for a in found}))
        views.append(_with_moved(DriftView(None, model, versions, alerts=tuple(found)), moved))
    return views


def _monitoring_runs(client: Any) -> list[Any]:
    from engage.serve.controller import EXPERIMENT

    with reading_mlflow(client):
        experiment = client.get_experiment_by_name(EXPERIMENT)
        if experiment is None:
            return []
        return list(
            client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])
        )


def _deployment(client: Any, run: Any, alerts: list[AlertRecord], moved: dict) -> DriftView:
    tags = run.data.tags
    model = tags.get("engage.serve.model", "?")
    deployed = [v for k, v in sorted(tags.items()) if k.startswith("engage.serve.deployed.")]
    versions = tuple(dict.fromkeys(_version(label) for label in deployed)) or (
        tags.get("engage.serve.version", "?"),
    )
    keys = list(run.data.metrics)
    detectors = _detectors(keys)
    with reading_mlflow(client):
        history = _history(client, run.info.run_id, keys, detectors)
        checks = {
            k.removeprefix(_CHECKS): sum(
                m.value for m in client.get_metric_history(run.info.run_id, k)
            )
            for k in keys
            if k.startswith(_CHECKS)
        }
    features = moved.get(model, ((), False))[0]
    view = DriftView(
        tags.get("engage.serve.app"),
        model,
        versions,
        run.info.run_id,
        _latest(history, run.data.metrics, detectors, features),
        history,
        checks,
        tuple(a for a in alerts if a.labels.get("model") == model),
    )
    return _with_moved(view, moved)


def _version(label: str) -> str:
    """A deployed label ``name/3`` -> ``3``."""
    return label.rsplit("/", 1)[-1]


def _detectors(keys: list[str]) -> list[str]:
    """Detector names, longest first, so ``mmd_online_co2`` is not read as ``mmd``."""
    from engage.drift import detector_names

    found = {k.removeprefix(_DETECTED) for k in keys if k.startswith(_DETECTED)}
    return sorted(found | set(detector_names()), key=len, reverse=True)


def _split(key: str, prefix: str, detectors: list[str]) -> tuple[str, str] | None:
    rest = key.removeprefix(prefix)
    for d in detectors:
        if rest.startswith(d + "_"):
            return d, rest[len(d) + 1 :]
    return None


def _history(client: Any, run_id: str, keys: list[str], detectors: list[str]) -> pd.DataFrame:
    rows = []
    for key in keys:
        for prefix, series in ((_STAT, "statistic"), (_THRESHOLD, "threshold")):
            parts = _split(key, prefix, detectors) if key.startswith(prefix) else None
            if parts is None:
                continue
            for m in client.get_metric_history(run_id, key):
                time = local_time(m.timestamp)
                rows.append((time, m.step, parts[0], parts[1], series, float(m.value)))
    columns = ["time", "step", "detector", "feature", "series", "value"]
    return pd.DataFrame(rows, columns=columns).sort_values("time", ignore_index=True)


def _latest(
    history: pd.DataFrame,
    metrics: dict[str, float],
    detectors: list[str],
    moved: tuple[str, ...] = (),
) -> pd.DataFrame:
    """The newest statistic and threshold per detector and feature, with a per-feature verdict.

    The verdict is the feature's own: the detector's latest verdict is drift *and* the
    feature is one the drift alert names as moved (``all``, a multivariate test's single
    pseudo-feature, takes the detector's verdict). None when the detector reported none, or
    reported drift before any alert named the features.
    """
    columns = ["detector", "feature", "statistic", "threshold", "detector says drift", "checked"]
    if history.empty:
        return pd.DataFrame(columns=columns)
    last = history.sort_values("time").groupby(["detector", "feature", "series"]).last()
    table = last["value"].unstack("series").reset_index()
    when = last["time"].unstack("series").max(axis=1).reset_index(drop=True)
    detected = {d: metrics.get(_DETECTED + d) for d in detectors}
    table["detector says drift"] = [
        _feature_drifts(detected.get(d), f, moved)
        for d, f in zip(table["detector"], table["feature"], strict=True)
    ]
    table["checked"] = when
    for col in ("statistic", "threshold"):
        if col not in table:
            table[col] = float("nan")
    return table[columns]


def _feature_drifts(detected: float | None, feature: str, moved: tuple[str, ...]) -> bool | None:
    if detected is None or detected != detected:  # NaN: the check failed, no verdict
        return None
    if not detected or feature == "all":
        return bool(detected)
    return feature in moved if moved else None  # drift, but no alert has named features yet


def _moved_features(store: EventStore) -> dict[str, tuple[tuple[str, ...], bool]]:
    """model -> (features of its newest drift alert event, whether it fires)."""
    out: dict[str, tuple[tuple[str, ...], bool]] = {}
    for e in named_events(store, ("alert",), limit=5000):
        data = e.data or {}
        if data.get("rule") != DRIFT_RULES[0]:
            continue
        model = str((data.get("labels") or {}).get("model", "?"))
        features = tuple(str(f) for f in data.get("features") or ())
        out[model] = (features, data.get("state") == "firing")
    return out


def _with_moved(view: DriftView, moved: dict) -> DriftView:
    from dataclasses import replace

    features, firing = moved.get(view.model, ((), False))
    return replace(view, moved=features, moved_firing=firing)
