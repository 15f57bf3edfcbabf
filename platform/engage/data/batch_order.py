"""The order training windows are visited in, one pure function for both input paths.

A training split is a sequence of windows in its canonical order (group, then time). Each
epoch takes it in consecutive *chunks* of ``buffer`` windows and visits every chunk in a
permutation drawn from the seed, the epoch and the chunk's index. The in-memory path
indexes its arrays with :func:`epoch_order`; the streaming path feeds the blocks a Ray
Data shard yields to :func:`shuffled_batches`, which holds one chunk at a time. Both give
the same batches for the same seed, and a split no longer than ``buffer`` is shuffled as a
whole, exactly as ``torch.randperm`` over the split with the epoch's generator.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

_CHUNK_STRIDE = 1 << 40  # separates the generator seeds of one epoch's chunks


def _chunk_perm(size: int, seed: int, epoch: int, chunk: int) -> torch.Tensor:
    """The permutation of chunk ``chunk`` (chunk 0 uses the loop's historical epoch seed)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch + chunk * _CHUNK_STRIDE)
    return torch.randperm(size, generator=g)


def epoch_order(n: int, seed: int, epoch: int, buffer: int) -> torch.Tensor:
    """Indices of ``n`` windows in the order epoch ``epoch`` visits them.

    Parameters
    ----------
    n : int
        Windows in the split.
    seed, epoch : int
        ``train.seed`` and the 1-based epoch; the same pair gives the same order.
    buffer : int
        Windows shuffled together (``data.shuffle_buffer``); at least ``n`` for a full shuffle.

    Returns
    -------
    torch.Tensor
        int64, shape ``(n,)``: chunk ``k`` covers positions ``[k*buffer, (k+1)*buffer)``.

    Raises
    ------
    ValueError
        If ``buffer`` is not positive.
    """
    if buffer < 1:
        raise ValueError(f"buffer must be positive, got {buffer}")
    parts = [
        lo + _chunk_perm(min(buffer, n - lo), seed, epoch, k)
        for k, lo in enumerate(range(0, n, buffer))
    ]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)


def _take(held: list[tuple[torch.Tensor, torch.Tensor]], rows: int) -> tuple:
    """Remove and return the first ``rows`` rows of the held blocks as one (x, y) pair."""
    xs, ys, got = [], [], 0
    while got < rows:
        x, y = held[0]
        part = min(rows - got, len(y))
        xs.append(x[:part])
        ys.append(y[:part])
        got += part
        if part == len(y):
            held.pop(0)
        else:
            held[0] = (x[part:], y[part:])
    return torch.cat(xs), torch.cat(ys)


def shuffled_batches(
    blocks: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    seed: int,
    epoch: int,
    buffer: int,
    batch: int,
    limit: int,
    first: int = 0,
    total: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of ``batch`` windows from a stream of ``(x, y)`` blocks in canonical order.

    Positions ``[first, first + limit)`` of :func:`epoch_order` over ``total`` windows
    (same ``seed``, ``epoch`` and ``buffer``) are visited and cut into batches; the last
    batch may be shorter. The stream starts at the first window of the chunk holding
    position ``first`` (window ``first // buffer * buffer`` of the split). Only one chunk of
    ``buffer`` windows (plus one incoming block) is held at a time.

    Parameters
    ----------
    blocks : iterable of (torch.Tensor, torch.Tensor)
        Windows ``x`` and labels ``y`` in canonical order, in blocks of any size.
    seed, epoch, buffer : int
        As for :func:`epoch_order`.
    batch : int
        Windows per yielded batch.
    limit : int
        Windows visited this epoch (a worker's equal share); the rest of the stream is read
        but not used.
    first : int
        This worker's first position in the epoch's order (``rank * limit`` for a worker
        whose stream is its :func:`engage.data.streaming.rank_span`; 0 for a stream that
        is the worker's whole share).
    total : int, optional
        Windows in the split the order is drawn over; default ``first + limit``.

    Raises
    ------
    ValueError
        If the stream ends before the last chunk the positions fall in.
    """
    total = first + limit if total is None else total
    end = first + limit
    held: list[tuple[torch.Tensor, torch.Tensor]] = []
    chunk = first // buffer
    start = at = chunk * buffer  # the split's window the stream's next chunk starts at
    have = 0
    carry_x: torch.Tensor | None = None
    carry_y: torch.Tensor | None = None
    blocks = iter(blocks)
    while at < end:
        size = min(buffer, total - at)
        for x, y in blocks:
            held.append((x, y))
            have += len(y)
            if have >= size:
                break
        if have < size:
            raise ValueError(
                f"the stream ended after {at - start + have} windows, expected "
                f"{min(total, -(-end // buffer) * buffer) - start} (from window {start})"
            )
        x, y = _take(held, size)
        have -= size
        # The chunk's permutation, cut to the positions this worker visits.
        perm = _chunk_perm(size, seed, epoch, chunk)[max(first, at) - at : min(end, at + size) - at]
        x, y = x[perm], y[perm]
        if carry_x is not None:  # the previous chunk's last, short batch continues here
            x, y = torch.cat([carry_x, x]), torch.cat([carry_y, y])
        at, chunk = at + size, chunk + 1
        full = len(y) - len(y) % batch if at < end else len(y)
        for lo in range(0, full, batch):
            yield x[lo : lo + batch], y[lo : lo + batch]
        carry_x, carry_y = (x[full:], y[full:]) if full < len(y) else (None, None)
