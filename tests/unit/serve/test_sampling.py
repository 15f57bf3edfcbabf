"""Drift samples: a bounded queue that never blocks, consumers on a thread, the SQLite store."""

from __future__ import annotations

import threading
import time

import numpy as np

from engage.serve.sampling import Sample, SampleConsumer, Sampler, SqliteSampleStore, read_samples


def _samples(n: int) -> list[Sample]:
    x = np.ones((3, 2), dtype=np.float32)
    return [Sample(f"r{i}", x, [0.1, 0.9], "1", "m", "1", time.time()) for i in range(n)]


class _Blocked(SampleConsumer):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.got: list[Sample] = []

    def consume(self, samples):
        self.release.wait(5)
        self.got += samples


def test_a_full_queue_drops_and_counts_without_blocking():
    consumer = _Blocked()
    sampler = Sampler([consumer], rate=1.0, queue_size=10, batch=1).start()

    started = time.perf_counter()
    dropped = sum(sampler.offer(_samples(1)) for _ in range(100))
    elapsed = time.perf_counter() - started
    consumer.release.set()
    sampler.stop()

    assert elapsed < 0.1
    assert dropped >= 80
    assert sampler.dropped == dropped
    assert len(consumer.got) == 100 - dropped


def test_rate_samples_a_share():
    sampler = Sampler([], rate=0.2, queue_size=100_000, seed=1)

    sampler.offer(_samples(5000))

    assert 800 < sampler._queue.qsize() < 1200


def test_sqlite_store_receives_samples(tmp_path):
    store = SqliteSampleStore(tmp_path / "samples.sqlite")
    sampler = Sampler([store], rate=1.0, queue_size=100).start()

    sampler.offer(_samples(7))
    sampler.stop()
    rows = read_samples(tmp_path / "samples.sqlite")

    assert len(rows) == 7
    assert {r["request_id"] for r in rows} == {f"r{i}" for i in range(7)}
    assert rows[0]["label"] == "1"
    assert rows[0]["version"] == "1"


def test_serving_hands_drift_its_own_sample_type():
    import engage.drift.samples as samples

    assert Sample is samples.Sample
    assert SampleConsumer is samples.SampleConsumer
