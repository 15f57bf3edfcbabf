"""Window preprocessing fitted on the training split, and applied chunk by chunk.

:func:`fit_preprocess` fits the window operators on the training windows only (no leak);
:meth:`FittedPreprocess.transform` applies them to any split on the chosen device, each
chunk passing the GPU memory guard first. The fitted state is plain tensors, and
:meth:`FittedPreprocess.module` wraps it as an ``nn.Module`` that travels with the logged
model, so serving keeps taking raw windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engage.data.preprocess.base import FittedStep, Operator
from engage.data.preprocess.device import Placement, guard

if TYPE_CHECKING:
    import torch

    from engage.data.preprocess.module import PreprocessModule

CHUNK = 4096
"""Windows transformed per step; bounds the working memory of a step on either device."""


@dataclass(frozen=True)
class FittedPreprocess:
    """The window operators of a spec, fitted on its training split.

    Attributes
    ----------
    steps : tuple of FittedStep
        In spec order; row operators are not here (they shaped the table before windowing).
    device : str
        Where the windows were transformed (``cpu`` or ``cuda``).
    notes : tuple of str
        What the GPU memory guard said when it fell back to the CPU.
    """

    steps: tuple[FittedStep, ...]
    device: str = "cpu"
    notes: tuple[str, ...] = field(default=())

    def output_shape(self, window: int, features: int) -> tuple[int, int]:
        """``(window, features)`` of the model input for raw windows of that shape."""
        for step in self.steps:
            window, features = step.op.output_shape(window, features)
        return window, features

    def transform(
        self, x: np.ndarray, train: bool, device: torch.device | None = None
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        """Apply every step to windows ``x``, :data:`CHUNK` windows at a time.

        Parameters
        ----------
        x : numpy.ndarray
            float32 ``(n, window, features)``.
        train : bool
            Apply augmentation (``train_only`` operators) too, from their seeded generators.
        device : torch.device, optional
            Where to run; default the CPU. Each chunk passes the memory guard first.

        Returns
        -------
        tuple
            The float32 result and the guard's fall-back notes.
        """
        import torch

        device = device or torch.device("cpu")
        gens: dict[int, dict[str, torch.Generator]] = {}
        out, notes = [], []
        for lo in range(0, len(x), CHUNK):
            chunk = torch.from_numpy(np.ascontiguousarray(x[lo : lo + CHUNK]))
            place = guard(device, chunk.nbytes)
            if place.note and place.note not in notes:
                notes.append(place.note)
            out.append(self._run(chunk, train, place, gens).cpu().numpy())
        if not out:
            window, features = self.output_shape(*x.shape[1:])
            return np.zeros((0, window, features), np.float32), ()
        return np.concatenate(out).astype(np.float32, copy=False), tuple(notes)

    def _run(self, chunk: torch.Tensor, train: bool, place: Placement, gens: dict) -> torch.Tensor:
        x = chunk.to(place.device)
        for i, step in enumerate(self.steps):
            if step.op.train_only and not train:
                continue
            gen = _generator(gens, i, step.op, place.device) if step.op.train_only else None
            state = {k: v.to(place.device) for k, v in step.state.items()}
            x = step.op.transform(x, state, gen)
        return x

    def module(self) -> PreprocessModule:
        """The serving form: an ``nn.Module`` of the non-augmenting steps and their state."""
        from engage.data.preprocess.module import PreprocessModule

        return PreprocessModule([s for s in self.steps if not s.op.train_only])

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` behind this preprocessing: it then takes the windows of ``split.x``."""
        from engage.data.preprocess.module import Preprocessed

        return Preprocessed(model, self.module())


def _generator(gens: dict, i: int, op: Operator, device: torch.device) -> torch.Generator:
    """One seeded generator per augmentation step and device, kept across chunks."""
    import torch

    per_step = gens.setdefault(i, {})
    if device.type not in per_step:
        gen = torch.Generator(device=device)
        gen.manual_seed(op.params.seed)
        per_step[device.type] = gen
    return per_step[device.type]


def fit_preprocess(
    ops: Sequence[Operator], train_x: np.ndarray, device: torch.device | None = None
) -> FittedPreprocess:
    """Fit the window operators of ``ops`` on the training windows, one after the other.

    Each operator is fitted on the output of the ones before it, without augmentation, so
    its state describes what it will see at serving time. Nothing but ``train_x`` is read.
    """
    import torch

    device = device or torch.device("cpu")
    window_ops = [op for op in ops if op.level == "window"]
    # Only operators with state need the training windows as the ones before them leave
    # them; past the last of those nothing is computed here.
    last = max((i for i, op in enumerate(window_ops) if op.needs_fit), default=-1)
    x, steps, notes = train_x, [], []
    for i, op in enumerate(window_ops):
        state = {}
        if op.needs_fit:
            place = guard(device, x.nbytes)
            notes += [place.note] if place.note and place.note not in notes else []
            fitted = op.fit(torch.from_numpy(np.ascontiguousarray(x)).to(place.device))
            state = {k: v.detach().cpu() for k, v in fitted.items()}
        steps.append(FittedStep(op, state))
        if i < last and not op.train_only:
            x, said = FittedPreprocess((steps[-1],)).transform(x, train=False, device=device)
            notes += [n for n in said if n not in notes]
    return FittedPreprocess(tuple(steps), device=device.type, notes=tuple(notes))
