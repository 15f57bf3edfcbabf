"""The tuning search space: which spec fields a trial changes, and the spec a draw makes.

A ``tune.space`` key is a dotted spec path, exactly as ``--set`` takes it, so a trial's
spec is the user's spec re-parsed with one override per drawn value
(:func:`trial_spec`): a bad path or a value the field refuses is the same located error
``--set`` gives. The spec checks (:func:`engage.spec.checks.check_tune`) try every
range's ends and every choice, and the ``tune.metric``, when the spec loads, so such an
error comes from ``engage validate`` as from ``engage run``, before anything is started,
located at the ``tune.space`` entry in the file. Importing this module does not import
Ray; :func:`tune_space` does, when the search starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engage.spec import LoadedSpec, parse_spec
from engage.spec.checks import epoch_metrics
from engage.spec.models import SearchParam, TuneSpec
from engage.spec.tune_space import corners, override_text, plain
from engage.train.metrics import task_metrics

__all__ = [
    "corners",
    "describe",
    "epoch_metrics",
    "max_epochs",
    "objective",
    "override_text",
    "plain",
    "touches_data",
    "trial_overrides",
    "trial_spec",
    "tune_space",
]


def trial_overrides(config: Mapping[str, Any]) -> list[str]:
    """The ``--set`` texts of one trial's drawn values, in key order."""
    return [override_text(k, config[k]) for k in sorted(config)]


def describe(config: Mapping[str, Any]) -> str:
    """A trial's drawn values for a display line: ``key=value`` with floats to 4 digits."""

    def show(v: Any) -> str:
        """One value as the display writes it."""
        v = plain(v)
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={show(config[k])}" for k in sorted(config))


def trial_spec(loaded: LoadedSpec, config: Mapping[str, Any]) -> LoadedSpec:
    """``loaded`` re-parsed with the user's overrides and then the trial's.

    Raises
    ------
    SpecError
        A drawn value that the spec refuses, located as a ``--set`` override.
    """
    origin = str(loaded.path) if loaded.path is not None else "<string>"
    return parse_spec(
        loaded.text,
        origin=origin,
        base_dir=loaded.base_dir,
        overrides=[*loaded.overrides, *trial_overrides(config)],
    )


def objective(loaded: LoadedSpec) -> tuple[str, str]:
    """The metric trials are compared on and its mode (``"min"`` or ``"max"``).

    The spec checks have made sure ``tune.metric`` is one every epoch reports.
    """
    tune, task = loaded.spec.tune, loaded.spec.data.task
    assert tune is not None  # only the tuning kind asks
    if tune.mode is not None:
        return tune.metric, tune.mode
    return tune.metric, "max" if task_metrics(task)[tune.metric] == "maximize" else "min"


def max_epochs(loaded: LoadedSpec) -> int:
    """The most epochs any trial trains: ASHA's ``max_t``."""
    tune = loaded.spec.tune
    assert tune is not None
    param = tune.space.get("train.epochs")
    if param is None:
        return loaded.spec.train.epochs
    return max(int(v) for v in corners(param))


def touches_data(space: Iterable[str]) -> bool:
    """Whether a trial changes the data (``data.*``) and so prepares its own."""
    return any(key == "data" or key.startswith("data.") for key in space)


def tune_space(tune: TuneSpec) -> dict[str, Any]:
    """Ray Tune's search space for ``tune.space`` (imports Ray Tune)."""
    from ray import tune as rt

    def domain(p: SearchParam) -> Any:
        """Ray Tune's sampler of one dimension."""
        if p.type == "choice":
            return rt.choice(list(p.values or []))
        assert p.low is not None
        assert p.high is not None
        if p.type == "int":
            return rt.randint(int(p.low), int(p.high) + 1)  # randint excludes its upper end
        draw = rt.loguniform if p.type == "loguniform" else rt.uniform
        return draw(p.low, p.high)

    return {key: domain(param) for key, param in tune.space.items()}
