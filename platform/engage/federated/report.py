"""A round's results as events on the one report path, and the closing verdict table.

Per round: job-level metrics (``fl_round``, accepted/rejected/flagged counts, the global
model's ``val_*``), one ``fl_client_score`` metric per client (labelled ``client``), and
lifecycle events for every verdict, rejection and quarantine, so each reaches MLflow, the
event store, Prometheus and the dashboard the same way.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from engage.events import Event
from engage.federated.server import RoundResult

STAGE = {"stage": "federated"}


def round_metrics(r: RoundResult) -> dict[str, float]:
    """The job-level metrics of one round (counts, seconds, the global model's ``val_*``)."""
    return {
        "fl_round": float(r.round),
        "fl_selected_clients": float(len(r.selected)),
        "fl_accepted_updates": float(sum(v.accepted for _, v in r.verdicts)),
        "fl_rejected_updates": float(len(r.rejected)),
        "fl_flagged_clients": float(len(r.flagged)),
        "fl_aggregated_updates": float(len(r.aggregated)),
        "fl_stragglers": float(len(r.stragglers)),
        "fl_dropouts": float(len(r.dropped)),
        "fl_round_skipped": float(r.skipped),
        "fl_round_seconds": r.seconds,
        **r.metrics,
    }


def round_events(r: RoundResult) -> list[Event]:
    """Every event of one round, in order: metrics, scores, rejections, verdicts."""
    step = r.round
    events = [Event("metric", k, v, step, labels=STAGE) for k, v in round_metrics(r).items()]
    for s in r.scores:
        labels = {**STAGE, "client": s.client}
        events.append(Event("metric", "fl_client_score", s.score, step, labels=labels))
    for delivery, v in r.verdicts:
        if not v.accepted:
            data = {"round": step, "reason": str(v.reason), "detail": v.detail}
            data["transit"] = delivery.attack or ""
            labels = {**STAGE, "client": v.client or "unknown"}
            events.append(Event("lifecycle", "fl_update_rejected", labels=labels, data=data))
    decisions = {d.client: d for d in r.decisions}
    for s in r.scores:
        d = decisions.get(s.client)
        data = {
            "round": step,
            "action": d.action if d else "aggregate",
            "flagged": s.flagged,
            "reasons": list(s.reasons),
            "score": round(s.score, 4),
            "norm": round(s.norm, 6),
            "cosine": round(s.cosine, 4),
            "outlier_z": round(s.outlier_z, 3),
            "history": round(s.history, 4),
        }
        events.append(
            Event("lifecycle", "fl_verdict", labels={**STAGE, "client": s.client}, data=data)
        )
        if d is not None and d.action == "quarantine":
            message = (
                f"client {s.client} quarantined after {d.flags} flags ({', '.join(s.reasons)})"
            )
            events.append(
                Event(
                    "lifecycle",
                    "fl_quarantined",
                    labels={**STAGE, "client": s.client},
                    data={"round": step, "flags": d.flags, "message": message},
                )
            )
    return events


def round_line(r: RoundResult, rounds: int, metric: str) -> str:
    """One line for the display: the round's metric, accepted and rejected counts, who
    was flagged, straggled or dropped.
    """
    reasons = Counter(str(v.reason) for v in r.rejected)
    parts = [f"round {r.round}/{rounds}: {metric} {r.metrics.get(metric, float('nan')):.4f}"]
    parts.append(f"{sum(v.accepted for _, v in r.verdicts)} accepted")
    if reasons:
        parts.append(
            f"{len(r.rejected)} rejected ("
            + ", ".join(f"{k} {n}" for k, n in sorted(reasons.items()))
            + ")"
        )
    if r.flagged:
        parts.append("flagged " + ", ".join(r.flagged))
    if r.stragglers:
        parts.append("stragglers " + ", ".join(r.stragglers))
    if r.dropped:
        parts.append("dropped " + ", ".join(r.dropped))
    if r.skipped:
        parts.append("aggregation skipped (too few updates)")
    return " · ".join(parts)


@dataclass
class ClientVerdict:
    """One client's record over the whole run."""

    client: str
    attack: str = ""
    sampled: int = 0
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)
    flagged: int = 0
    scores: list[float] = field(default_factory=list)
    quarantined_in: int | None = None

    @property
    def verdict(self) -> str:
        """``quarantined (round r)``, ``flagged`` or ``ok``."""
        if self.quarantined_in is not None:
            return f"quarantined (round {self.quarantined_in})"
        if self.flagged:
            return "flagged"
        return "ok"


def verdicts(
    rounds: list[RoundResult], clients: list[str], malicious: dict[str, str]
) -> list[ClientVerdict]:
    """Each client's record over ``rounds`` (updates from unknown senders in one row)."""
    table = {c: ClientVerdict(c, malicious.get(c, "")) for c in clients}
    rows: dict[str, ClientVerdict] = defaultdict(lambda: ClientVerdict("unknown"), table)
    for r in rounds:
        for c in r.selected:
            rows[c].sampled += 1
        for _, v in r.verdicts:
            row = rows[v.client or "unknown"]
            if v.accepted:
                row.accepted += 1
            else:
                row.rejected[str(v.reason)] += 1
        for s in r.scores:
            rows[s.client].scores.append(s.score)
            rows[s.client].flagged += s.flagged
        for d in r.decisions:
            if d.action == "quarantine":
                rows[d.client].quarantined_in = r.round
    return list(rows.values())


def verdict_table(rows: list[ClientVerdict]) -> str:
    """The per-client verdicts as a plain-text table (no markup characters)."""
    head = (
        "client",
        "simulated",
        "sampled",
        "accepted",
        "rejected",
        "flagged",
        "mean score",
        "max score",
        "verdict",
    )
    body = []
    for v in rows:
        rejected = ", ".join(f"{k} {n}" for k, n in sorted(v.rejected.items())) or "0"
        mean = sum(v.scores) / len(v.scores) if v.scores else float("nan")
        body.append(
            (
                v.client,
                v.attack or "honest",
                str(v.sampled),
                str(v.accepted),
                rejected,
                str(v.flagged),
                f"{mean:.2f}",
                f"{max(v.scores, default=float('nan')):.2f}",
                v.verdict,
            )
        )
    widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
        for row in (head, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
