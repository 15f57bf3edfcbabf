"""The tuning search space as the spec sees it: the values a dimension is checked at, and
the ``--set`` text of a drawn value.

They live with the spec because the spec checks (:func:`engage.spec.checks.check_tune`)
try every range's ends and every choice when a spec loads, so ``engage validate`` reports
a bad ``tune.space`` entry exactly as ``engage run`` would; the tuning kind
(:mod:`engage.train.tuning.search`) uses the same texts to build each trial's spec.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from engage.spec.models import SearchParam

RESERVED = ("tune", "name")
"""Top-level fields a ``tune.space`` key may not change: every trial shares them."""


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


def corners(param: SearchParam) -> list[Any]:
    """The values a dimension is checked at: a range's two ends, or every choice."""
    if param.type == "choice":
        return list(param.values or [])
    assert param.low is not None  # the model checked both ends
    assert param.high is not None
    if param.type == "int":
        return [int(param.low), int(param.high)]
    return [param.low, param.high]


def reserved(key: str) -> bool:
    """Whether ``key`` names a field the search may not change (``tune.*`` or ``name``)."""
    return any(key == r or key.startswith(r + ".") for r in RESERVED)
