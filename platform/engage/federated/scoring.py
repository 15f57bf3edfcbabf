"""Anomaly scores for every accepted update of a round, with each client's history.

Per client and round: the update's norm, its cosine similarity to a robust centre (the
coordinate-wise median of the round's updates), and a distance-based outlier score (the
robust z-score of its distance to that centre, with median and MAD in place of mean and
standard deviation, so up to half the updates can be outliers without hiding). Two checks
catch what those cannot: near-identical updates from different clients (colluding
Sybils) and an update that repeats the client's last one or the last global change
(free riding). Scores are results; :mod:`engage.federated.policy` decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_MAD_TO_SIGMA = 1.4826
_EPS = 1e-12
MIN_FOR_NORM_Z = 4  # fewer updates: no norm z-score (log norms are robust with 4)
MIN_FOR_Z = 6  # fewer updates: no distance outlier score


@dataclass(frozen=True)
class ScoringConfig:
    z_threshold: float = 4.0
    cosine_min: float = 0.0
    duplicate_cosine: float = 0.9999
    history_decay: float = 0.7
    log_norm_floor: float = 0.1  # MAD floor of log norms: 10 % spread is never an outlier
    distance_floor: float = 0.1  # MAD floor of distances, as a share of their median


@dataclass(frozen=True)
class ClientScore:
    """One client's scores in one round. ``score >= 1`` exactly when ``flagged``."""

    client: str
    round: int
    norm: float
    cosine: float
    distance: float
    norm_z: float
    outlier_z: float
    score: float
    history: float
    reasons: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        return bool(self.reasons)


@dataclass
class _History:
    last_update: np.ndarray | None = None
    ewma: float = 0.0
    rounds: int = 0


@dataclass
class UpdateScorer:
    """Scores a round's updates; keeps per-client history across rounds."""

    config: ScoringConfig = field(default_factory=ScoringConfig)
    _history: dict[str, _History] = field(default_factory=dict)
    _last_global: np.ndarray | None = None

    def score(self, round_: int, clients: list[str], updates: np.ndarray) -> list[ClientScore]:
        """Scores of ``updates`` (rows, in the order of ``clients``) for ``round_``."""
        if len(clients) == 0:
            return []
        x = updates.astype(np.float64)
        centre = np.median(x, axis=0)
        norms = np.linalg.norm(x, axis=1)
        cosines = _cosine(x, centre)
        distances = np.linalg.norm(x - centre, axis=1)
        enough = len(clients) >= MIN_FOR_Z
        norm_z = 0 * norms
        if len(clients) >= MIN_FOR_NORM_Z:
            norm_z = _robust_z(np.log(norms + _EPS), self.config.log_norm_floor)
        floor = self.config.distance_floor * float(np.median(distances))
        outlier_z = _robust_z(distances, floor) if enough else 0 * norms
        duplicates = self._duplicates(x)
        out = []
        for i, client in enumerate(clients):
            reasons = self._reasons(
                client, x[i], norm_z[i], outlier_z[i], cosines[i], i in duplicates
            )
            raw = self._raw_score(norm_z[i], outlier_z[i], cosines[i], reasons)
            hist = self._history.setdefault(client, _History())
            hist.ewma = self.config.history_decay * hist.ewma + (
                1 - self.config.history_decay
            ) * min(raw, 10.0)
            hist.rounds += 1
            hist.last_update = x[i]
            out.append(
                ClientScore(
                    client,
                    round_,
                    float(norms[i]),
                    float(cosines[i]),
                    float(distances[i]),
                    float(norm_z[i]),
                    float(outlier_z[i]),
                    raw,
                    hist.ewma,
                    tuple(reasons),
                )
            )
        return out

    def observe_global(self, change: np.ndarray) -> None:
        """The change the server applied this round (a free rider's favourite copy)."""
        self._last_global = change.astype(np.float64)

    def _reasons(
        self, client: str, u: np.ndarray, nz: float, oz: float, cos: float, duplicate: bool
    ) -> list[str]:
        c, reasons = self.config, []
        if abs(nz) > c.z_threshold:
            reasons.append("norm_high" if nz > 0 else "norm_low")
        if oz > c.z_threshold:
            reasons.append("outlier")
        if cos < c.cosine_min:
            reasons.append("direction")
        if duplicate:
            reasons.append("duplicate")
        if self._stale(client, u):
            reasons.append("stale")
        return reasons

    def _raw_score(self, nz: float, oz: float, cos: float, reasons: list[str]) -> float:
        c = self.config
        parts = [abs(nz) / c.z_threshold, oz / c.z_threshold]
        parts.append((1.0 - cos) / (1.0 - c.cosine_min) if c.cosine_min < 1 else 0.0)
        raw = max(max(parts), 2.0 if {"duplicate", "stale"} & set(reasons) else 0.0)
        # Keep "score >= 1 exactly when flagged": an unflagged score stays below 1.
        return raw if reasons else min(raw, 0.999)

    def _duplicates(self, x: np.ndarray) -> set[int]:
        sims = _pairwise_cosine(x)
        np.fill_diagonal(sims, -1.0)
        rows, _ = np.nonzero(sims >= self.config.duplicate_cosine)
        return set(rows.tolist())

    def _stale(self, client: str, u: np.ndarray) -> bool:
        if np.linalg.norm(u) < _EPS:
            return False  # a zero update is the norm check's
        past = [self._last_global]
        hist = self._history.get(client)
        if hist is not None:
            past.append(hist.last_update)
        return any(
            p is not None and _cosine(u[None], p)[0] >= self.config.duplicate_cosine for p in past
        )


def _robust_z(values: np.ndarray, floor: float) -> np.ndarray:
    med = np.median(values)
    mad = _MAD_TO_SIGMA * np.median(np.abs(values - med))
    return (values - med) / max(mad, floor, _EPS)


def _cosine(x: np.ndarray, centre: np.ndarray) -> np.ndarray:
    denom = np.linalg.norm(x, axis=1) * np.linalg.norm(centre)
    return np.where(denom > _EPS, x @ centre / np.maximum(denom, _EPS), 0.0)


def _pairwise_cosine(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.where(n > _EPS, x / np.maximum(n, _EPS), 0.0)
    return unit @ unit.T
