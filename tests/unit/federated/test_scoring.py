"""The scorer on synthetic rounds (numpy only): hard checks, the two-pass robust statistics,
the per-client history that spares odd benign clients, the validation probe, and
"score >= 1 exactly when flagged"."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engage.federated.scoring import ScoringConfig, UpdateScorer

D = 200


def _honest(rng: np.random.Generator, n: int, direction: np.ndarray, spread: float = 1.0):
    """Updates sharing ``direction``, each with its own (non-IID) part."""
    return np.stack([direction + spread * rng.normal(size=D) / np.sqrt(D) for _ in range(n)])


def _names(n: int) -> list[str]:
    return [f"c{i:02d}" for i in range(n)]


def _flagged(scores) -> set[str]:
    return {s.client for s in scores if s.flagged}


def test_benign_clients_are_not_flagged_and_poisoned_ones_are_named() -> None:
    rng = np.random.default_rng(0)
    direction = rng.normal(size=D) / np.sqrt(D)
    scorer = UpdateScorer()
    names = _names(20)
    for r in range(1, 6):
        x = _honest(rng, 20, direction)
        x[0] *= 10  # boosting
        x[1] = -x[1]  # sign flip
        x[2] = 0  # free riding
        x[3] = x[4] = 3 * rng.normal(size=D) / np.sqrt(D)  # colluding Sybils
        x[5] += rng.normal(0, 0.5, D)  # Gaussian noise

        flagged = _flagged(scorer.score(r, names, x.astype(np.float32)))

        assert flagged == set(names[:6]), (r, flagged)


def test_reasons_name_what_was_wrong() -> None:
    rng = np.random.default_rng(1)
    x = _honest(rng, 12, rng.normal(size=D) / np.sqrt(D))
    x[0] *= 10
    x[1] = 0
    x[2] = x[3]

    by = {s.client: s.reasons for s in UpdateScorer().score(1, _names(12), x)}

    assert "norm_high" in by["c00"]
    assert "norm_low" in by["c01"]
    assert "duplicate" in by["c02"]
    assert "duplicate" in by["c03"]


def test_a_stale_copy_of_the_last_global_change_is_flagged() -> None:
    rng = np.random.default_rng(2)
    scorer = UpdateScorer()
    change = rng.normal(size=D)
    scorer.observe_global(change)
    x = _honest(rng, 8, rng.normal(size=D) / np.sqrt(D))
    x[0] = change

    assert "stale" in scorer.score(2, _names(8), x)[0].reasons


def test_a_boosted_update_among_four_is_flagged() -> None:
    """Few clients: the second pass must not lose the norm check (its reference shrinks)."""
    rng = np.random.default_rng(3)
    x = _honest(rng, 4, rng.normal(size=D) / np.sqrt(D), spread=0.3)
    x[3] *= 10

    assert _flagged(UpdateScorer().score(1, _names(4), x)) == {"c03"}


def test_an_odd_benign_client_keeps_its_good_record() -> None:
    """One round in which a benign client's update points away from the centre does not
    flag it; a client that does so every round is flagged by its history."""
    rng = np.random.default_rng(4)
    direction = rng.normal(size=D) / np.sqrt(D)
    scorer, names = UpdateScorer(), _names(16)
    for r in range(1, 7):
        x = _honest(rng, 16, direction, spread=0.5)
        x[1] = -0.3 * direction + 0.5 * rng.normal(size=D) / np.sqrt(D)  # always against
        if r == 4:
            x[0] = -0.3 * direction + 0.5 * rng.normal(size=D) / np.sqrt(D)  # once against
        scores = {s.client: s for s in scorer.score(r, names, x)}

        assert not scores["c00"].flagged, r
        assert "direction" in scores["c01"].reasons
    assert scores["c00"].cosine_history > 0 > scores["c01"].cosine_history


def test_the_validation_probe_flags_an_update_that_makes_the_model_worse() -> None:
    """A label flipper's update looks normal; the server's validation loss says otherwise.
    One round a little worse than the others is tolerated for a client with a good record."""
    rng = np.random.default_rng(5)
    direction = rng.normal(size=D) / np.sqrt(D)
    names = _names(12)
    harm = {"c00": 1.0}  # the label flipper: +1.0 loss every round

    def probe(weights: np.ndarray, updates: np.ndarray) -> np.ndarray:
        out = rng.normal(0, 0.05, len(updates))
        out[0] += harm["c00"]
        out[1] += extra["c01"]
        return out

    scorer = UpdateScorer(probe=probe)
    for r in range(1, 5):
        extra = {"c01": 0.3 if r == 3 else 0.0}  # one bad round for a benign client
        x = _honest(rng, 12, direction, spread=0.3)
        scores = {s.client: s for s in scorer.score(r, names, x, np.zeros(D))}

        assert "validation" in scores["c00"].reasons
        assert not scores["c01"].flagged, (r, scores["c01"])
        assert scores["c00"].validation > 0.5


def test_without_global_weights_the_probe_is_not_called() -> None:
    calls = []
    scorer = UpdateScorer(probe=lambda w, u: calls.append(1) or np.zeros(len(u)))
    rng = np.random.default_rng(6)

    scorer.score(1, _names(8), _honest(rng, 8, rng.normal(size=D)))

    assert calls == []


def test_a_coherent_minority_does_not_bend_the_centre() -> None:
    """Six coordinated updates among twenty scattered honest ones pull a plain coordinate
    median their way; the second pass, without them, keeps the honest direction."""
    rng = np.random.default_rng(7)
    direction = rng.normal(size=D) / np.sqrt(D)
    x = _honest(rng, 20, 0.2 * direction, spread=1.0)
    x[:6] = -direction + 0.05 * rng.normal(size=(6, D)) / np.sqrt(D)

    def probe(weights, updates):  # the six make the model worse
        return np.where(np.arange(len(updates)) < 6, 1.0, 0.0) + rng.normal(0, 0.05, len(updates))

    scores = UpdateScorer(probe=probe).score(1, _names(20), x, np.zeros(D))

    assert _flagged(scores) == set(_names(6))
    assert all(s.cosine < 0 for s in scores[:6])  # a plain median: above 0.5
    assert all(s.cosine > 0 for s in scores[6:])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 12),
    scale=st.floats(1e-3, 1e3),
    decay=st.floats(0.0, 0.95),
)
def test_score_reaches_one_exactly_when_flagged(seed, n, scale, decay) -> None:
    rng = np.random.default_rng(seed)
    scorer = UpdateScorer(ScoringConfig(history_decay=decay))
    for r in range(1, 4):
        x = scale * rng.standard_cauchy(size=(n, 16))
        x[rng.random(n) < 0.2] = 0.0
        for s in scorer.score(r, _names(n), x.astype(np.float32)):
            assert (s.score >= 1.0) == s.flagged
            assert np.isfinite([s.score, s.norm_z, s.outlier_z, s.cosine_history]).all()
