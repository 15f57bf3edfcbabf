"""Champion and candidate: promoting registered model versions and rolling them back.

A pipeline run registers each model that passes its gate as a new version with the alias
``candidate``. Promotion moves the alias ``champion`` to a version after comparing its gate
metric with the current champion's, and refuses a worse one unless forced. Every move
records who, when and why as version tags, and the registered model keeps the order of its
champions in the tag ``engage.champion_history`` so that a rollback knows where to go back.

Every function takes an explicit ``MlflowClient``; MLflow refusals become ``TrackingError``.
"""

from __future__ import annotations

import getpass
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engage.errors import TrackingError
from engage.tracking.catalog import (
    CHAMPION_ALIAS,
    HISTORY_TAG,
    GateMetric,
    champion_history,
    fmt_value,
    gate_metric,
    get_version,
    metric_value,
    model_aliases,
    refusals,
    registered_model,
    version_exists,
)

_MAX_HISTORY = 200
_MAX_REASON = 5000


@dataclass(frozen=True)
class Comparison:
    """A version's gate metric next to the champion's (values are None when not logged)."""

    metric: GateMetric
    version: str
    value: float | None
    champion: str
    champion_value: float | None

    @property
    def acceptable(self) -> bool:
        """Whether the candidate may replace the champion."""
        if self.value is None or self.champion_value is None:
            return False
        return not self.metric.worse(self.value, self.champion_value)

    def explain(self) -> str:
        """Why (or why not), one line per compared metric."""
        a, b = self.value, self.champion_value
        op = "vs" if a is None or b is None else "<" if a < b else ">" if a > b else "="
        return (
            f"{self.metric.name}: version {self.version} = {fmt_value(a)} {op} "
            f"champion version {self.champion} = {fmt_value(b)}"
        )


@dataclass(frozen=True)
class Promotion:
    """What a promotion did: the version that became champion and the one it replaced."""

    name: str
    version: str
    previous: str | None
    comparison: Comparison | None
    forced: bool
    reason: str


@dataclass(frozen=True)
class Rollback:
    """What a rollback did: the version restored as champion and the one it replaced."""

    name: str
    version: str
    rolled_back_from: str
    reason: str


def compare(client: Any, version: Any, champion: Any, metric: GateMetric) -> Comparison:
    """Compare a candidate's metrics against the champion's on the gate's metrics."""
    return Comparison(
        metric,
        str(version.version),
        metric_value(client, version.run_id, metric.name),
        str(champion.version),
        metric_value(client, champion.run_id, metric.name),
    )


def promote(
    client: Any,
    name: str,
    reason: str,
    *,
    version: str | None = None,
    force: bool = False,
    metric: str | None = None,
    direction: str | None = None,
    user: str | None = None,
) -> Promotion:
    """Point ``champion`` at ``version`` (default: the candidate) unless it is worse.

    Raises
    ------
    TrackingError
        Unknown model or version, a version that is already the champion, or one whose
        gate metric is worse than (or cannot be compared with) the champion's without
        ``force``.
    """
    reason = _require_reason(reason)
    chosen = get_version(client, name, version)
    number = str(chosen.version)
    model = registered_model(client, name)
    previous = model_aliases(model).get(CHAMPION_ALIAS)
    if previous == number:
        raise TrackingError(f"version {number} of {name!r} is already the champion")
    gate = str((chosen.tags or {}).get("engage.gate", ""))
    if not force and gate.startswith("gate failed"):
        raise TrackingError(
            f"version {number} of {name!r} failed its gate: {gate}",
            hint="pass --force to promote it anyway",
        )
    chosen_metric = gate_metric(client, chosen, metric, direction)  # checks the flags too
    comparison = None
    if previous is not None:
        champion = get_version(client, name, previous)
        if chosen_metric is not None:
            comparison = compare(client, chosen, champion, chosen_metric)
        if not force:
            _check(name, chosen, comparison, previous)
    tags = {
        "engage.promoted_at": _now(),
        "engage.promoted_by": user or _user(),
        "engage.promotion_reason": reason,
        "engage.previous_champion": previous or "none",
        "engage.promotion_forced": str(force).lower(),
    }
    if comparison is not None:
        tags["engage.promotion_comparison"] = comparison.explain()
    history = champion_history(model)
    if previous is not None and (not history or history[-1] != previous):
        history.append(previous)  # the alias was moved outside engage; keep it rollback-able
    history.append(number)
    with refusals(client):
        for key, value in tags.items():
            client.set_model_version_tag(name, number, key, value)
        client.set_registered_model_alias(name, CHAMPION_ALIAS, number)
        client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history[-_MAX_HISTORY:]))
    return Promotion(name, number, previous, comparison, force, reason)


def rollback(client: Any, name: str, reason: str, *, user: str | None = None) -> Rollback:
    """Move ``champion`` back to the champion before it, as recorded by ``promote``."""
    reason = _require_reason(reason)
    model = registered_model(client, name)
    current = model_aliases(model).get(CHAMPION_ALIAS)
    if current is None:
        raise TrackingError(
            f"model {name!r} has no champion to roll back",
            hint=f"promote a version first: engage models promote {name} --reason ...",
        )
    history = champion_history(model)
    if history and history[-1] == current:
        history.pop()
    while history and not version_exists(client, name, history[-1]):
        history.pop()  # a deleted version cannot come back
    if not history:
        raise TrackingError(
            f"model {name!r} has no previous champion to roll back to "
            f"(version {current} is its first)",
            hint=f"promote another version instead: engage models promote {name} --version N",
        )
    restored = history[-1]
    now, who = _now(), user or _user()
    with refusals(client):
        for key, value in {
            "engage.rollback_reason": reason,
            "engage.rolled_back_from": current,
            "engage.rolled_back_at": now,
            "engage.rolled_back_by": who,
        }.items():
            client.set_model_version_tag(name, restored, key, value)
        client.set_model_version_tag(name, current, "engage.demoted_at", now)
        client.set_model_version_tag(name, current, "engage.demotion_reason", reason)
        client.set_registered_model_alias(name, CHAMPION_ALIAS, restored)
        client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(history))
    return Rollback(name, restored, current, reason)


def _check(name: str, chosen: Any, comparison: Comparison | None, champion: str) -> None:
    hint = "pass --force to promote it anyway (the reason is recorded)"
    number = str(chosen.version)
    if comparison is None:
        raise TrackingError(
            f"no gate metric to compare version {number} of {name!r} with champion "
            f"version {champion}: its run logged no tracking.registration.gate",
            hint="pass --metric NAME --direction maximize|minimize, or --force",
        )
    metric = comparison.metric.name
    if comparison.value is None:
        raise TrackingError(f"version {number}'s run has no metric {metric!r}", hint=hint)
    if comparison.champion_value is None:
        raise TrackingError(
            f"champion version {champion}'s run has no metric {metric!r} to compare with",
            hint=hint,
        )
    if not comparison.acceptable:
        raise TrackingError(
            f"version {number} of {name!r} is worse than the champion on "
            f"{comparison.metric.describe()}: {comparison.explain()}",
            hint=hint,
        )


def _require_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise TrackingError("a reason is required", hint='--reason "why this change"')
    return reason[:_MAX_REASON]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"
