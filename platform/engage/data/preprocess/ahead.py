"""Preparing the training inputs ahead, in a background thread of the training process.

With the deterministic features cached, each batch (or each epoch) still runs the
augmentation: a few milliseconds of random draws and elementwise torch operations per
batch, about as long as a small model's step. Inline, that work and the step alternate on
one core. Torch releases the GIL inside its operators, so a thread of the same process
runs the augmentation on a second core while the step computes, with no process to start
and no batch to copy across (what a DataLoader worker process costs the training process).

:class:`Ahead` keeps up to ``depth`` items of any iterator prepared ahead (the loader's
batches); :class:`EpochInputs` computes the next epoch's augmented inputs of a cached
split while the current epoch trains. Both hand over exactly what the source would have
given inline: the same items in the same order, so the same batches for the same seed.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import torch

T = TypeVar("T")

_END = object()  # the source is exhausted
_POLL_S = 0.05  # how often a producer blocked on a full queue checks for close()


class Ahead(Generic[T]):
    """Iterate ``source`` in a daemon thread, holding up to ``depth`` items ready.

    The consumer gets the source's items in order; an exception the source raises reaches
    the consumer at the item where it was raised. :meth:`close` stops the thread (it
    finishes the item under way, then leaves); an ``Ahead`` is also an iterator, ending
    when the source does. Closing also closes a generator source, after the thread left it.

    Parameters
    ----------
    source : iterator
        What to prepare ahead (its items are produced in the thread).
    depth : int
        Items held ready at most (the queue's size): the prefetch depth.

    Raises
    ------
    ValueError
        If ``depth`` is not positive.
    """

    def __init__(self, source: Iterator[T], depth: int) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be positive, got {depth}")
        self._source = source
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        #: CPU seconds the thread has spent so far (its ``thread_time``), updated per item.
        self.cpu_seconds = 0.0
        self.thread = threading.Thread(target=self._produce, name="engage-ahead", daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        start = time.thread_time()
        try:
            for item in self._source:
                self.cpu_seconds = time.thread_time() - start
                if not self._put((item, None)):
                    return
            self._put((_END, None))
        except BaseException as exc:
            self._put((_END, exc))

    def _put(self, entry: tuple[Any, BaseException | None]) -> bool:
        """Queue ``entry``, waiting for room; False once :meth:`close` was called."""
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Ahead[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        item, exc = self._queue.get()
        if item is _END:
            self._done = True
            self.thread.join()
            if exc is not None:
                raise exc
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop the thread and drop what it prepared (waits for the item under way)."""
        self._stop.set()
        self._done = True
        while True:  # make room, so a producer blocked on put sees the stop at once
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self.thread.join()
        close = getattr(self._source, "close", None)
        if close is not None:  # a generator source: its own clean-up runs now
            close()


class EpochInputs:
    """The augmented model inputs of each epoch of a cached split, the next one prepared
    in a background thread while the current one trains.

    ``get(epoch)`` returns ``augment`` run over ``features`` with that epoch's draws
    (exactly :func:`engage.train.loop.epoch_inputs`), computing it now unless the thread
    already did, and starts epoch ``epoch + 1`` in the thread when it is not past ``last``.
    At most two epochs' inputs are held at once: the one training and the one ahead.

    Parameters
    ----------
    features : torch.Tensor
        The cached deterministic features of the whole training split.
    augment : FittedPreprocess
        The steps from the first augmentation on (``split_for_cache()[1]``).
    last : int
        The last epoch to prepare (``train.epochs``).
    """

    def __init__(self, features: torch.Tensor, augment: Any, last: int) -> None:
        self.features, self.augment, self.last = features, augment, last
        #: Epochs whose inputs are being (or were) prepared ahead, by epoch.
        self.ahead: dict[int, Future] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engage-epoch")

    def _compute(self, epoch: int) -> torch.Tensor:
        import torch

        out, _ = self.augment.transform(self.features.numpy(), train=True, epoch=epoch)
        return torch.from_numpy(out)

    def get(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s inputs; epoch ``epoch + 1``'s start in the background."""
        pending = self.ahead.pop(epoch, None)
        for stale in [e for e in self.ahead if e != epoch + 1]:  # a restart moved on
            self.ahead.pop(stale).cancel()
        x = pending.result() if pending is not None else self._compute(epoch)
        if epoch + 1 <= self.last and epoch + 1 not in self.ahead:
            self.ahead[epoch + 1] = self._pool.submit(self._compute, epoch + 1)
        return x

    def close(self) -> None:
        """Drop what is prepared ahead and stop the thread (waits for an epoch under way)."""
        for future in self.ahead.values():
            future.cancel()
        self.ahead.clear()
        self._pool.shutdown(wait=True)
