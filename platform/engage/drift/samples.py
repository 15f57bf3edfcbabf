"""What a serving replica hands to drift detection: one sampled window and its consumers.

These types live with drift, not with serving, so that the live watcher
(:mod:`engage.drift.watch`) never imports :mod:`engage.serve`: the serving side builds
:class:`Sample` objects and hands them to every :class:`SampleConsumer` it was given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sample:
    """One served window: what came in, what went out, which version answered, when.

    Attributes
    ----------
    request_id : str
        The request the window came with.
    inputs : numpy.ndarray
        The window ``(window, features)``, float32, raw units.
    prediction : list of float
        The model's output row (logits or value).
    label : str, float or None
        The predicted class or value the caller got.
    model, version : str
        The registered model and version that answered.
    timestamp : float
        When it was answered (Unix seconds).
    """

    request_id: str
    inputs: np.ndarray
    prediction: list[float]
    label: str | float | None
    model: str
    version: str
    timestamp: float


class SampleConsumer(ABC):
    """Receives batches of samples on the sampler's thread (never on a request)."""

    @abstractmethod
    def consume(self, samples: Sequence[Sample]) -> None:
        """Take one batch of samples, in the order they were answered."""

    def close(self) -> None:  # noqa: B027 - optional hook: most consumers hold nothing
        """Release what the consumer holds (files, connections)."""
