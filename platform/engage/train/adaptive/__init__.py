"""Adaptive sampling of the simulator's scenario space: the ``adaptive`` job kind.

A spec with an ``adaptive`` section runs as :class:`~engage.train.adaptive.job.AdaptiveJob`
(registered when :mod:`engage.runtime.kinds` imports ``engage.train.adaptive.job``).
:mod:`~engage.train.adaptive.samplers` holds the uniform and Latin hypercube samplers,
:mod:`~engage.train.adaptive.acquisition` the adaptive sampler's scores, and
:mod:`~engage.train.adaptive.loop` the rounds, shared by the job and the benchmark.
"""

from engage.train.adaptive.acquisition import (
    by_hour,
    disagreement,
    error,
    out_of_bag,
    per_group,
    pick,
    span_starts,
    surrogate,
)
from engage.train.adaptive.samplers import SAMPLERS, latin_hypercube, uniform

__all__ = [
    "SAMPLERS",
    "by_hour",
    "disagreement",
    "error",
    "latin_hypercube",
    "out_of_bag",
    "per_group",
    "pick",
    "span_starts",
    "surrogate",
    "uniform",
]
