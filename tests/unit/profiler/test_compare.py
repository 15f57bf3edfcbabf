"""A measured speedup compares runs in an order that cancels what the order does.

The benchmark's what-if rows ran the default then the remedy (A B A B ...): a remedy that
*was* the default measured 1.14x, as did three others, because the second run of a pair
ran faster. :func:`engage.profiler.compare.abba` runs each round as base, other, other,
base, so a run's position in the round and a steady drift cancel.
"""

from __future__ import annotations

import itertools

import pytest

from engage.profiler.compare import abba


def _runner(speeds: dict[str, float], effect):
    """Runs that return ``speed * effect(call index)``: the machine's state, not the config."""
    calls = itertools.count()
    order: list[str] = []

    def make(name: str):
        def run() -> float:
            order.append(name)
            return speeds[name] * effect(next(calls))

        return run

    return make, order


def test_the_second_run_of_a_pair_being_faster_does_not_make_a_speedup() -> None:
    # What the benchmark saw: every other run 14% faster, whatever it ran.
    make, order = _runner({"a": 100.0}, lambda k: 1.14 if k % 2 else 1.0)

    got = abba(make("a"), make("a"), rounds=3, rate=float)

    assert got.ratio == pytest.approx(1.0)
    assert all(r == pytest.approx(1.0) for r in got.ratios)
    assert order == ["a"] * 12  # base, other, other, base, three times


def test_the_old_alternating_order_shows_that_bias() -> None:
    make, _ = _runner({"a": 100.0}, lambda k: 1.14 if k % 2 else 1.0)
    first, second = make("a"), make("a")

    ratios = [(first(), second()) for _ in range(3)]

    assert all(b / a == pytest.approx(1.14) for a, b in ratios)


def test_a_steady_drift_cancels_and_a_real_speedup_stays() -> None:
    make, order = _runner({"base": 100.0, "fast": 200.0}, lambda k: 1.0 - 0.01 * k)

    got = abba(make("base"), make("fast"), rounds=2, rate=float)

    assert order[:4] == ["base", "fast", "fast", "base"]
    # drift linear in the run's index: the mean of positions 0 and 3 equals that of 1 and 2
    assert got.ratios[0] == pytest.approx(2.0)
    assert got.ratio == pytest.approx(2.0, rel=1e-9)


def test_the_runs_are_kept_for_the_table() -> None:
    make, _ = _runner({"base": 100.0, "other": 150.0}, lambda k: 1.0)

    got = abba(make("base"), make("other"), rounds=2, rate=float)

    assert len(got.base) == len(got.other) == 4
    assert got.ratio == pytest.approx(1.5)


def test_each_half_of_a_round_alone_shows_what_the_order_does() -> None:
    make, _ = _runner({"a": 100.0}, lambda k: 1.14 if k % 2 else 1.0)

    got = abba(make("a"), make("a"), rounds=3, rate=float)

    base_first, other_first = got.by_order(rate=float)
    assert base_first == pytest.approx(1.14)  # A B: the other run took the faster place
    assert other_first == pytest.approx(1 / 1.14)  # B A: base took it


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rounds"):
        abba(lambda: 1.0, lambda: 1.0, rounds=0, rate=float)
