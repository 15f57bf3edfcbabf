"""The preprocessing extension point: one abstract operator, one registry of them.

An operator is a small class with a pydantic ``Params`` model, an optional :meth:`fit` on the
training split and a :meth:`transform` written as torch operations, so the same code runs
on the CPU or on a GPU. Window operators work on a ``(batch, window, features)`` tensor;
row operators (``level = "row"``) work on the validated table before it is windowed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from engage.errors import SpecError
from engage.registry import Registry

if TYPE_CHECKING:  # torch loads only when an operator runs: `engage validate` stays fast
    import torch

State = dict[str, "torch.Tensor"]
"""The fitted state of one operator: plain tensors by name (empty when nothing is fitted)."""


class OperatorParams(BaseModel):
    """Base of every operator's parameter model: unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Operator(ABC):
    """One preprocessing step.

    Subclasses set ``name`` (the spec's ``op``), ``Params`` (their parameter model) and
    implement :meth:`transform`; ``level`` says whether they see windows or table rows,
    and ``train_only`` marks augmentation, which serving and evaluation skip. An
    augmentation treats each window on its own (window ``i`` of a batch gets the ``i``-th
    draws), so a split transformed in pieces gets the draws of the whole. ``fit_param``
    names the parameter that makes the operator fit (for messages about its fit).

    Parameters
    ----------
    params : OperatorParams
        The validated parameters (see :meth:`from_spec`).
    """

    name: ClassVar[str]
    Params: ClassVar[type[OperatorParams]] = OperatorParams
    level: ClassVar[Literal["row", "window"]] = "window"
    train_only: ClassVar[bool] = False
    fit_param: ClassVar[str | None] = None

    def __init__(self, params: OperatorParams) -> None:
        self.params = params

    @property
    def needs_fit(self) -> bool:
        """Whether :meth:`fit` learns anything (default: no)."""
        return False

    def fit(self, x: torch.Tensor) -> State:
        """Learn the state from the training windows ``x`` (default: nothing to learn)."""
        return {}

    @property
    def fits_in_parts(self) -> bool:
        """Whether :meth:`fit` can be computed part by part, as a streamed training split
        needs: true when there is nothing to fit, or when the operator is a
        :class:`PartFit` too."""
        return not self.needs_fit or isinstance(self, PartFit)

    @abstractmethod
    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The transformed batch.

        Parameters
        ----------
        x : torch.Tensor
            ``(batch, window, features)`` float windows on any device.
        state : dict of str to torch.Tensor
            What :meth:`fit` returned, on ``x``'s device.
        generator : torch.Generator, optional
            The random source of augmentation operators (unused by the others).
        """

    def output_shape(self, window: int, features: int) -> tuple[int, int]:
        """``(window, features)`` of the output for an input of that shape (default: same)."""
        return window, features

    def time_span(self, first: int, last: int) -> tuple[int, int]:
        """First and last time (ns) of a series after this operator (default: the same).

        A row operator that moves them says how, so a streamed source's split cuts are
        computed from its shards' key columns as the in-memory path computes them.
        """
        return first, last


class PartFit(ABC):
    """What an operator whose :meth:`Operator.fit` needs training statistics adds so a
    streamed training split can be fitted part by part, never held whole."""

    @abstractmethod
    def fit_part(self, x: torch.Tensor) -> State:
        """Sufficient statistics of one part ``x`` of the training windows."""

    @abstractmethod
    def merge_parts(self, a: State, b: State) -> State:
        """The statistics of two parts together (an associative merge of :meth:`fit_part`'s)."""

    @abstractmethod
    def fit_from_parts(self, summary: State) -> State:
        """The state :meth:`Operator.fit` would return on every part merged into ``summary``."""


@dataclass(frozen=True)
class FittedStep:
    """One window operator and its fitted state (CPU tensors)."""

    op: Operator
    state: State


OPERATORS: Registry[type[Operator]] = Registry("preprocessing operator", SpecError)
"""Every preprocessing operator by its spec name; an unknown name is a :class:`SpecError`."""


def register_operator(cls: type[Operator]) -> type[Operator]:
    """Class decorator: add an :class:`Operator` subclass to :data:`OPERATORS` by its ``name``.

    Raises
    ------
    ValueError
        If another class is already registered under the same name.
    """
    return OPERATORS.add(cls)


def make_operator(op: str, params: dict[str, Any], index: int = 0) -> Operator:
    """Instantiate the operator ``op`` with ``params`` validated by its ``Params`` model.

    Parameters
    ----------
    op, params : str, dict
        The spec's ``data.preprocess[index].op`` and ``.params``.
    index : int
        The step's position in ``data.preprocess``, for the error's location.

    Raises
    ------
    SpecError
        If ``op`` is unknown (listing the valid names) or ``params`` do not validate; the
        message names the field, e.g. ``data.preprocess[1].params.std``.
    """
    from pydantic import ValidationError

    where = f"data.preprocess[{index}]"
    if op not in OPERATORS:
        valid = ", ".join(OPERATORS.names())
        raise SpecError(
            f"{where}.op: unknown preprocessing operator {op!r}", hint=f"use one of: {valid}"
        )
    cls = OPERATORS.get(op)
    try:
        return cls(cls.Params.model_validate(params))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        located = f"{where}.params.{field}" if field else f"{where}.params"
        raise SpecError(
            f"{located}: {first['msg']}", hint=f"see the {op!r} operator's parameters"
        ) from None
