"""Load a pipeline spec from YAML: parse, apply overrides, validate, check, locate errors.

Every failure is one :class:`~engage.errors.SpecError` whose lines read
``FILE:LINE: FIELD.PATH: got VALUE; expected WHAT`` (or ``--set KEY=VALUE: ...`` when an
override supplied the value), so a user never sees a traceback or a pydantic dump.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engage.errors import SpecError
from engage.spec.checks import check_spec
from engage.spec.explain import problems_from_validation, show
from engage.spec.locate import FieldPath, Problem, SpecLocator, read_yaml
from engage.spec.models import CsvSource, ParquetSource, PipelineSpec
from engage.spec.overrides import apply_overrides, parse_override
from engage.train.plugins import ModelModuleError, import_model_module


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec together with where it came from.

    Attributes
    ----------
    spec
        The validated spec; relative CSV/Parquet paths are already resolved against
        ``base_dir``.
    path
        The spec file as the user named it, or None when parsed from a string.
    base_dir
        The directory relative file paths resolve against (the spec file's directory).
    text
        The original YAML text, for logging as an artifact.
    overrides
        The ``--set`` texts applied, in order.
    """

    spec: PipelineSpec
    path: Path | None
    base_dir: Path
    text: str
    overrides: tuple[str, ...]
    locator: SpecLocator | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.locator is None:  # built by hand (e.g. in a test): no line map, line 1
            origin = str(self.path) if self.path else "<string>"
            object.__setattr__(self, "locator", SpecLocator(origin, {}))

    def locate(self, *field_path: str | int) -> str:
        """``"pipelines/x.yaml:12"`` for a field, or ``"--set train.epochs=0"``.

        An absent field gets the line of its nearest ancestor that is in the file.
        """
        return self._locator.locate(field_path)

    def error(self, field_path: FieldPath, message: str) -> SpecError:
        """A located :class:`SpecError` for a check that runs later (e.g. on the data).

        Examples
        --------
        >>> raise loaded.error(("train", "batch_size"), f"got {b}; expected <= {rows} rows")
        """
        return self._locator.error([Problem(tuple(field_path), message)])

    @property
    def _locator(self) -> SpecLocator:
        assert self.locator is not None  # set in __post_init__
        return self.locator

    def resolved(self) -> dict[str, Any]:
        """The resolved spec (defaults filled in, overrides applied) as JSON-ready data."""
        return self.spec.model_dump(mode="json")


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> LoadedSpec:
    """Read, validate and check the spec file at ``path``.

    Parameters
    ----------
    path
        The YAML file; messages name it as given here.
    overrides
        ``--set`` texts such as ``"train.epochs=3"``, applied after reading.

    Raises
    ------
    SpecError
        For an unreadable file or any invalid content; the message locates each problem.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file", hint="check the path to the spec") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a spec file") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    return _parse(text, str(path), file.resolve().parent, overrides, file)


def parse_spec(
    text: str,
    *,
    origin: str = "<string>",
    base_dir: Path | None = None,
    overrides: Sequence[str] = (),
) -> LoadedSpec:
    """Validate and check spec YAML given as a string.

    Parameters
    ----------
    text
        The YAML document.
    origin
        How messages name the text.
    base_dir
        Where relative file paths resolve; the current directory when None.
    overrides
        ``--set`` texts, as for :func:`load_spec`.

    Raises
    ------
    SpecError
        For any invalid content.
    """
    return _parse(text, origin, (base_dir or Path.cwd()).resolve(), overrides, None)


def _parse(
    text: str, origin: str, base_dir: Path, overrides: Sequence[str], path: Path | None
) -> LoadedSpec:
    hint = "see docs/spec.md for every field"
    if path is not None:
        hint = f"run `engage validate {origin}` after fixing; see docs/spec.md"
    try:
        raw, lines = read_yaml(text, origin)
    except SpecError as exc:
        raise SpecError(exc.message, "; ".join(h for h in (exc.hint, hint) if h)) from None
    raw = apply_overrides(raw, overrides)
    set_paths = [(parse_override(o)[0], o) for o in overrides]
    locator = SpecLocator(origin, lines, set_paths, hint)
    try:
        spec = PipelineSpec.model_validate(raw)
    except ValidationError as exc:
        raise locator.error(problems_from_validation(exc, raw, PipelineSpec)) from None
    spec = _import_model_module(spec, base_dir, locator)
    problems = check_spec(spec, raw)
    if problems:
        raise locator.error(problems)
    return LoadedSpec(
        spec=_resolve_paths(spec, base_dir),
        path=path,
        base_dir=base_dir,
        text=text,
        overrides=tuple(overrides),
        locator=locator,
    )


def _import_model_module(spec: PipelineSpec, base_dir: Path, locator: SpecLocator) -> PipelineSpec:
    """Import ``model.module`` so the builder it registers is known; its path made absolute."""
    module = spec.model.module
    if module is None:
        return spec
    path = base_dir / Path(module).expanduser()
    try:
        import_model_module(path)
    except ModelModuleError as exc:
        problem = Problem(("model", "module"), f"got {show(module)}; expected a module: {exc}")
        raise locator.error([problem]) from None
    model = spec.model.model_copy(update={"module": str(path)})
    return spec.model_copy(update={"model": model})


def _resolve_paths(spec: PipelineSpec, base_dir: Path) -> PipelineSpec:
    source = spec.data.source
    if not isinstance(source, CsvSource | ParquetSource):
        return spec
    resolved = str(base_dir / Path(source.path).expanduser())
    data = spec.data.model_copy(update={"source": source.model_copy(update={"path": resolved})})
    return spec.model_copy(update={"data": data})
