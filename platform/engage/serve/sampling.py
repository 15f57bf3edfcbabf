"""Samples of served inputs and predictions for the drift detectors, off the request path.

Each replica keeps a bounded queue; a request offers its windows with probability ``rate``
and never waits: a full queue drops the sample and counts it. A background thread hands
what it takes to every registered consumer; the default one appends to
``<home>/serve/<app>/samples.sqlite`` (WAL), which the degradation/drift side reads.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from engage.drift.samples import Sample, SampleConsumer
from engage.paths import private_file

__all__ = [
    "SAMPLE_CONSUMERS",
    "Sample",
    "SampleConsumer",
    "Sampler",
    "SqliteSampleStore",
    "make_consumers",
    "read_samples",
]

_log = logging.getLogger(__name__)


class SqliteSampleStore(SampleConsumer):
    """Appends samples to a SQLite file in WAL mode (readers never block the writer)."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS samples (
        request_id TEXT NOT NULL,
        ts REAL NOT NULL,
        model TEXT NOT NULL,
        version TEXT NOT NULL,
        inputs TEXT NOT NULL,      -- JSON (window x features)
        prediction TEXT NOT NULL,  -- JSON list: the model's output row
        label TEXT                 -- the predicted class or value returned
    );
    CREATE INDEX IF NOT EXISTS samples_ts ON samples(ts);
    CREATE INDEX IF NOT EXISTS samples_request ON samples(request_id);
    """

    def __init__(self, path: Path) -> None:
        self.path = private_file(Path(path))  # 0600 in a 0700 folder (engage.paths)
        self._db = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(self.SCHEMA)

    def consume(self, samples: Sequence[Sample]) -> None:
        """Append the samples in one transaction."""
        rows = [
            (
                s.request_id,
                s.timestamp,
                s.model,
                s.version,
                json.dumps(s.inputs.tolist()),
                json.dumps(s.prediction),
                None if s.label is None else str(s.label),
            )
            for s in samples
        ]
        with self._db:
            self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()


def read_samples(path: Path, limit: int = 1000) -> list[dict]:
    """The newest samples of a store, newest first (for the drift side and tests)."""
    with sqlite3.connect(path, timeout=10) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM samples ORDER BY ts DESC LIMIT ?", (limit,)).fetchall()
    return [dict(r) for r in rows]


# name -> factory(app folder) -> consumer; the spec's deploy.sampling.consumers picks them.
SAMPLE_CONSUMERS: dict[str, Callable[[Path], SampleConsumer]] = {
    "sqlite": lambda folder: SqliteSampleStore(folder / "samples.sqlite"),
}


def make_consumers(names: Sequence[str], folder: Path) -> list[SampleConsumer]:
    """The consumers named in the spec, built for the app's ``folder``.

    Raises
    ------
    ValueError
        For an unknown name; the message lists the registered ones.
    """
    unknown = [n for n in names if n not in SAMPLE_CONSUMERS]
    if unknown:
        raise ValueError(
            f"unknown sample consumer(s) {', '.join(unknown)}; registered: {', '.join(sorted(SAMPLE_CONSUMERS))}"
        )
    return [SAMPLE_CONSUMERS[n](folder) for n in names]


class Sampler:
    """The bounded queue and the thread that empties it into the consumers."""

    def __init__(
        self,
        consumers: Sequence[SampleConsumer],
        rate: float,
        queue_size: int,
        *,
        seed: int | None = None,
        batch: int = 64,
    ) -> None:
        self.consumers = list(consumers)
        self.rate = rate
        self._queue: queue.Queue[Sample] = queue.Queue(maxsize=queue_size)
        self._random = random.Random(seed)
        self._batch = batch
        self._stop = threading.Event()
        self.dropped = 0
        self.handed = 0
        self._thread = threading.Thread(target=self._loop, name="engage-sampler", daemon=True)

    def start(self) -> Sampler:
        """Start the thread that hands queued samples to the consumers; returns self."""
        self._thread.start()
        return self

    def offer(self, samples: Sequence[Sample]) -> int:
        """Queue a ``rate`` share of ``samples`` without blocking; returns how many dropped."""
        return self.put([samples[i] for i in self.pick(len(samples))])

    def pick(self, n: int) -> list[int]:
        """Which of ``n`` rows the rate selects: drawn before any :class:`Sample` is built."""
        if self.rate >= 1.0:
            return list(range(n))
        draw, rate = self._random.random, self.rate
        return [i for i in range(n) if draw() < rate]

    def put(self, samples: Sequence[Sample]) -> int:
        """Queue ``samples`` (already picked) without blocking; returns how many dropped."""
        dropped = 0
        for s in samples:
            try:
                self._queue.put_nowait(s)
            except queue.Full:
                dropped += 1
        self.dropped += dropped
        return dropped

    def _loop(self) -> None:
        while not self._stop.is_set() or not self._queue.empty():
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            taken = [first]
            while len(taken) < self._batch:
                try:
                    taken.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for consumer in self.consumers:
                try:
                    consumer.consume(taken)
                except Exception as exc:  # one broken consumer must not stop the others
                    _log.warning("sample consumer %s failed: %s", type(consumer).__name__, exc)
            self.handed += len(taken)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Hand over what is queued, stop the thread and close every consumer."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        for consumer in self.consumers:
            consumer.close()
