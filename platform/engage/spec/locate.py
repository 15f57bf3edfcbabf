"""Read spec YAML with ``yaml.safe_load`` semantics while remembering where each key is.

PyYAML's ``safe_load`` forgets line numbers and silently keeps the last of two duplicate
keys. Here the text is composed into nodes with the SafeLoader, a small walker records the
1-based line of every key path (and rejects duplicates), and only then is the node tree
constructed into plain Python data, exactly as ``safe_load`` would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

from engage.errors import SpecError

FieldPath = tuple[str | int, ...]
_Key = tuple[str, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Aliases let a few lines expand into millions of nodes ("billion laughs"); a spec never
# needs more than a few hundred.
_MAX_NODES = 100_000


def dotted(path: Sequence[str | int]) -> str:
    """Render a field path the way users write it: ``data.source.path``."""
    return ".".join(str(p) for p in path) or "(top level)"


def read_yaml(text: str, origin: str) -> tuple[dict[str, Any], dict[_Key, int]]:
    """Parse ``text`` into a mapping and a map from key path to 1-based line.

    Parameters
    ----------
    text
        The YAML document.
    origin
        How messages name the text, e.g. ``pipelines/quickstart.yaml``.

    Returns
    -------
    tuple
        The data (as ``yaml.safe_load`` returns it) and ``{("train", "epochs"): 12, ...}``;
        list items are keyed by their index as a string.

    Raises
    ------
    SpecError
        On a syntax error, a duplicate key, an empty document or a non-mapping root.
    """
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise SpecError(
                f"{origin}:1: the file is empty; a spec is a mapping with name, data and model"
            )
        lines: dict[_Key, int] = {}
        _Walker(origin, lines).walk(root, ())
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, origin) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{origin}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__} ({data!r:.40})"
        raise SpecError(
            f"{origin}:{lines[()]}: the top level must be a mapping of sections "
            f"(name, data, model, train, tracking); got {kind}"
        )
    return data, lines


def _syntax_error(exc: yaml.MarkedYAMLError, origin: str) -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark else origin
    what = exc.problem or exc.context or "unreadable YAML"
    if exc.problem and exc.context:
        what = f"{exc.problem} ({exc.context})"
    kind = "unsupported YAML" if isinstance(exc, ConstructorError) else "YAML syntax error"
    return SpecError(
        f"{where}: {kind}: {what}",
        hint="check the indentation and quoting on that line and the one above it",
    )


class _Walker:
    """Records the line of every key path; rejects duplicate keys and runaway aliases."""

    def __init__(self, origin: str, lines: dict[_Key, int]) -> None:
        self.origin = origin
        self.lines = lines
        self.visited = 0
        self.stack: set[int] = set()

    def walk(self, node: Node, path: _Key) -> None:
        """Record the line of ``node`` and everything below it under key ``path``.

        Raises
        ------
        SpecError
            If a key repeats in one mapping, an alias contains itself, or aliases expand the
            document past 100,000 values.
        """
        self.visited += 1
        where = f"{self.origin}:{node.start_mark.line + 1}"
        if id(node) in self.stack:
            raise SpecError(f"{where}: {dotted(path)}: an alias refers to its own ancestor")
        if self.visited > _MAX_NODES:
            raise SpecError(f"{where}: aliases expand the document past {_MAX_NODES} values")
        self.lines.setdefault(path, node.start_mark.line + 1)
        self.stack.add(id(node))
        if isinstance(node, MappingNode):
            self._mapping(node, path)
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                self.walk(item, (*path, str(index)))
        self.stack.discard(id(node))

    def _mapping(self, node: MappingNode, path: _Key) -> None:
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise SpecError(
                    f"{self.origin}:{line}: {dotted((*path, key))}: duplicate key {key!r} "
                    f"at lines {seen[key]} and {line}; keep one (YAML would silently use "
                    "the last)"
                )
            seen[key] = line
            # The key's own line, not its value's: a nested mapping starts a line later.
            self.lines[(*path, key)] = line
            self.walk(value_node, (*path, key))


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: the user's field path and what is wrong with it."""

    path: FieldPath
    text: str


class SpecLocator:
    """Turns field paths into ``file:line`` (or the ``--set`` text that set the field).

    Parameters
    ----------
    origin
        How the spec is named in messages (its path as the user gave it).
    lines
        Key path to 1-based line, from :func:`read_yaml`.
    overrides
        ``(key path, override text)`` in the order applied; a later one wins.
    hint
        The hint every :class:`SpecError` from this spec carries.
    """

    def __init__(
        self,
        origin: str,
        lines: dict[_Key, int],
        overrides: Sequence[tuple[_Key, str]] = (),
        hint: str | None = None,
    ) -> None:
        self.origin = origin
        self.lines = lines
        self.overrides = tuple(overrides)
        self.hint = hint

    def locate(self, path: Sequence[str | int]) -> str:
        """``origin:line`` of ``path``, of its nearest ancestor, or ``--set ...``."""
        key = tuple(str(p) for p in path)
        for override_key, text in reversed(self.overrides):
            if key[: len(override_key)] == override_key:
                return f"--set {text}"
        while key and key not in self.lines:
            key = key[:-1]
        return f"{self.origin}:{self.lines.get(key, 1)}"

    def line(self, problem: Problem) -> str:
        """One message line: ``FILE:LINE: FIELD.PATH: TEXT``."""
        return f"{self.locate(problem.path)}: {dotted(problem.path)}: {problem.text}"

    def error(self, problems: Sequence[Problem]) -> SpecError:
        """One :class:`SpecError` listing every problem, in file order, overrides last."""
        ordered = sorted(problems, key=self._sort_key)
        return SpecError("\n".join(self.line(p) for p in ordered), hint=self.hint)

    def _sort_key(self, problem: Problem) -> tuple[int, int]:
        where = self.locate(problem.path)
        if where.startswith("--set "):
            return (1, 0)
        return (0, int(where.rsplit(":", 1)[1]))
