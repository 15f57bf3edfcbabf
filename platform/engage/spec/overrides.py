"""``--set KEY=VALUE`` overrides applied to the raw spec before it is validated.

Values are parsed with ``yaml.safe_load``, so ``--set train.epochs=3`` sets an integer,
``--set data.features=[co2,temp]`` a list and ``--set tracking.registration=null`` removes
a section, exactly as if the text had been written in the file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml

from engage.errors import SpecError

_HINT = "write overrides as --set KEY=VALUE, for example --set train.epochs=3"


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Split ``"train.epochs=3"`` into ``(("train", "epochs"), 3)``.

    Raises
    ------
    SpecError
        When there is no ``=``, a key component is empty or the value is not YAML.
    """
    key, sep, value = text.partition("=")
    if not sep:
        raise SpecError(f"--set {text}: expected KEY=VALUE; there is no '='", hint=_HINT)
    parts = tuple(part.strip() for part in key.split("."))
    if not all(parts):
        raise SpecError(
            f"--set {text}: the key {key.strip()!r} has an empty component; "
            "expected dotted keys such as train.epochs",
            hint=_HINT,
        )
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            f"--set {text}: the value is not valid YAML: {problem}", hint=_HINT
        ) from None
    return parts, parsed


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with every override applied, in order.

    Parameters
    ----------
    raw
        The spec as loaded from YAML (not modified).
    overrides
        Texts like ``"train.epochs=3"`` or ``"data.features.0=co2"``. Missing intermediate
        mappings are created; a numeric component indexes an existing list.

    Returns
    -------
    dict
        The overridden spec, still unvalidated.

    Raises
    ------
    SpecError
        On a malformed override or a path through something that is not a mapping or list.
    """
    result = copy.deepcopy(raw)
    for text in overrides:
        parts, value = parse_override(text)
        node: Any = result
        for depth, part in enumerate(parts[:-1]):
            node = _child(node, part, parts[:depth], text)
        _assign(node, parts[-1], value, parts[:-1], text)
    return result


def _child(node: Any, part: str, where: tuple[str, ...], text: str) -> Any:
    if isinstance(node, dict):
        if not isinstance(node.get(part), dict | list):
            # A scalar here is replaced: `--set a.b=1` over `a: 3` means the user wants a map.
            node[part] = {}
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part, where, text)]
    raise _not_container(node, where, text)


def _assign(node: Any, part: str, value: Any, where: tuple[str, ...], text: str) -> None:
    if isinstance(node, dict):
        node[part] = value
    elif isinstance(node, list):
        node[_index(node, part, where, text)] = value
    else:
        raise _not_container(node, where, text)


def _index(node: list[Any], part: str, where: tuple[str, ...], text: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise SpecError(
            f"--set {text}: {'.'.join(where)} is a list of {len(node)} item(s); "
            f"got index {part!r}, expected 0 to {len(node) - 1}",
            hint=_HINT,
        )
    return int(part)


def _not_container(node: Any, where: tuple[str, ...], text: str) -> SpecError:
    return SpecError(
        f"--set {text}: {'.'.join(where)} is {node!r:.60}, not a mapping or list", hint=_HINT
    )
