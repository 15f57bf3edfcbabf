"""A deploy times its steps (DeployResult.phases, deployment.json): what the quickstart's
wall-time benchmark splits the deploy stage by. A step that fails is timed too."""

from __future__ import annotations

import pytest

from engage.serve import DeployResult
from engage.serve.controller import PHASES, _timed


def test_a_step_is_timed_also_when_it_fails() -> None:
    phases: dict[str, float] = {}

    with _timed(phases, "registry"):
        pass
    with pytest.raises(RuntimeError), _timed(phases, "serve start"):
        raise RuntimeError("proxy")

    assert set(phases) == {"registry", "serve start"}
    assert all(v >= 0 for v in phases.values())
    assert set(phases) <= set(PHASES)


def test_a_result_without_phases_still_reads_back() -> None:
    # deploy_job prints the result as JSON; an older payload has no "phases".
    result = DeployResult("a", "u", "m", "1", None, 0.0, (), "c", False, None, 0.1)

    assert result.phases == {}
