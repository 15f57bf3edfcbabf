"""Window preprocessing fitted on the training split, and applied chunk by chunk.

:func:`fit_preprocess` fits the window operators on the training windows only (no leak);
:meth:`FittedPreprocess.transform` applies them to any split on the chosen device, each
chunk passing the GPU memory guard first. The fitted state is plain tensors, and
:meth:`FittedPreprocess.module` wraps it as an ``nn.Module`` that travels with the logged
model, so serving keeps taking raw windows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from engage.data.preprocess import memory
from engage.data.preprocess.base import FittedStep, Operator
from engage.data.preprocess.device import guard

if TYPE_CHECKING:
    import torch

    from engage.data.preprocess.module import PreprocessModule

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 4096
"""Windows transformed per step; bounds the working memory of a step on either device."""

PIECE = 32
"""Windows the non-augmenting steps transform at a time on the CPU, within a chunk.

32 windows of the preprocessing-heavy pipeline keep a piece's float64 intermediates near
1.8 MiB, within a core's 2 MiB L2 cache (user CPU of the fastest of 8 builds of 2,048
windows, with :mod:`~engage.data.preprocess.memory`'s allocator settings: 62 ms at 32,
88 ms at 64, 116 ms at 128, 108 ms at 256).
"""


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
        self,
        x: np.ndarray,
        train: bool,
        device: torch.device | None = None,
        start: int = 0,
        total: int | None = None,
        epoch: int = 1,
        threads: int = 1,
        out: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        """Apply every step to windows ``x``, at most :data:`CHUNK` windows at a time.

        Augmentation draws its noise per chunk of :data:`CHUNK` windows of the whole split,
        from a generator seeded by the operator's seed, the epoch and the chunk's index, so
        a split transformed in pieces (a streamed split, block by block) gets what it gets
        whole, and every epoch gets new draws.

        Parameters
        ----------
        x : numpy.ndarray
            float32 ``(n, window, features)``.
        train : bool
            Apply augmentation (``train_only`` operators) too, from their seeded generators.
        device : torch.device, optional
            Where to run; default the CPU. Each chunk passes the memory guard first.
        start : int
            Index of ``x[0]`` among the windows of its split.
        total : int, optional
            Windows in the whole split; default ``start + len(x)``.
        epoch : int
            The training epoch (from 1) whose augmentation draws to take; epoch 1's are
            what a transform without an epoch draws.
        threads : int
            On the CPU, threads that transform the pieces side by side (torch releases the
            GIL inside its operators), each on one torch thread; the caller's torch thread
            count is restored after. Every piece's windows and draws are what one thread
            gives them, so the result is the same whatever the count. One by default: a
            whole split built once (the features cache) asks for the node's cores.
        out : numpy.ndarray, optional
            float32 ``(len(x), *output_shape)`` to write the result into (rows of a cache
            filled batch by batch), instead of a new array; it is what is returned.

        Returns
        -------
        tuple
            The float32 result and the guard's fall-back notes.

        Raises
        ------
        ValueError
            If ``total`` is below ``start + len(x)``, or ``out`` is not float32 of the
            result's shape.
        """
        import torch

        device = device or torch.device("cpu")
        total = start + len(x) if total is None else total
        if total < start + len(x):
            raise ValueError(f"total {total} is below start {start} + {len(x)} windows")
        if device.type == "cpu":  # each piece's scratch reused, not faulted in again
            memory.keep_scratch_memory()
        window, features = self.output_shape(*x.shape[1:])
        shape = (len(x), window, features)
        if out is None:
            out = _empty(shape)  # each piece written in place
        elif out.shape != shape or out.dtype != np.float32:
            raise ValueError(f"out is {out.dtype} {out.shape}, the result float32 {shape}")
        augmenting = self.augments and train
        # Without augmentation no chunk's draws tie windows together: the CPU takes
        # PIECE-sized ranges straight through (no chunk-sized intermediates to join).
        ranges = (
            _pieces(start, len(x))
            if augmenting or device.type != "cpu"
            else ((lo, min(lo + PIECE, len(x))) for lo in range(0, len(x), PIECE))
        )

        def one(piece: tuple[int, int]) -> str | None:
            """Transform ``x[lo:hi]`` into ``out[lo:hi]``; the guard's note, if any."""
            lo, hi = piece
            chunk = torch.from_numpy(np.ascontiguousarray(x[lo:hi]))
            place = guard(device, chunk.nbytes)
            out[lo:hi] = self._run(chunk, train, place.device, start + lo, total, epoch).cpu()
            return place.note

        pieces = list(ranges)
        workers = min(threads, len(pieces)) if device.type == "cpu" else 1
        if workers > 1:
            said = _on_threads(one, pieces, workers)
        else:
            said = [one(piece) for piece in pieces]
        notes: list[str] = []
        for note in said:
            if note and note not in notes:
                notes.append(note)
        return out, tuple(notes)

    @property
    def augments(self) -> bool:
        """Whether a step augments (draws noise on the training split)."""
        return any(s.op.train_only for s in self.steps)

    def split_for_cache(self) -> tuple[FittedPreprocess, FittedPreprocess]:
        """``(cached, per_epoch)``: the steps before the first augmentation, and the rest.

        The cached part is deterministic, so its output can be computed once and kept (in
        memory or on local disk); ``per_epoch`` (the augmentations and any step after the
        first of them) runs on that output every epoch, with the epoch's draws. Together
        they give :meth:`transform`: ``per_epoch.transform(cached.transform(x)[0], True,
        epoch=e)`` equals ``self.transform(x, True, epoch=e)``.
        """
        first = next((i for i, s in enumerate(self.steps) if s.op.train_only), len(self.steps))
        cached = replace(self, steps=self.steps[:first])
        return cached, replace(self, steps=self.steps[first:])

    def _run(
        self,
        chunk: torch.Tensor,
        train: bool,
        device: torch.device,
        first: int,
        total: int,
        epoch: int = 1,
    ) -> torch.Tensor:
        """The steps on one piece of a chunk whose first window is window ``first`` of the split."""
        x = chunk.to(device)
        index, at = divmod(first, CHUNK)
        size = min(CHUNK, total - index * CHUNK)  # the whole chunk's windows
        steps = [s for s in self.steps if train or not s.op.train_only]
        i = 0
        while i < len(steps):
            if steps[i].op.train_only:
                state = {k: v.to(device) for k, v in steps[i].state.items()}
                x = _augment(steps[i].op, x, state, index, at, size, epoch)
                i += 1
                continue
            j = i
            while j < len(steps) and not steps[j].op.train_only:
                j += 1
            x = _deterministic(steps[i:j], x, device)
            i = j
        return x

    def module(self) -> PreprocessModule:
        """The serving form: an ``nn.Module`` of the non-augmenting steps and their state."""
        from engage.data.preprocess.module import PreprocessModule

        return PreprocessModule([s for s in self.steps if not s.op.train_only])

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` behind this preprocessing: it then takes the windows of ``split.x``."""
        from engage.data.preprocess.module import Preprocessed

        return Preprocessed(model, self.module())


def _empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array of ``shape``, in memory torch allocates.

    Not ``numpy.empty``: numpy asks the kernel for transparent huge pages on arrays of
    4 MiB or more (``madvise``), and on a virtual machine the first touch of such memory
    cost up to 2.2 CPU-seconds for the 365 MiB features cache of the preprocessing-heavy
    pipeline (0.16-0.25 s in ordinary pages); a batch's result of 4 MiB or more can pay
    it again on every batch.
    """
    import torch

    return torch.empty(shape, dtype=torch.float32).numpy()


def _on_threads(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``fn`` over ``items`` on ``workers`` threads, each on one torch thread, results in
    order; the calling thread's torch thread count is set back after (setting it in a
    thread can change a library-wide count, as MKL's)."""
    import torch

    before = torch.get_num_threads()
    try:
        with ThreadPoolExecutor(
            workers, thread_name_prefix="engage-preprocess", initializer=torch.set_num_threads,
            initargs=(1,),
        ) as pool:  # fmt: skip
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(before)


def _deterministic(
    steps: Sequence[FittedStep], x: torch.Tensor, device: torch.device
) -> torch.Tensor:
    """``steps`` (none of them augmenting) over ``x``, :data:`PIECE` windows at a time on
    the CPU (the whole of ``x`` on a GPU): they treat each window on its own, and on the
    CPU a piece's working set (float64 sums, unfolded spans, spectra) stays in the cache,
    where a whole chunk's ran several times slower per window."""
    import torch

    states = [{k: v.to(device) for k, v in s.state.items()} for s in steps]
    piece = PIECE if device.type == "cpu" else max(1, len(x))
    out = []
    for lo in range(0, max(1, len(x)), piece):  # one (empty) piece for no windows
        part = x[lo : lo + piece]
        for step, state in zip(steps, states, strict=True):
            part = step.op.transform(part, state)
        out.append(part)
    return out[0] if len(out) == 1 else torch.cat(out)


def _pieces(start: int, n: int) -> Iterator[tuple[int, int]]:
    """``[lo, hi)`` ranges of ``n`` windows from window ``start`` that stay within one chunk."""
    lo = 0
    while lo < n:
        hi = min(n, ((start + lo) // CHUNK + 1) * CHUNK - start)
        yield lo, hi
        lo = hi


def _chunk_seed(seed: int, index: int, epoch: int = 1) -> int:
    """The seed of chunk ``index``'s draws in ``epoch``: the operator's own seed for the
    first chunk of epoch 1.

    Within 32 bits: torch's CPU generator (mt19937) keeps only the low 32 bits of a seed.
    The odd golden-ratio step keeps the chunks of operators with nearby seeds apart, and a
    second odd step (another of xxHash's primes) the epochs.
    """
    return (seed + index * 2_654_435_761 + (epoch - 1) * 2_246_822_519) % 2**32


def _augment(
    op: Operator, x: torch.Tensor, state: dict, index: int, at: int, size: int, epoch: int = 1
) -> torch.Tensor:
    """``op`` on rows ``[at, at + len(x))`` of chunk ``index`` (``size`` windows long).

    The noise is drawn for the whole chunk, so a piece of it gets the rows it would get
    whole: augmentations treat each window on its own (see :class:`Operator`).
    """
    import torch

    gen = torch.Generator(device=x.device)
    gen.manual_seed(_chunk_seed(op.params.seed, index, epoch))
    if at == 0 and len(x) == size:
        return op.transform(x, state, gen)
    whole = x.new_zeros((size, *x.shape[1:]))
    whole[at : at + len(x)] = x
    return op.transform(whole, state, gen)[at : at + len(x)]


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


def fit_in_parts(
    ops: Sequence[Operator],
    passes: Callable[[], Iterable[np.ndarray]],
    device: torch.device | None = None,
) -> FittedPreprocess:
    """Fit the window operators of ``ops`` on a training split read in parts, never whole.

    Each call of ``passes`` reads the training windows again, part by part. Every operator
    with state takes one pass: its parts are the windows after the (fitted) operators
    before it, without augmentation, as :func:`fit_preprocess` sees the whole split, and
    its statistics are merged across parts (:meth:`Operator.fit_part`).

    Parameters
    ----------
    ops : sequence of Operator
        The operators of ``data.preprocess``, all of them (row operators are skipped), so
        that a refusal names the step's index in the spec.

    Raises
    ------
    SpecError
        Before any pass, for an operator whose fit needs every training window at once.
    """
    import torch

    from engage.data.preprocess.plan import check_streamable

    check_streamable(ops)
    device = device or torch.device("cpu")
    steps: list[FittedStep] = []
    notes: list[str] = []
    for op in (op for op in ops if op.level == "window"):
        state = {}
        if op.needs_fit:
            state = _fit_streamed(op, FittedPreprocess(tuple(steps)), passes, device, notes)
        steps.append(FittedStep(op, state))
    return FittedPreprocess(tuple(steps), device=device.type, notes=tuple(notes))


def _fit_streamed(
    op: Operator,
    before: FittedPreprocess,
    passes: Callable[[], Iterable[np.ndarray]],
    device: torch.device,
    notes: list[str],
) -> dict:
    """One pass: ``op``'s statistics of every part after ``before``, merged, as its state
    (``op`` is a :class:`~engage.data.preprocess.base.PartFit`: :func:`check_streamable`
    refused the others)."""
    import torch

    summary = None
    for part in passes():
        x, said = before.transform(part, train=False, device=device)
        place = guard(device, x.nbytes)
        notes += [n for n in (*said, place.note) if n and n not in notes]
        got = op.fit_part(torch.from_numpy(np.ascontiguousarray(x)).to(place.device))
        got = {k: v.detach().cpu() for k, v in got.items()}
        summary = got if summary is None else op.merge_parts(summary, got)
    if summary is None:
        raise ValueError(f"no training windows to fit {op.name!r} on")
    return {k: v.detach().cpu() for k, v in op.fit_from_parts(summary).items()}
