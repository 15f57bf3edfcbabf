"""Translate pydantic validation errors into plain, located problems.

Pydantic says ``('data', 'source', 'csv', 'path') Field required``; a user needs
``data.source.path: missing required field`` on the line of ``source:``. This module maps
pydantic's locations back to the keys the user wrote and its error types to expectations.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from engage.spec.locate import FieldPath, Problem

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_PATTERNS = {
    _NAME_PATTERN: "a name of letters, digits, '_', '.', '-' starting with a letter or digit",
    r"^\d{4}-\d{2}-\d{2}$": "a date written YYYY-MM-DD",
}
_TYPES = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer (no fraction)",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}
_LENGTHS = {
    "string_too_short": ("at least", "min_length", "character(s)"),
    "string_too_long": ("at most", "max_length", "character(s)"),
    "too_short": ("at least", "min_length", "item(s)"),
    "too_long": ("at most", "max_length", "item(s)"),
}
# Model validators report on a whole section; these point at the field the rule is about.
_FOCUS: dict[tuple[str, ...], str] = {("train",): "batch_size", ("data",): "target"}


def show(value: Any, limit: int = 60) -> str:
    """A value as a message shows it: YAML words for scalars, repr otherwise, truncated."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def problems_from_validation(
    exc: ValidationError,
    raw: Any,
    model: type[BaseModel],
    prefix: FieldPath = (),
) -> list[Problem]:
    """One :class:`Problem` per pydantic error, with paths the user wrote.

    Parameters
    ----------
    exc
        The error from ``model.model_validate(raw)``.
    raw
        The data that was validated, used to drop location parts that are not YAML keys.
    model
        The model validated against, used to list valid keys and ``type`` values.
    prefix
        Prepended to every path (``("model", "params")`` for builder parameters).
    """
    return [_problem(err, raw, model, prefix) for err in exc.errors()]


def _problem(err: Any, raw: Any, model: type[BaseModel], prefix: FieldPath) -> Problem:
    kind, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx") or {}
    path = user_path(loc, raw, kind)
    if kind == "missing":
        return Problem(prefix + path, "missing required field")
    if kind == "extra_forbidden":
        return Problem(prefix + path, _unknown_key(str(loc[-1]), models_at(model, loc[:-1])))
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tags = ", ".join(repr(t) for t in tags_of(models_at(model, loc)))
        got = f"got {show(ctx['tag'])}" if "tag" in ctx else "missing"
        return Problem((*prefix, *path, "type"), f"{got}; expected one of {tags}")
    if kind == "value_error":
        focus = _FOCUS.get(tuple(str(p) for p in path))
        if focus and isinstance(err["input"], dict) and focus in err["input"]:
            path = (*path, focus)
        return Problem(prefix + path, str(ctx.get("error", err["msg"])))
    return Problem(prefix + path, f"got {show(err['input'])}; expected {expectation(err)}")


def expectation(err: Any) -> str:
    """What pydantic wanted, in words: ``>= 1``, ``an integer``, ``one of 'a', 'b'``."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind in _TYPES:
        return _TYPES[kind]
    if kind in _BOUNDS:
        symbol, name = _BOUNDS[kind]
        return f"{symbol} {_number(ctx[name])}"
    if kind in _LENGTHS:
        word, name, unit = _LENGTHS[kind]
        return f"{word} {ctx[name]} {unit}"
    if kind == "string_pattern_mismatch":
        return _PATTERNS.get(ctx["pattern"], f"text matching {ctx['pattern']}")
    if kind == "literal_error":
        head, _, last = ctx["expected"].rpartition(" or ")
        return f"one of {head}, {last}" if head else ctx["expected"]
    return err["msg"].removeprefix("Input should be ")


def user_path(loc: Sequence[Any], raw: Any, kind: str = "") -> FieldPath:
    """Keep the parts of a pydantic ``loc`` that are keys (or indices) in ``raw``.

    Union tags (``'csv'``, ``'str'``) are not keys and are dropped. A missing key is kept
    as the last part, since the user's path ends there.
    """
    path: list[str | int] = []
    node = raw
    for part in loc:
        if _has(node, part):
            node = node[part]
            path.append(part)
    if kind == "missing" and loc and (not path or path[-1] != loc[-1]):
        path.append(loc[-1])
    return tuple(path)


def _has(node: Any, part: Any) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _unknown_key(key: str, models: list[type[BaseModel]]) -> str:
    valid = sorted({name for m in models for name in m.model_fields})
    if not valid:
        return "unknown key"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    guess = f" did you mean {close[0]!r}?" if close else ""
    return f"unknown key;{guess} valid keys: {', '.join(valid)}"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def submodels(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a type annotation (through unions, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in submodels(arg)]


def tag_of(model: type[BaseModel]) -> str | None:
    """The ``type`` literal of a discriminated-union member, or None."""
    field = model.model_fields.get("type")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return get_args(field.annotation)[0]


def tags_of(models: Sequence[type[BaseModel]]) -> list[str]:
    """The ``type`` values of the union members among ``models``, in declaration order."""
    return [t for t in (tag_of(m) for m in models) if t is not None]


def models_at(model: type[BaseModel], loc: Sequence[Any]) -> list[type[BaseModel]]:
    """The model(s) a pydantic ``loc`` points into; several for an undecided union."""
    candidates = [model]
    for part in loc:
        found: list[type[BaseModel]] = []
        for m in candidates:
            if isinstance(part, int):
                found.append(m)
            elif part in m.model_fields:
                found += submodels(m.model_fields[part].annotation)
            elif tag_of(m) == part:
                found.append(m)
        if not found:
            return []
        candidates = found
    return candidates
