"""Aggregators: one contract suite over every registered one, and the robustness properties.

Properties (hypothesis): the coordinate-wise median stays within the honest values' range
while malicious updates are fewer than half; the trimmed mean does while they are at most
the trimmed count; Krum picks an update within the bound its proof gives, and an honest one
whenever the malicious ones lie outside that bound, for f < (n - 2) / 2.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engage.errors import FederatedError
from engage.federated.aggregators import AGGREGATORS, krum_scores, make_aggregator

FLOATS = st.floats(-100, 100, allow_nan=False, width=32)
WILD = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_every_aggregator_returns_one_finite_change_of_the_model_size(name: str) -> None:
    updates = np.random.default_rng(0).normal(size=(7, 11)).astype(np.float32)

    out = make_aggregator(name).aggregate(updates, np.arange(1, 8))

    assert out.vector.shape == (11,)
    assert out.vector.dtype == np.float32
    assert np.isfinite(out.vector).all()
    assert out.used
    assert set(out.used) <= set(range(7))


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_identical_updates_aggregate_to_themselves(name: str) -> None:
    row = np.linspace(-1, 1, 5, dtype=np.float32)

    out = make_aggregator(name).aggregate(np.tile(row, (6, 1)), np.ones(6))

    np.testing.assert_allclose(out.vector, row, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_every_aggregator_is_documented(name: str) -> None:
    cls = AGGREGATORS.get(name)

    assert cls.__doc__
    assert cls.description
    for field, info in cls.params_model.model_fields.items():
        assert info.description, f"{name}.{field}"


def test_fedavg_weights_by_samples() -> None:
    out = make_aggregator("fedavg").aggregate(np.array([[0.0], [3.0]]), np.array([2, 1]))

    assert out.vector[0] == pytest.approx(1.0)


def test_an_unknown_aggregator_or_bad_parameter_lists_what_is_valid() -> None:
    with pytest.raises(FederatedError) as exc:
        make_aggregator("mean")
    assert "median" in exc.value.hint
    with pytest.raises(FederatedError, match="trim"):
        make_aggregator("trimmed_mean", {"trim": 0.7})


@st.composite
def honest_and_malicious(draw, max_bad: callable):
    n = draw(st.integers(3, 15))
    f = draw(st.integers(0, max_bad(n)))
    d = draw(st.integers(1, 6))
    honest = draw(arrays(np.float32, (n - f, d), elements=FLOATS))
    bad = draw(arrays(np.float32, (f, d), elements=WILD))
    order = draw(st.permutations(range(n)))
    return honest, np.concatenate([honest, bad])[list(order)]


def _within(value: np.ndarray, honest: np.ndarray) -> bool:
    tol = 1e-3 * (1 + np.abs(honest).max())
    return bool((value >= honest.min(0) - tol).all() and (value <= honest.max(0) + tol).all())


@settings(max_examples=300, deadline=None)
@given(honest_and_malicious(lambda n: (n - 1) // 2))
def test_the_median_stays_in_the_honest_range_with_fewer_than_half_malicious(case) -> None:
    honest, updates = case

    out = make_aggregator("median").aggregate(updates, np.ones(len(updates)))

    assert _within(out.vector, honest)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_trimmed_mean_stays_in_the_honest_range_up_to_the_trimmed_count(data) -> None:
    trim = data.draw(st.sampled_from([0.1, 0.2, 0.3, 0.4]))
    honest, updates = data.draw(honest_and_malicious(lambda n: int(np.floor(trim * n))))

    out = make_aggregator("trimmed_mean", {"trim": trim}).aggregate(updates, np.ones(len(updates)))

    assert _within(out.vector, honest)


@st.composite
def krum_case(draw):
    n = draw(st.integers(4, 16))
    f = draw(st.integers(0, (n - 3) // 2))  # f < (n - 2) / 2
    d = draw(st.integers(1, 5))
    honest = draw(arrays(np.float64, (n - f, d), elements=st.floats(-1, 1)))
    bad = draw(arrays(np.float64, (f, d), elements=st.floats(-1e4, 1e4)))
    return n, f, honest, bad


def _krum_bound(n: int, f: int, honest: np.ndarray) -> float:
    """Krum's choice lies within this distance of some honest update (from its proof)."""
    diam = np.sqrt(((honest[:, None] - honest[None]) ** 2).sum(-1).max())
    return diam * np.sqrt((n - f - 2) / (n - 2 * f - 1)) + 1e-6


@settings(max_examples=300, deadline=None)
@given(krum_case())
def test_krum_picks_within_its_bound_of_the_honest_updates(case) -> None:
    n, f, honest, bad = case
    updates = np.concatenate([honest, bad]).astype(np.float32)

    out = make_aggregator("krum", {"byzantine": f}).aggregate(updates, np.ones(n))

    nearest = np.sqrt(((honest - out.vector) ** 2).sum(1)).min()
    assert nearest <= _krum_bound(n, f, honest) * 1.001 + 1e-3


@settings(max_examples=300, deadline=None)
@given(krum_case(), st.floats(1.5, 100))
def test_krum_picks_an_honest_update_when_the_malicious_are_outside_its_bound(case, k) -> None:
    n, f, honest, bad = case
    # Move every malicious update beyond k times the bound from every honest one.
    centre, bound = honest.mean(0), _krum_bound(n, f, honest)
    radius = np.sqrt(((honest - centre) ** 2).sum(1)).max() + k * bound + 1.0
    direction = bad - centre
    norms = np.linalg.norm(direction, axis=1, keepdims=True)
    direction = np.where(
        norms > 0, direction / np.maximum(norms, 1e-12), 1.0 / np.sqrt(bad.shape[1])
    )
    bad = centre + direction * radius
    updates = np.concatenate([honest, bad])

    for name in ("krum", "multi_krum"):
        out = make_aggregator(name, {"byzantine": f}).aggregate(updates, np.ones(n))
        assert all(i < len(honest) for i in out.used), name


def test_krum_scores_are_sums_of_squared_distances_to_the_nearest() -> None:
    x = np.array([[0.0], [1.0], [3.0], [10.0]])

    scores = krum_scores(x, f=1)  # n - f - 2 = 1 nearest

    np.testing.assert_allclose(scores, [1.0, 1.0, 4.0, 49.0])
