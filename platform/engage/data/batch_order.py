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
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of ``batch`` windows from a stream of ``(x, y)`` blocks in canonical order.

    The first ``limit`` windows of the stream are visited in :func:`epoch_order`
    (``limit`` windows, same ``seed``, ``epoch`` and ``buffer``) and cut into batches; the
    last batch may be shorter. Only one chunk of ``buffer`` windows (plus one incoming
    block) is held at a time.

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
    """
    held: list[tuple[torch.Tensor, torch.Tensor]] = []
    have = chunk = done = 0
    carry_x: torch.Tensor | None = None
    carry_y: torch.Tensor | None = None
    blocks = iter(blocks)
    while done < limit:
        size = min(buffer, limit - done)
        for x, y in blocks:
            held.append((x, y))
            have += len(y)
            if have >= size:
                break
        if have < size:
            raise ValueError(f"the stream ended after {done + have} windows, expected {limit}")
        x, y = _take(held, size)
        have -= size
        perm = _chunk_perm(size, seed, epoch, chunk)
        x, y = x[perm], y[perm]
        if carry_x is not None:  # the previous chunk's last, short batch continues here
            x, y = torch.cat([carry_x, x]), torch.cat([carry_y, y])
        done, chunk = done + size, chunk + 1
        full = len(y) - len(y) % batch if done < limit else len(y)
        for lo in range(0, full, batch):
            yield x[lo : lo + batch], y[lo : lo + batch]
        carry_x, carry_y = (x[full:], y[full:]) if full < len(y) else (None, None)
