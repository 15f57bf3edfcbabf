"""Where in the scenario space to simulate: points of the unit cube ``[0, 1]^d``.

The simulator maps a unit point to a scenario (``Scenario.from_unit``), so the samplers
here never need to know what a dimension means. :func:`uniform` draws independently;
:func:`latin_hypercube` stratifies every dimension (each of ``n`` equal slices of every
axis holds exactly one point), the usual space-filling baseline. The adaptive sampler
draws its candidate pool with :func:`uniform` and keeps the ones
:mod:`engage.train.adaptive.acquisition` scores highest.
"""

from __future__ import annotations

import numpy as np


def uniform(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` independent uniform points of ``[0, 1]^d``, shape ``(n, d)``."""
    return rng.random((n, d))


def latin_hypercube(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` points of ``[0, 1]^d`` with exactly one in each of ``n`` slices of every axis.

    Each column is a random permutation of the slices ``0..n-1`` plus a uniform offset
    within the slice, divided by ``n``.
    """
    slices = np.stack([rng.permutation(n) for _ in range(d)], axis=1)
    return (slices + rng.random((n, d))) / n


#: The non-adaptive samplers by spec name (``adaptive.sampler``).
SAMPLERS = {"uniform": uniform, "lhs": latin_hypercube}
