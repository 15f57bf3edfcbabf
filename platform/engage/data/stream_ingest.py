"""How a streamed training split reaches several Ray Train workers: one dataset per worker.

Ray Train's default ingest (``DataConfig``) hands each worker a ``streaming_split`` of the
dataset, and Ray Data's ``OutputSplitter`` deals the blocks to whichever split has
received the fewest rows so far ("OutputSplitter does not provide any ordering
guarantees"): a worker's windows are interleaved blocks of the split, not the share the
in-memory path gives it (positions ``[rank * n // world, (rank + 1) * n // world)`` of
the epoch's seeded order). :class:`StreamIngest` gives every worker its own lazy dataset
instead, of the units and windows of :func:`engage.data.streaming.rank_span`: the chunks
of ``data.shuffle_buffer`` windows its positions fall in, read in canonical order, so
:func:`engage.data.batch_order.shuffled_batches` draws the same permutations and the
worker trains on the in-memory path's batches. Neighbouring workers read at most one
shared chunk twice (the whole split, when it is within one buffer).

This module imports Ray; :mod:`engage.data` never imports it.
"""

from __future__ import annotations

import copy
from typing import Any

from ray.train import DataConfig

from engage.data.streaming import STREAM_CONFIG, rank_span, train_dataset


class StreamIngest(DataConfig):
    """Ray Train's ingest for a streamed split: the dataset ``train`` (built by
    :func:`engage.data.streaming.train_dataset`) becomes one dataset per worker, of its
    :func:`~engage.data.streaming.rank_span`, read in order; any other dataset is split
    as ``DataConfig`` splits it. One worker reads the whole split as Ray Data's own
    ingest would.

    With several workers, each one's dataset runs its own Ray Data executor, reading one
    unit at a time with ``reader_cpus / world`` CPUs reserved: together they need the
    ``reader_cpus`` the trainer leaves free for Ray Data, and every worker's reads can
    always be scheduled. (Executors that each took the free CPU for a read whose output
    waits for its worker, while that worker waits in an all-reduce for another worker
    whose read cannot start, would stall the job.)

    Parameters
    ----------
    name : str
        The dataset to give out by worker span.
    execution_options : ray.data.ExecutionOptions, optional
        Applied to each worker's dataset (Ray Train's ingest defaults when None); the
        blocks are kept in order whatever they say.
    reader_cpus : float
        CPUs the workers' reads reserve together (the trainer's ``READER_CPUS``).
    """

    def __init__(
        self, name: str = "train", execution_options: Any = None, reader_cpus: float = 1.0
    ) -> None:
        super().__init__(datasets_to_split=[name], execution_options=execution_options)
        self.name = name
        self.reader_cpus = reader_cpus
        self.ingest_options = execution_options

    def configure(
        self,
        datasets: dict[str, Any],
        world_size: int,
        worker_handles: Any,
        worker_node_ids: Any,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Each worker's iterators: its span's dataset of ``self.name``, the rest as usual.

        Raises
        ------
        ValueError
            If ``self.name`` is not a dataset built by ``train_dataset``.
        """
        rest = {k: v for k, v in datasets.items() if k != self.name}
        output = super().configure(rest, world_size, worker_handles, worker_node_ids, **kwargs)
        if self.name not in datasets:
            return output
        stream = datasets[self.name].context.get_config(STREAM_CONFIG)
        if stream is None:
            raise ValueError(f"dataset {self.name!r} is not a streamed split (train_dataset)")
        buffer = stream.plan.spec.shuffle_buffer
        for rank in range(world_size):
            if world_size == 1:
                dataset = train_dataset(stream)
            else:
                span = rank_span(stream.n_train, world_size, rank, buffer)
                dataset = train_dataset(stream, span, self.reader_cpus / world_size)
            options = (
                copy.deepcopy(self.ingest_options)
                if self.ingest_options is not None
                else DataConfig.default_ingest_options()
            )
            options.preserve_order = True
            dataset.context.execution_options = options
            dataset.set_name(f"{self.name}_{rank}")
            output[rank][self.name] = dataset.iterator()
        return output
