"""The tuning search space: which spec fields a trial changes, and the spec a draw makes.

A ``tune.space`` key is a dotted spec path, exactly as ``--set`` takes it, so a trial's
spec is the user's spec re-parsed with one override per drawn value
(:func:`trial_spec`): a bad path or a value the field refuses is the same located error
``--set`` gives. :func:`check_space` tries every range's ends and every choice before
any run exists, so such an error comes before anything is started, located at the
``tune.space`` entry in the file. Importing this module does not import Ray;
:func:`tune_space` does, when the search starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from engage.errors import SpecError
from engage.spec import LoadedSpec, parse_spec
from engage.spec.models import SearchParam, TuneSpec
from engage.train.metrics import task_metrics

_OVERRIDE_PREFIX = "--set "


def plain(value: Any) -> Any:
    """``value`` as a plain Python value (a searcher may hand numpy scalars)."""
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def override_text(path: str, value: Any) -> str:
    """``path=value`` with the value written as YAML, so ``--set`` parsing gives it back.

    PyYAML reads ``1e-05`` as a string; ``yaml.safe_dump`` writes ``1.0e-05``, which it
    reads as the float.
    """
    text = yaml.safe_dump(plain(value), default_flow_style=True, width=math.inf)
    return f"{path}={text.removesuffix('...' + chr(10)).strip()}"


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


def corners(param: SearchParam) -> list[Any]:
    """The values :func:`check_space` tries: a range's two ends, or every choice."""
    if param.type == "choice":
        return list(param.values or [])
    assert param.low is not None  # the model checked both ends
    assert param.high is not None
    if param.type == "int":
        return [int(param.low), int(param.high)]
    return [param.low, param.high]


def check_space(loaded: LoadedSpec, tune: TuneSpec) -> None:
    """Every key of ``tune.space`` is a spec field that takes every end and choice.

    Raises
    ------
    SpecError
        Located at the ``tune.space`` entry: what was tried and what the field expects.
    """
    for key, param in tune.space.items():
        if key in ("tune", "name") or key.startswith("tune."):
            raise loaded.error(
                ("tune", "space", key),
                f"got {key!r}; expected a field outside tune and name (trials share those)",
            )
        for value in corners(param):
            try:
                trial_spec(loaded, {key: value})
            except SpecError as exc:
                raise loaded.error(("tune", "space", key), _why(exc, key, value)) from None


def _why(exc: SpecError, key: str, value: Any) -> str:
    """The override's message without its ``--set ...:`` prefix (the location replaces it)."""
    text = exc.message
    for line in text.splitlines():
        if line.startswith(_OVERRIDE_PREFIX) and ": " in line:
            text = line.split(": ", 1)[1]
            break
    return f"{override_text(key, value)} is not a valid spec change: {text}"


def epoch_metrics(task: str) -> list[str]:
    """The metrics every training epoch reports for ``task``: trials compare on one."""
    return ["train_loss", *(m for m in task_metrics(task) if m.startswith("val_"))]


def objective(loaded: LoadedSpec) -> tuple[str, str]:
    """The metric trials are compared on and its mode (``"min"`` or ``"max"``).

    Raises
    ------
    SpecError
        ``tune.metric`` is not an epoch metric of the task, located at that field.
    """
    tune, task = loaded.spec.tune, loaded.spec.data.task
    assert tune is not None  # only the tuning kind asks
    valid = epoch_metrics(task)
    if tune.metric not in valid:
        raise loaded.error(
            ("tune", "metric"),
            f"got {tune.metric!r}; expected a metric every {task} epoch reports: "
            + ", ".join(valid),
        )
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
