"""Metric points handed to the spool as columns (no tuple per point): the driver's writer.

``PipelineRun.log_metric_events`` transposes a batch of events into key, value, step and
timestamp columns and ``Spool.append_metrics`` packs them (issue 11: the per-point tuples
cost the driver's spool writer 3 µs of a 10-point step). The row must be the very blob the
tuple path wrote, and the events the run drops must stay dropped.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engage.events import Event
from engage.tracking import PipelineRun, Spool
from engage.tracking import batch_rows as rows


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    s = Spool(tmp_path / "spool.db")
    yield s
    s.close()


def _points(spool: Spool, run: str) -> list[tuple]:
    return [(e.kind, e.key, e.value, e.step, e.ts) for e in spool.pending(run, 10_000)]


def test_columns_pack_the_same_blob_as_points() -> None:
    points = [
        ("metric", "loss", 0.5, 1, 1_000),
        ("metric", "acc", math.nan, None, 1_001),
        ("metric", "loss", math.inf, 2, 999),
        ("metric", "lr", 3, 2, 1_002),  # an int value, cast to a float as before
    ]
    keys, values, steps, stamps = ([p[i] for p in points] for i in range(1, 5))

    assert rows.encode_metrics(keys, values, steps, stamps) == rows.encode(points)
    assert rows.decode(rows.encode_metrics(keys, values, steps, stamps)[0], 4)[1][3] is None


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="one entry per point"):
        rows.encode_metrics(["a", "b"], [1.0], [0, 1], [5, 6])


def test_run_spools_only_metrics_with_values_and_step_zero_for_none(spool: Spool) -> None:
    run = PipelineRun(spool, spool.create_run("sqlite:///x.db", "e", "r", {}), "u", "e")
    run.log_metric_events(
        [
            Event("metric", "loss", 0.5, step=3, timestamp_ms=10),
            Event("progress", "epoch", None, step=1, timestamp_ms=11),
            Event("metric", "empty", None, step=4, timestamp_ms=12),
            Event("metric", "test_loss", 0.25, step=None, timestamp_ms=13),
        ]
    )
    run.log_metric_events([Event("progress", "epoch", None, timestamp_ms=14)])
    run.log_metric_events([])

    assert _points(spool, run.local_id) == [
        ("metric", "loss", 0.5, 3, 10),
        ("metric", "test_loss", 0.25, 0, 13),
    ]


def test_a_large_batch_is_cut_into_rows_at_mlflows_limit(spool: Spool) -> None:
    run = PipelineRun(spool, spool.create_run("sqlite:///x.db", "e", "r", {}), "u", "e")
    run.log_metric_events([Event("metric", "m", float(i), i, 100 + i) for i in range(2_345)])

    batch_sizes = [
        n for (n,) in spool._read("SELECT n FROM outbox WHERE kind = ? ORDER BY seq", (rows.KIND,))
    ]
    assert batch_sizes == [1000, 1000, 345]
    assert _points(spool, run.local_id)[-1] == ("metric", "m", 2344.0, 2344, 2444)
