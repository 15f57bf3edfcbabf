"""Anomaly scores for every accepted update of a round, with each client's history.

A round is scored in two passes. First the checks that need no statistics: a zero update
(free riding), near-identical updates from different clients (colluding Sybils), and an
update that repeats the client's last one or the last global change (stale free riding).
Those updates are left out of the reference set, so they cannot bend the statistics the
second pass computes over the rest:

* the update's norm, as a robust z-score of its log (median and MAD in place of mean and
  standard deviation, so up to half the updates can be outliers without hiding);
* a distance-based outlier score: the mean distance to the ``k`` nearest reference
  updates (``k`` half the reference set), as a robust z-score, catches updates far from
  every group of clients, not only from the centre;
* the cosine similarity to a robust centre (the reference updates' coordinate-wise median);
* with a validation probe (:class:`engage.federated.simulation.ValidationLoss`), the change
  of the loss on a small server-held validation set when the update alone is applied to
  the global model, as a robust z-score: a label-flipping client's update is of a normal
  size and direction but makes the model worse.

Clients differ legitimately (one household each), so the direction and validation checks
judge each client by its own history: an exponentially weighted average of its cosine and
of its validation z-score over the rounds it took part in. A benign household whose update
is odd in one round keeps a good record; a malicious client's record stays bad round after
round. One round alone still flags at twice the validation threshold. Scores are results;
:mod:`engage.federated.policy` decides.

The default thresholds are calibrated on benign runs (benchmarks/federated_defences.py and
docs/BENCHMARKS.md): no benign non-IID client of the no-attack runs scores 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_MAD_TO_SIGMA = 1.4826
_EPS = 1e-12
MIN_FOR_NORM_Z = 4  # fewer reference updates: no norm z-score (log norms are robust with 4)
MIN_FOR_Z = 6  # fewer reference updates: no distance outlier or validation z-score

# (global weights (d,), updates (k, d)) -> the validation-loss change of each update (k,)
ValidationProbe = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ScoringConfig:
    """The thresholds and floors of :class:`UpdateScorer` (from the spec's ``scoring``)."""

    z_threshold: float = 5.0  # |robust z| of the log norm that flags
    cosine_min: float = 0.0  # a cosine history below this flags
    duplicate_cosine: float = 0.9999
    history_decay: float = 0.8  # weight of the past in each client's history
    outlier_z: float = 10.0  # robust z of the k-nearest-neighbour distance that flags
    validation_z: float = 4.0  # validation z history that flags (one round: twice this)
    log_norm_floor: float = 0.2  # MAD floor of log norms: 20 % spread is never an outlier
    distance_floor: float = 0.25  # MAD floor of kNN distances, as a share of their median
    validation_floor: float = 0.05  # MAD floor of validation-loss changes (loss units)


@dataclass(frozen=True)
class ClientScore:
    """One client's scores in one round. ``score >= 1`` exactly when ``flagged``."""

    client: str
    round: int
    norm: float
    cosine: float
    distance: float  # mean distance to the k nearest reference updates
    norm_z: float
    outlier_z: float  # robust z of ``distance``
    score: float
    history: float  # the client's exponentially weighted score
    reasons: tuple[str, ...] = ()
    cosine_history: float = 1.0  # the client's weighted cosine to the round centres
    validation: float = 0.0  # validation-loss change with this update alone (0: no probe)
    validation_z: float = 0.0
    validation_history: float = 0.0

    @property
    def flagged(self) -> bool:
        """Whether any check flagged the update (``reasons`` is not empty)."""
        return bool(self.reasons)


@dataclass
class _History:
    last_update: np.ndarray | None = None
    ewma: float = 0.0
    rounds: int = 0
    cosine: float | None = None
    validation: float | None = None


@dataclass(frozen=True)
class _Round:
    """The per-update statistics of one round (arrays in the order of the updates)."""

    norms: np.ndarray
    cosines: np.ndarray
    knn: np.ndarray
    norm_z: np.ndarray
    outlier_z: np.ndarray
    validation: np.ndarray
    validation_z: np.ndarray
    has_validation: bool


@dataclass
class UpdateScorer:
    """Scores a round's updates; keeps per-client history across rounds."""

    config: ScoringConfig = field(default_factory=ScoringConfig)
    probe: ValidationProbe | None = None
    _history: dict[str, _History] = field(default_factory=dict)
    _last_global: np.ndarray | None = None

    def score(
        self,
        round_: int,
        clients: list[str],
        updates: np.ndarray,
        global_weights: np.ndarray | None = None,
    ) -> list[ClientScore]:
        """Scores of ``updates`` (rows, in the order of ``clients``) for ``round_``.

        ``global_weights`` (the model the updates start from) enables the validation probe.
        """
        if len(clients) == 0:
            return []
        x = updates.astype(np.float64)
        hard = self._hard_checks(clients, x)
        ref = np.array([not r for r in hard])
        if ref.sum() < 2:
            ref[:] = True
        validation = None
        if self.probe is not None and global_weights is not None and ref.sum() >= MIN_FOR_Z:
            validation = np.asarray(self.probe(global_weights, x), dtype=np.float64)
        n_ref = int(ref.sum())
        stats = self._statistics(x, ref, validation, n_ref)
        # Second pass: the statistics again without this round's suspects (median and MAD
        # clipping), so a coherent malicious minority pulls neither the centre nor the spread.
        suspects = np.array(
            [bool(self._reasons(stats, i, self._next(clients[i], stats, i))) for i in range(len(x))]
        )
        clean = ref & ~suspects
        if clean.sum() >= max(2, (ref.sum() + 1) // 2) and suspects[ref].any():
            stats = self._statistics(x, clean, validation, n_ref)
        out = []
        for i, client in enumerate(clients):
            hist = self._history.setdefault(client, _History())
            hist.cosine, hist.validation = self._next(client, stats, i)
            reasons = hard[i] + self._reasons(stats, i, (hist.cosine, hist.validation))
            raw = self._raw_score(stats, i, (hist.cosine, hist.validation), reasons)
            hist.ewma = self.config.history_decay * hist.ewma + (
                1 - self.config.history_decay
            ) * min(raw, 10.0)
            hist.rounds += 1
            hist.last_update = x[i]
            out.append(
                ClientScore(
                    client,
                    round_,
                    float(stats.norms[i]),
                    float(stats.cosines[i]),
                    float(stats.knn[i]),
                    float(stats.norm_z[i]),
                    float(stats.outlier_z[i]),
                    raw,
                    hist.ewma,
                    tuple(reasons),
                    float(hist.cosine),
                    float(stats.validation[i]),
                    float(stats.validation_z[i]),
                    float(hist.validation or 0.0),
                )
            )
        return out

    def _next(self, client: str, s: _Round, i: int) -> tuple[float, float | None]:
        """The client's cosine and validation histories with this round's values."""
        hist = self._history.get(client) or _History()
        decay = self.config.history_decay
        cosine = _ewma(hist.cosine, float(s.cosines[i]), decay)
        validation = hist.validation
        if s.has_validation:
            validation = _ewma(hist.validation, float(s.validation_z[i]), decay)
        return cosine, validation

    def observe_global(self, change: np.ndarray) -> None:
        """The change the server applied this round (a free rider's favourite copy)."""
        self._last_global = change.astype(np.float64)

    # -- first pass: no statistics ---------------------------------------------------------------
    def _hard_checks(self, clients: list[str], x: np.ndarray) -> list[list[str]]:
        norms = np.linalg.norm(x, axis=1)
        duplicates = self._duplicates(x)
        out = []
        for i, client in enumerate(clients):
            reasons = []
            if norms[i] < _EPS:
                reasons.append("norm_low")
            if i in duplicates:
                reasons.append("duplicate")
            if self._stale(client, x[i]):
                reasons.append("stale")
            out.append(reasons)
        return out

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

    # -- second pass: statistics over the reference updates -----------------------------------
    def _statistics(
        self, x: np.ndarray, ref: np.ndarray, validation: np.ndarray | None, n_ref: int
    ) -> _Round:
        """Statistics against the ``ref`` rows; ``n_ref`` (the first pass's reference size)
        decides which z-scores there are enough updates for."""
        c = self.config
        zeros = np.zeros(len(x))
        norms = np.linalg.norm(x, axis=1)
        centre = np.median(x[ref], axis=0)
        cosines = _cosine(x, centre)
        norm_z = zeros
        if n_ref >= MIN_FOR_NORM_Z:
            norm_z = _robust_z(np.log(norms + _EPS), ref, c.log_norm_floor)
        knn = _knn_distance(x, ref)
        outlier_z = zeros
        if n_ref >= MIN_FOR_Z:
            floor = c.distance_floor * float(np.median(knn[ref]))
            outlier_z = _robust_z(knn, ref, floor)
        validation_z = zeros
        if validation is not None:
            validation_z = _robust_z(validation, ref, c.validation_floor)
        return _Round(
            norms,
            cosines,
            knn,
            norm_z,
            outlier_z,
            zeros if validation is None else validation,
            validation_z,
            validation is not None,
        )

    def _reasons(self, s: _Round, i: int, history: tuple[float, float | None]) -> list[str]:
        c, reasons = self.config, []
        cosine, validation = history
        if abs(s.norm_z[i]) > c.z_threshold and s.norms[i] >= _EPS:
            reasons.append("norm_high" if s.norm_z[i] > 0 else "norm_low")
        if s.outlier_z[i] > c.outlier_z:
            reasons.append("outlier")
        if cosine < c.cosine_min:
            reasons.append("direction")
        if s.has_validation and (
            (validation or 0.0) > c.validation_z or s.validation_z[i] > 2 * c.validation_z
        ):
            reasons.append("validation")
        return reasons

    def _raw_score(
        self, s: _Round, i: int, history: tuple[float, float | None], reasons: list[str]
    ) -> float:
        c = self.config
        cosine, validation = history
        parts = [abs(s.norm_z[i]) / c.z_threshold, s.outlier_z[i] / c.outlier_z]
        if c.cosine_min < 1:
            parts.append((1.0 - cosine) / (1.0 - c.cosine_min))
        if s.has_validation:
            parts.append((validation or 0.0) / c.validation_z)
            parts.append(s.validation_z[i] / (2 * c.validation_z))
        raw = max(max(parts), 2.0 if {"duplicate", "stale"} & set(reasons) else 0.0)
        if reasons:
            return max(raw, 1.0)
        # Keep "score >= 1 exactly when flagged": an unflagged score stays below 1.
        return min(raw, 0.999)


def _ewma(past: float | None, value: float, decay: float) -> float:
    return value if past is None else decay * past + (1 - decay) * value


def _robust_z(values: np.ndarray, ref: np.ndarray, floor: float) -> np.ndarray:
    """``values`` as robust z-scores against the reference rows' median and MAD."""
    med = np.median(values[ref])
    mad = _MAD_TO_SIGMA * np.median(np.abs(values[ref] - med))
    return (values - med) / max(mad, floor, _EPS)


def _knn_distance(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Each row's mean distance to its ``k`` nearest reference rows (itself excluded),
    ``k`` half the reference set."""
    r = x[ref]
    sq = (x * x).sum(axis=1)
    d2 = sq[:, None] + sq[ref][None, :] - 2 * x @ r.T
    d = np.sqrt(np.maximum(d2, 0.0))
    idx = np.flatnonzero(ref)
    d[idx, np.arange(len(idx))] = np.inf  # a reference row is not its own neighbour
    k = max(1, (len(idx) - 1) // 2)
    if len(idx) < 2:
        return np.zeros(len(x))
    return np.sort(d, axis=1)[:, :k].mean(axis=1)


def _cosine(x: np.ndarray, centre: np.ndarray) -> np.ndarray:
    denom = np.linalg.norm(x, axis=1) * np.linalg.norm(centre)
    return np.where(denom > _EPS, x @ centre / np.maximum(denom, _EPS), 0.0)


def _pairwise_cosine(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.where(n > _EPS, x / np.maximum(n, _EPS), 0.0)
    return unit @ unit.T
