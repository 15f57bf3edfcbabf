"""The drift demo's first round is large enough for the replica's first drift check.

With the quickstart's deploy section (sampling rate 0.1, first check after 50 sampled
windows) a round of 200 windows samples about 20: the first two rounds could never raise
the alert, and each still waited 5 s for it (2 x 5 s of the quickstart's ~25 s after its
deploy). The round is now sized from the deploy section.
"""

from __future__ import annotations

import pytest

from engage.serve.demo import windows_per_round
from engage.spec.models import DeploySpec


def test_the_quickstart_s_first_round_reaches_the_first_check() -> None:
    spec = DeploySpec()
    needed = max(spec.drift.min_samples, spec.drift.check_every) / spec.sampling.rate

    assert windows_per_round(spec) >= 1.2 * needed


@pytest.mark.parametrize(("rate", "expected"), [(1.0, 200), (0.5, 200), (0.01, 5000), (0.0, 200)])
def test_rounds_stay_between_the_old_size_and_a_cap(rate: float, expected: int) -> None:
    spec = DeploySpec.model_validate({"sampling": {"rate": rate}})

    assert windows_per_round(spec) == expected
