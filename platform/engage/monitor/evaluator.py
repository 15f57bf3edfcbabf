"""Alert state with ``for``: turns rule results into pending, firing and resolved alerts.

The same state machine as a Prometheus alerting rule: a label set whose condition holds
becomes *pending* at that evaluation; it *fires* once the condition has held at every
evaluation for ``for_seconds``; a firing alert whose condition no longer holds is
*resolved*, a pending one goes back to *inactive* (nothing was ever announced for it).
The evaluator only decides: it returns transitions and the caller publishes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from engage.events import Event
from engage.monitor.rules import AlertRule
from engage.monitor.series import Labels, SeriesBuffer

AlertState = Literal["pending", "firing", "resolved", "inactive"]


@dataclass(frozen=True)
class AlertTransition:
    """An alert of ``rule`` for ``labels`` entered ``state`` at ``since``.

    ``value`` is the rule's value at that evaluation (the last one seen while active, for
    resolved and inactive); ``active_at`` is when its condition first held.
    """

    rule: AlertRule
    labels: Labels
    state: AlertState
    value: float
    since: float
    active_at: float

    @property
    def summary(self) -> str:
        """The rule's summary template filled in with this alert's labels and value."""
        return self.rule.render(self.rule.summary, self.labels, self.value)

    @property
    def description(self) -> str:
        """The rule's description template filled in with this alert's labels and value."""
        return self.rule.render(self.rule.description, self.labels, self.value)


@dataclass
class _Active:
    active_at: float
    value: float
    fired_at: float | None = None

    @property
    def firing(self) -> bool:
        """Whether the alert has fired (its condition held for the rule's ``for_seconds``)."""
        return self.fired_at is not None


class AlertEvaluator:
    """Evaluates ``rules`` over ``buffer`` and keeps each alert's state between calls."""

    def __init__(self, rules: Iterable[AlertRule], buffer: SeriesBuffer) -> None:
        self.rules = tuple(rules)
        self.buffer = buffer
        self._active: dict[tuple[str, Labels], _Active] = {}
        self._by_name = {rule.name: rule for rule in self.rules}

    def evaluate(self, now: float) -> list[AlertTransition]:
        """Evaluate every rule at ``now``; returns only the alerts whose state changed."""
        changes: list[AlertTransition] = []
        for rule in self.rules:
            results = rule.check(self.buffer, now)
            changes += self._update(rule, results, now)
        return changes

    def _update(
        self, rule: AlertRule, results: dict[Labels, float], now: float
    ) -> list[AlertTransition]:
        changes = []
        for labels, value in results.items():
            alert = self._active.get((rule.name, labels))
            if alert is None:
                alert = self._active[(rule.name, labels)] = _Active(now, value)
                changes.append(AlertTransition(rule, labels, "pending", value, now, now))
            alert.value = value
            if not alert.firing and now - alert.active_at >= rule.for_seconds:
                alert.fired_at = now
                changes.append(AlertTransition(rule, labels, "firing", value, now, alert.active_at))
        for name, labels in [key for key in self._active if key[0] == rule.name]:
            if labels not in results:
                alert = self._active.pop((name, labels))
                state: AlertState = "resolved" if alert.firing else "inactive"
                changes.append(
                    AlertTransition(rule, labels, state, alert.value, now, alert.active_at)
                )
        return changes

    def firing(self) -> list[AlertTransition]:
        """Every alert firing now, as of the last evaluation."""
        return self._current(firing=True)

    def pending(self) -> list[AlertTransition]:
        """Every alert pending now (its condition holds, its ``for`` not yet)."""
        return self._current(firing=False)

    def _current(self, firing: bool) -> list[AlertTransition]:
        state: AlertState = "firing" if firing else "pending"
        return [
            AlertTransition(
                self._by_name[name],
                labels,
                state,
                a.value,
                a.active_at if a.fired_at is None else a.fired_at,
                a.active_at,
            )
            for (name, labels), a in self._active.items()
            if a.firing is firing
        ]


ANNOUNCED = ("firing", "resolved")  # pending and inactive alerts were never announced


def alert_event(t: AlertTransition) -> Event:
    """The lifecycle event that announces a firing or resolved alert.

    ``job`` and ``run_id`` become the event's labels; ``data["labels"]`` holds the rest.
    A non-finite value (an infinite loss) is sent as None: JSON stores cannot hold it.
    """
    labels = dict(t.labels)
    run = {k: labels.pop(k) for k in ("job", "run_id") if k in labels}
    data = {
        "rule": t.rule.name,
        "state": t.state,
        "severity": t.rule.severity,
        "summary": t.summary,
        "value": t.value if math.isfinite(t.value) else None,
        "labels": labels,
        "since": t.since,
    }
    return Event("lifecycle", "alert", timestamp_ms=int(t.since * 1000), labels=run, data=data)
