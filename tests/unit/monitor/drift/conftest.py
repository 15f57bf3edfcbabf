"""Small shared fixtures: one scenario population and fitted built-in detectors per session."""

from __future__ import annotations

import numpy as np
import pytest

from engage.monitor.drift import capture_reference, make_detector
from engage.monitor.drift.scenarios import population

FEATURES = ("a", "b", "c")


@pytest.fixture(scope="session")
def pop():
    return population(households=4, days=2, seed=0)


@pytest.fixture(scope="session")
def gaussian_reference():
    rng = np.random.default_rng(0)
    windows = rng.normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], size=(600, 8, 3))
    outputs = rng.normal(size=(600, 2))
    return capture_reference(windows, outputs, FEATURES, max_rows=500)


@pytest.fixture(scope="session")
def cusum(pop):
    return make_detector("cusum", ert=2000, n_sims=100, sim_length=1000).fit(pop.reference)


@pytest.fixture(scope="session")
def quality(pop):
    return make_detector("quality", window=10).fit(pop.reference)
