"""Built-in sequential detectors (pure numpy/scipy, no alibi-detect): CUSUM.

``cusum`` watches every feature with four one-sided CUSUMs on standardised values z:
mean up (``z - k``), mean down (``-z - k``), variance up (``z**2 - c_up``) and variance
down (``c_down - z**2``), where ``k`` is half the mean shift to detect (in reference
standard deviations) and ``c`` the log-likelihood-ratio constants for a standard deviation
``scale`` times (or divided by) the reference's. Standardising is a normal-score
transform through the reference's empirical CDF, re-centred on the reference, so skewed
and rounded sensors (power, CO2) behave like N(0, 1) under no drift.

Thresholds from a target ERT (expected rows between false alarms), by simulation on the
reference: ``n_sims`` streams of ``sim_length`` rows are bootstrapped from the reference
(i.i.d., or moving blocks of ``block`` rows when the live stream is autocorrelated); for
each of the S statistics the run length is taken as exponential, so
``P(max over L rows <= h) = exp(-L / ARL(h))`` turns the simulated maxima into ARL(h) on
the observed range; ``log ARL`` is fitted linear in ``h`` (CUSUM run lengths grow
exponentially with ``h``) and solved for ``ERT * S``. False-alarm rates add across
statistics, so the detector as a whole has an ERT of about ``ert``.

Change-point semantics: an alarm is a change, signalled once and dated where the crossing
statistic last left zero. The next ``relearn`` rows are learned as the new regime (the
restarted reference CUSUMs keep watching them, so a change of another feature, or one that
began after the alarm, is still signalled); then the CUSUMs re-baseline on the regime's own
rows, which grow (refitted as they double, up to ``10 * relearn``) while it lasts. A lasting
shift is therefore one alarm and a drifted state, not an alarm every few rows; a return to
the reference ends the state without an alarm. See :class:`CusumDetector` and
:mod:`engage.drift.regimes`. :class:`ErrorCusum` (labelled errors) keeps the simple
restart-after-alarm CUSUM.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from engage.drift.base import DriftDetector, DriftResult, FeatureDrift, Regime, register_detector
from engage.drift.reference import Reference
from engage.drift.regimes import Bounds, Learned, Pending, heavily_tied

STATS = ("mean_up", "mean_down", "var_up", "var_down")
_LATER = 10  # rows after a restart from which a crossing's evidence is a change of its own
_OPPOSITE = {"mean_up": "mean_down", "mean_down": "mean_up"}


class NormalScore:
    """Raw values -> z through each feature's reference ECDF (mid-ranks), re-centred."""

    def __init__(self, rows: np.ndarray) -> None:
        self.sorted = np.sort(rows, axis=0)
        z = self._raw(rows)
        self.mean, self.std = z.mean(axis=0), z.std(axis=0)
        self.std[self.std == 0] = 1.0

    def _raw(self, x: np.ndarray) -> np.ndarray:
        n = len(self.sorted)
        u = np.empty(x.shape)
        for j in range(x.shape[1]):
            col = self.sorted[:, j]
            lo = np.searchsorted(col, x[:, j], "left")
            hi = np.searchsorted(col, x[:, j], "right")
            u[:, j] = (lo + hi) / 2.0
        return ndtri(np.clip(u, 0.5, n - 0.5) / n)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (self._raw(x) - self.mean) / self.std


def increments(z: np.ndarray, k: float, scale: float) -> np.ndarray:
    """The four CUSUM increments of z ``(..., n, F)`` as ``(..., n, F * 4)``."""
    c_up, c_down = _variance_constants(scale)
    z2 = z * z
    parts = (z - k, -z - k, z2 - c_up, c_down - z2)
    return np.concatenate(parts, axis=-1)


def cusum_path(inc: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``S_t = max(0, S_{t-1} + inc_t)`` along axis -2 in closed form (Lindley)."""
    c = np.cumsum(inc, axis=-2)
    lowest = np.minimum.accumulate(c, axis=-2)
    return c + np.maximum(start[..., None, :], -lowest)


def calibrate(inc: np.ndarray, ert_each: float, length: int, floor: float = 1.0) -> np.ndarray:
    """Threshold per statistic for an ARL of ``ert_each`` from simulated increments.

    ``inc`` has shape ``(n_sims, length, S)``. See the module docstring for the method.
    """
    maxima = cusum_path(inc, np.zeros(inc.shape[::2])).max(axis=1)  # (n_sims, S)
    out = np.empty(inc.shape[-1])
    for s in range(inc.shape[-1]):
        m = np.sort(maxima[:, s])
        cdf = (np.arange(1, len(m) + 1) - 0.5) / len(m)
        keep = (cdf > 0.2) & (cdf < 0.97)
        h, arl = m[keep], -length / np.log(cdf[keep])
        if len(np.unique(h)) < 3:
            out[s] = max(m[-1], floor) * math.log(ert_each / length + math.e)
            continue
        slope, icpt = np.polyfit(h, np.log(arl), 1)
        target = (math.log(ert_each) - icpt) / max(slope, 1e-6)
        out[s] = max(target, m[-1] if ert_each > length * len(m) else 0.0, floor)
    return out


@register_detector("cusum")
class CusumDetector(DriftDetector):
    """Per-feature CUSUMs on mean and variance of normal scores; thresholds from an ERT.

    A change-point detector with regimes: an alarm away from the reference regime is
    signalled at once and dated where the crossing statistic last left zero; the next
    ``relearn`` rows are learned as the new regime and the CUSUMs re-baseline on it, so a
    lasting shift is one alarm, and ``is_drift`` stays True while the stream is in it. A
    change found inside a changed regime is learned first: back to the reference, the
    regime ends (no alarm); a regime different from the current one is a new alarm; the
    same one was a false alarm. See :mod:`engage.drift.regimes` for how regimes compare.

    Per feature, the statistic is the larger of the CUSUM in units of its threshold
    (0 to 1 before an alarm) and the effect of the current regime (its move from the
    reference in units of the smallest move that makes a new regime), so it grows with the
    size of a shift.

    Parameters
    ----------
    ert : float
        Expected rows between false alarms on a stream like the reference.
    shift : float
        Mean shift to detect fastest, in reference standard deviations (``k = shift / 2``).
    scale : float
        Standard-deviation ratio to detect fastest (up and down).
    block : int or None
        Moving-block bootstrap block length for calibration (None: i.i.d. rows).
    n_sims, sim_length, seed : int
        Calibration simulation size and seed.
    threshold_scale : float
        Multiplies every calibrated threshold: an empirical correction when the false
        alarms measured on held-out no-drift rows differ from the ERT's (the benchmark
        uses it to compare detectors at one measured false-alarm rate).
    relearn : int
        Rows after an alarm from which the new regime is learned (no alarm among them).

    Raises
    ------
    ValueError
        For ``ert <= 1``, ``shift <= 0``, ``scale <= 1``, ``threshold_scale <= 0`` or
        ``relearn < 10``.
    """

    kind = "online"
    default_threshold = 10_000.0
    threshold_meaning = "ERT: expected rows between false alarms"

    def __init__(
        self,
        ert: float = default_threshold,
        shift: float = 0.6,
        scale: float = 1.5,
        block: int | None = None,
        n_sims: int = 200,
        sim_length: int = 2000,
        seed: int = 0,
        threshold_scale: float = 1.0,
        relearn: int = 50,
    ) -> None:
        super().__init__()
        if ert <= 1 or shift <= 0 or scale <= 1 or threshold_scale <= 0 or relearn < 10:
            raise ValueError(
                "cusum needs ert > 1, shift > 0, scale > 1, threshold_scale > 0 and relearn >= 10"
            )
        self.ert, self.k, self.scale, self.block = ert, shift / 2, scale, block
        self.n_sims, self.sim_length, self.seed = n_sims, sim_length, seed
        self.threshold_scale, self.relearn = threshold_scale, relearn

    def _fit(self, reference: Reference) -> None:
        rows = reference.rows.astype(np.float64)
        self.base = NormalScore(rows)
        z = self.base(rows)
        sims = _bootstrap(z, self.n_sims, self.sim_length, self.block, self.seed)
        inc = increments(sims, self.k, self.scale)
        self.h = calibrate(inc, self.ert * inc.shape[-1], self.sim_length)
        self.h = self.h * self.threshold_scale
        self.bounds = Bounds.of(self.k, self.scale, self.relearn)
        self.reset()

    def reset(self) -> None:
        """Start a new stream in the reference regime (row 0, every statistic at zero)."""
        if not hasattr(self, "h"):
            return
        self.t = 0  # stream rows consumed since fit or reset
        self.pending: Pending | None = None
        self.zero_at = np.zeros(len(self.h), dtype=np.int64)
        self._enter(None)

    def _enter(self, rows: np.ndarray | None, since: int | None = None) -> None:
        """Re-baseline on the reference (``rows`` None) or on the regime learned from
        ``rows`` that began at row ``since``; the CUSUMs restart at the next row."""
        if rows is None:
            n_features = len(self.reference.features)
            self.sample, self.transform = None, self.base
            self.current = Learned.reference(n_features)
            self.effect, self.kinds = np.zeros(n_features), ["mean_up"] * n_features
            self.regime, self.idle = Regime(), None
        else:
            self.sample = [rows]
            self._fit_regime(rows, since)
        self._restart()

    def _fit_regime(self, rows: np.ndarray, since: int | None) -> None:
        """Score the stream through the regime's own rows; size it against the reference."""
        n_features = len(self.reference.features)
        self.fitted = len(rows)
        self.transform = NormalScore(rows)
        self.current = Learned.of(self.base(rows))
        self.effect, self.kinds = self.bounds.effect(self.current, Learned.reference(n_features))
        names = self.reference.features
        changed = tuple(f for f, e in zip(names, self.effect, strict=True) if e >= 1.0)
        self.regime = Regime(True, since, changed)
        tied = heavily_tied(rows)  # no "variance down" on a tied feature: see heavily_tied
        self.idle = 3 * n_features + np.flatnonzero(tied) if tied.any() else None

    def _until_refit(self) -> int | float:
        """Rows until the current regime's sample is refitted (so refits fall on the same
        rows however the stream is chunked); infinite in the reference or a full sample."""
        if self.sample is None:
            return math.inf
        have = sum(len(r) for r in self.sample)
        target = min(2 * self.fitted, 10 * self.relearn)
        return target - have if have < target else math.inf

    def _grow(self, rows: np.ndarray) -> None:
        """Add rows of the current changed regime to its sample (up to ``10 * relearn``) and
        refit it each time the sample doubles, so its scores sharpen as it lasts."""
        if self.sample is None:
            return
        have = sum(len(r) for r in self.sample)
        room = 10 * self.relearn - have
        if room <= 0 or len(rows) == 0:
            return
        self.sample.append(rows[:room])
        have += len(rows[:room])
        if have >= min(2 * self.fitted, 10 * self.relearn):
            self._fit_regime(np.concatenate(self.sample), self.regime.since)
            if not self.regime.features:  # with more rows, the regime is the reference
                self._enter(None)

    def _check(self, x: np.ndarray) -> DriftResult:
        if not np.isfinite(x).all():
            raise ValueError("non-finite input values: run the quality check first")
        alarms: list[int] = []
        flagged: set[str] = set()
        peak, at = np.zeros(len(self.h)), 0
        while at < len(x):
            if self.pending is not None:
                at, signal, seen = self._learn(x, at)
            else:
                end = min(len(x), at + self._until_refit())
                hit, seen = self._watch(x[at:end])
                at = end if hit is None else at + hit + 1
                signal = hit is not None and self._alarm(seen[-1])
                if hit is None:
                    self._grow(x[at - len(seen) : at])
            if seen is not None:
                peak = np.maximum(peak, seen.max(axis=0))
            if signal:
                alarms.append(at - 1)
                flagged |= set(self.regime.features)
        return self._result(alarms, flagged, peak, len(x))

    def _watch(self, x: np.ndarray) -> tuple[int | None, np.ndarray]:
        """Run the CUSUMs over ``x`` up to the first alarm; (its index or None, ratios seen)."""
        inc = increments(self.transform(x), self.k, self.scale)
        if self.idle is not None:
            inc[:, self.idle] = -1.0  # statistics not watched in this regime never climb
        path = cusum_path(inc, self.state) / self.h  # (n, S), 1.0 = threshold
        over = np.flatnonzero((path >= 1.0).any(axis=1))
        seen = path[: over[0] + 1] if len(over) else path
        zero = seen <= 0.0
        last = len(seen) - 1 - np.argmax(zero[::-1], axis=0)
        self.zero_at = np.where(zero.any(axis=0), self.t + last + 1, self.zero_at)
        self.t += len(seen)
        self.state = seen[-1] * self.h
        return (int(over[0]) if len(over) else None), seen

    def _restart(self) -> None:
        """Every statistic back to zero from the next row."""
        self.state = np.zeros(len(self.h))
        self.zero_at[:] = self.t

    def _alarm(self, ratios: np.ndarray) -> bool:
        """A statistic crossed at the last row seen: learn the new regime. True when the
        alarm is signalled now (a change away from the reference regime)."""
        if not self.regime.changed:
            self._signal(ratios)
            return True
        self.pending = Pending(int(self.zero_at[int(np.argmax(ratios))]), None, self.t)
        return False

    def _signal(self, ratios: np.ndarray) -> None:
        """A change away from the reference: signalled now, dated where the crossing
        statistic last left zero, learned from the next row while the reference CUSUMs,
        restarted, keep watching."""
        names = self.reference.features
        per = ratios.reshape(len(STATS), len(names))
        crossed = {
            f: {STATS[s] for s in range(len(STATS)) if per[s, j] >= 1.0}
            for j, f in enumerate(names)
            if per[:, j].max() >= 1.0
        }
        start = int(self.zero_at[int(np.argmax(ratios))])
        self.pending = Pending(start, crossed, self.t)
        self.regime = Regime(True, start, tuple(crossed))
        self.effect = self._excursion(ratios)
        self.kinds = [STATS[int(per[:, j].argmax())] for j in range(len(names))]
        self._restart()

    def _excursion(self, ratios: np.ndarray) -> np.ndarray:
        """Per feature: the effect implied by the crossing CUSUMs' excursions (their mean
        increment since they left zero), before the new regime is learned."""
        names = self.reference.features
        length = np.maximum(self.t - self.zero_at, 1)
        per_row = (ratios * self.h / length).reshape(len(STATS), len(names))
        c_up, c_down = _variance_constants(self.scale)
        mean = np.maximum(per_row[0], per_row[1]) + self.k
        log_sd = 0.5 * np.log(np.maximum(np.stack([per_row[2] + c_up, c_down - per_row[3]]), 1e-3))
        moved = ratios.reshape(len(STATS), len(names)) >= 1.0
        effect = np.where(moved[:2].any(axis=0), mean / self.bounds.mean, 0.0)
        spread = np.where(moved[2:], np.abs(log_sd) / self.bounds.log_sd, 0.0).max(axis=0)
        return np.maximum(effect, spread)

    def _learn(self, x: np.ndarray, at: int) -> tuple[int, bool, np.ndarray | None]:
        """Take rows of ``x`` from ``at`` into the pending regime, settle it once complete;
        (where the rows taken end, whether a change is signalled there, the ratios seen)."""
        pending = self.pending
        end = min(len(x), at + self.relearn - pending.count)
        if pending.signalled is None:  # a change inside a changed regime: learned blind
            pending.rows.append(x[at:end])
            self.t += end - at
            return end, pending.count >= self.relearn and self._settle(pending), None
        hit, seen = self._watch(x[at:end])
        stop = end if hit is None else at + hit + 1
        pending.rows.append(x[at:stop])
        if hit is not None:
            if self._another(seen[-1], pending):
                self._signal(seen[-1])
                return stop, True, seen
            self._restart()  # the same change, still there
            pending.restart = self.t
        return stop, pending.count >= self.relearn and self._settle(pending), seen

    def _another(self, ratios: np.ndarray, pending: Pending) -> bool:
        """Whether a crossing while a signalled change is learned is another change: in a
        feature the alarm did not name, its mean the other way, or with evidence that began
        ``_LATER`` rows or more after the last restart (a false alarm just before a real
        change must not hide it). Other crossings are the signalled change, still there."""
        names = self.reference.features
        for i in np.flatnonzero(ratios >= 1.0):
            feature, kind = names[i % len(names)], STATS[i // len(names)]
            said = pending.signalled.get(feature)
            if said is None or (_OPPOSITE.get(kind) in said and kind not in said):
                return True
            if kind in said and self.zero_at[i] >= pending.restart + _LATER:
                return True
        return False

    def _settle(self, pending: Pending) -> bool:
        """The learned regime becomes the current one; True when that is a new alarm."""
        self.pending = None
        rows = np.concatenate(pending.rows)
        learned = Learned.of(self.base(rows))
        n_features = len(self.reference.features)
        effect, _ = self.bounds.effect(learned, Learned.reference(n_features))
        if (effect < 1.0).all():  # back in (or never left) the reference regime
            self._enter(None)
            return False
        if pending.signalled is None and (self.bounds.effect(learned, self.current)[0] < 1.0).all():
            self._restart()  # the same regime as before: a false alarm inside it
            self._grow(rows)
            return False
        self._enter(rows, pending.start)
        return pending.signalled is None or self._unsignalled(pending.signalled)

    def _unsignalled(self, signalled: dict[str, set[str]]) -> bool:
        """Whether the learned regime moved where the alarm did not say: in another feature,
        or a mean the other way (a change that began while a false alarm was learned)."""
        for j, f in enumerate(self.reference.features):
            if f not in self.regime.features:
                continue
            if f not in signalled:
                return True
            kind = self.kinds[j]
            means = {k for k in signalled[f] if k.startswith("mean")}
            if kind.startswith("mean") and means and kind not in means:
                return True
        return False

    def _result(
        self, alarms: list[int], flagged: set[str], peak: np.ndarray, n: int
    ) -> DriftResult:
        names = self.reference.features
        per = peak.reshape(len(STATS), len(names))  # increments are concatenated by stat
        ratio, strongest = per.max(axis=0).tolist(), per.argmax(axis=0).tolist()
        drifting = set(self.regime.features) | flagged
        feats, kinds = [], {}
        for j, (f, effect) in enumerate(zip(names, self.effect.tolist(), strict=True)):
            feats.append(FeatureDrift(f, max(ratio[j], effect), None, 1.0, f in drifting))
            kinds[f] = self.kinds[j] if effect > ratio[j] else STATS[strongest[j]]
        return DriftResult(
            self.name,
            max(f.statistic for f in feats),
            1.0,
            None,
            self.regime.changed or bool(alarms),
            tuple(feats),
            n,
            alarms[0] if alarms else None,
            extra={"alarms": alarms, "statistic_kind": kinds, "ert": self.ert, "rows": self.t},
            regime=self.regime,
        )


def _variance_constants(scale: float) -> tuple[float, float]:
    """The log-likelihood-ratio constants of the variance-up and variance-down CUSUMs."""
    s2 = scale**2
    return 2 * math.log(scale) / (1 - 1 / s2), 2 * math.log(scale) / (s2 - 1)


def _bootstrap(z: np.ndarray, n_sims: int, length: int, block: int | None, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if not block or block <= 1 or block >= len(z):
        return z[rng.integers(0, len(z), (n_sims, length))]
    n_blocks = -(-length // block)
    starts = rng.integers(0, len(z) - block + 1, (n_sims, n_blocks))
    idx = (starts[..., None] + np.arange(block)).reshape(n_sims, -1)[:, :length]
    return z[idx]


class ErrorCusum:
    """One-sided CUSUM on a stream of per-prediction errors (0/1 or absolute error).

    Calibrated like :class:`CusumDetector` by bootstrapping ``baseline`` (errors on the
    validation split at training time): alarms when the error rises by ``shift`` baseline
    standard deviations, with about ``ert`` labelled predictions between false alarms.
    """

    name = "error_cusum"

    def __init__(
        self, baseline: np.ndarray, ert: float = 10_000.0, shift: float = 0.5, seed: int = 0
    ) -> None:
        base = np.asarray(baseline, dtype=np.float64)
        self.mean, self.std = base.mean(), base.std() or 1.0
        self.k, self.ert = shift / 2, ert
        z = ((base - self.mean) / self.std)[:, None]
        sims = _bootstrap(z, 200, 2000, None, seed) - self.k
        self.h = float(calibrate(sims, ert, 2000)[0])
        self.state = np.zeros(1)

    def update(self, errors: np.ndarray) -> DriftResult:
        """Feed errors in order; ``alarm_index`` is the first alarm among them."""
        e = np.asarray(errors, dtype=np.float64)
        if not np.isfinite(e).all():
            return DriftResult.failed(self.name, "NaN or infinite prediction error", len(e))
        inc = ((e - self.mean) / self.std - self.k)[:, None]
        path = cusum_path(inc, self.state)[:, 0] / self.h
        over = np.flatnonzero(path >= 1.0)
        alarm = int(over[0]) if len(over) else None
        self.state = np.zeros(1) if alarm is not None else path[-1:] * self.h
        peak = float(path.max(initial=0.0))
        return DriftResult(self.name, peak, 1.0, None, alarm is not None, (), len(e), alarm)
