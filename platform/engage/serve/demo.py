"""Show live drift detection on a served model: send shifted traffic, wait for the alert.

Glue only: :func:`drift_demo` asks the app for its model, loads that version's drift
reference, lets :func:`engage.drift.scenarios.shifted_windows` shift it the way a faulty
sensor would, posts the windows to the app over HTTP, and waits, bounded, for the
``EngageDriftDetected`` alert that the replica's drift watcher reports (the serving hooks
route it to the event store). Detection, decisions and alerts are all drift's.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engage.drift import Reference
from engage.drift.scenarios import shifted_windows
from engage.drift.watch import DRIFT_RULE, mlflow_reference_loader
from engage.errors import EngageError

if TYPE_CHECKING:
    from engage.spec.models import DeploySpec

_PER_REQUEST = 50  # windows per POST
_POLL_S = 0.5
_ROUND_MIN, _ROUND_MAX = 200, 5000  # windows per round
_ROUND_MARGIN = 1.25  # sampling is random: a round a quarter larger than the mean need


def windows_per_round(spec: DeploySpec) -> int:
    """Shifted windows per round so that one round reaches the app's first drift check.

    A replica checks a version once ``drift.min_samples`` windows were sampled (and every
    ``drift.check_every`` after); only ``sampling.rate`` of the requests are sampled. A
    smaller round cannot raise the alert, yet the demo waits for it after each round.
    Between 200 and 5000 windows (200 when nothing is sampled).
    """
    rate = spec.sampling.rate
    if rate <= 0:
        return _ROUND_MIN
    needed = max(spec.drift.min_samples, spec.drift.check_every) / rate
    return max(_ROUND_MIN, min(_ROUND_MAX, math.ceil(needed * _ROUND_MARGIN)))


@dataclass(frozen=True)
class DriftAlert:
    """The drift alert the demo saw: which version, which features, the summary."""

    rule: str
    model: str
    version: str
    severity: str
    features: tuple[str, ...]
    summary: str
    windows_sent: int
    seconds: float


def drift_demo(
    url: str,
    home: str | Path,
    n: int = 200,
    *,
    timeout_s: float = 120.0,
    token: str | None = None,
) -> DriftAlert:
    """Send shifted windows to ``url`` (rounds of ``n``) until the drift alert fires.

    Parameters
    ----------
    url : str
        The served app, e.g. ``http://127.0.0.1:8000`` (what ``engage deploy`` printed).
    home : str or Path
        The engage home the app was deployed from (its event store and MLflow).
    n : int
        Shifted windows per round; rounds repeat until the alert or ``timeout_s``, so a
        low ``deploy.sampling.rate`` only makes it take longer.
    timeout_s : float
        Give up after this long with an :class:`~engage.errors.EngageError`.
    token : str or None
        Bearer token when the app requires one.
    """
    import requests

    from engage.monitor.store import EventStore

    started = time.monotonic()
    home = Path(home)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    meta = requests.get(f"{url.rstrip('/')}/metadata", headers=headers, timeout=10).json()
    model, version = meta["name"], str(meta["version"])
    windows = shifted_windows(_reference(home, meta), _window_length(meta), n)
    store = EventStore.open(home)
    sent = 0
    with requests.Session() as session:
        while time.monotonic() - started < timeout_s:
            for i in range(0, len(windows), _PER_REQUEST):
                body = json.dumps({"inputs": windows[i : i + _PER_REQUEST].tolist()})
                answer = session.post(f"{url.rstrip('/')}/predict", data=body, headers=headers)
                answer.raise_for_status()
            sent += len(windows)
            found = _wait_for_alert(store, model, version, started, timeout_s)
            if found is not None:
                alert, features = found
                return DriftAlert(
                    DRIFT_RULE, model, version, alert.severity, features, alert.summary,
                    sent, time.monotonic() - started,
                )  # fmt: skip
    raise EngageError(
        f"no {DRIFT_RULE} alert for {model}/{version} within {timeout_s:g} s "
        f"({sent} shifted windows sent)",
        hint="check deploy.drift.enabled and deploy.sampling.rate > 0 in the deploy spec, "
        "and the replica's log for 'no drift reference'",
    )


def _reference(home: Path, meta: dict) -> Reference:
    from engage.tracking import resolve_uri
    from engage.tracking.store import resolve_tracking_uri

    state = home / "serve" / str(meta.get("app", "")) / "deployment.json"
    uri = json.loads(state.read_text()).get("tracking_uri") if state.is_file() else None
    uri = resolve_uri(uri) if uri else resolve_tracking_uri(None, None, home)
    reference = mlflow_reference_loader(uri)(meta["name"], str(meta["version"]))
    if reference is None:
        raise EngageError(
            f"{meta['name']}/{meta['version']} has no drift reference",
            hint="serve a version trained by `engage run` (it logs reference/ with the model)",
        )
    return reference


def _window_length(meta: dict) -> int:
    shape = meta["signature"]["inputs"][0]["tensor-spec"]["shape"]
    return int(shape[1]) if len(shape) == 3 else 1


def _wait_for_alert(store, model: str, version: str, started: float, timeout_s: float):
    """(alert record, features) once the version's drift alert is open; None after ~5 s."""
    until = min(time.monotonic() + 5.0, started + timeout_s)
    while True:
        for alert in store.open_alerts():
            if alert.rule == DRIFT_RULE and alert.labels == {"model": model, "version": version}:
                return alert, _features(store, alert)
        if time.monotonic() >= until:
            return None
        time.sleep(_POLL_S)


def _features(store, alert) -> tuple[str, ...]:
    for event in reversed(store.events(alert.run_id, kinds=["lifecycle"], limit=200)):
        data = event.data or {}
        if data.get("rule") == DRIFT_RULE and data.get("labels") == alert.labels:
            return tuple(data.get("features") or ())
    return ()
