"""Batch rows: one outbox row per report batch, per-point seqs, and the old layout upgraded.

The spool used to write one SQLite row per point (6 µs a point on the writer); a batch row
holds a whole batch. A spool written by that older layout must still open, drain and
repair, so the old tables are built here with raw SQL, as that code left them.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from mlflow import MlflowClient

from engage.tracking import Drainer, Spool, SpoolDamaged, repair
from engage.tracking import batch_rows as rows
from engage.tracking.batch_rows import BadBatchRow

# The outbox as engage wrote it before batch rows (one row per point or operation).
OLD_SCHEMA = """
CREATE TABLE runs (
    local_id TEXT PRIMARY KEY, tracking_uri TEXT NOT NULL, experiment TEXT NOT NULL,
    run_name TEXT NOT NULL, tags TEXT NOT NULL, start_ms INTEGER NOT NULL,
    parent_local_id TEXT, server_id TEXT, experiment_id TEXT, status TEXT, end_ms INTEGER,
    ended_on_server INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL REFERENCES runs(local_id),
    kind TEXT NOT NULL, key TEXT, num REAL, text TEXT, step INTEGER, ts INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0, result TEXT
);
CREATE INDEX outbox_pending ON outbox(sent, run, seq);
"""


def old_spool(path: Path, uri: str, points: int = 20) -> str:
    """A spool of the one-row-per-point layout: a run, metrics (one NaN), a param, a tag,
    a text operation, the first metric already sent."""
    db = sqlite3.connect(path)
    db.executescript("PRAGMA journal_mode=WAL;" + OLD_SCHEMA)
    with db:
        db.execute(
            "INSERT INTO runs (local_id, tracking_uri, experiment, run_name, tags, start_ms)"
            " VALUES ('old', ?, 'upgrade', 'r', '{}', 1)",
            (uri,),
        )
        db.executemany(
            "INSERT INTO outbox (run, kind, key, num, step, ts, sent) VALUES ('old', 'metric',"
            " 'm', ?, ?, ?, ?)",
            [(float(i), i, 1_000 + i, int(i == 0)) for i in range(points)],
        )
        db.execute(
            "INSERT INTO outbox (run, kind, key, num, text, step, ts) VALUES"
            " ('old', 'metric', 'nan', NULL, 'nan', 0, 5)"
        )
        db.execute(
            "INSERT INTO outbox (run, kind, key, text, ts) VALUES ('old', 'param', 'lr', '0.1', 6)"
        )
        db.execute(
            "INSERT INTO outbox (run, kind, key, text, ts) VALUES ('old', 'tag', 't', 'x', 7)"
        )
        db.execute(
            "INSERT INTO outbox (run, kind, text, ts) VALUES ('old', 'text',"
            ' \'{"text": "hello", "artifact_file": "notes/a.txt"}\', 8)'
        )
    db.close()
    return "old"


def test_a_row_round_trips_every_kind_exactly() -> None:
    points = [
        ("metric", "loss", 0.5, 3, 1_000),
        ("metric", "nan", math.nan, 0, 999),
        ("metric", "inf", -math.inf, None, 1_001),
        ("param", "lr", "0.1", None, 1_002),
        ("tag", "nöte", "x\ny", None, 1_003),
        ("metric", "loss", 0.25, 4, 1_004),
    ]

    blob, oldest = rows.encode(points)
    back = rows.decode(blob, len(points))

    assert oldest == 999
    assert math.isnan(back[1][2])
    assert back[:1] + back[2:] == points[:1] + points[2:]
    assert rows.intact(blob)


@pytest.mark.parametrize("where", [0, 5, -3], ids=["magic", "crc", "body"])
def test_a_damaged_blob_fails_its_check_and_does_not_decode(where: int) -> None:
    blob, _ = rows.encode([("metric", f"m{i}", float(i), i, i) for i in range(10)])
    damaged = bytearray(blob)
    damaged[where] ^= 0xFF

    assert not rows.intact(bytes(damaged))
    with pytest.raises(BadBatchRow):
        rows.decode(bytes(damaged), 10)
    with pytest.raises(BadBatchRow):
        rows.decode(blob, 9)  # a row of 10 points read as 9


def test_a_report_batch_is_one_row_and_reserves_a_seq_per_point(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    run = spool.create_run("sqlite:///x.db", "e", "r", {})
    spool.append_points(run, [("metric", f"m{i % 10}", float(i), i // 10, i) for i in range(256)])
    spool.append_points(run, [("metric", "next", 1.0, 0, 500)])

    entries = spool.pending(run, 1_000)

    assert spool._read("SELECT COUNT(*) FROM outbox")[0][0] == 2
    assert [e.seq for e in entries] == list(range(entries[0].seq, entries[0].seq + 257))
    assert spool.stats().depth == spool.pending_count(run) == 257
    spool.close()


def test_marking_part_of_a_row_splits_it_and_keeps_every_seq(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    run = spool.create_run("sqlite:///x.db", "e", "r", {})
    spool.append_points(run, [("metric", "m", float(i), i, 100 + i) for i in range(10)])
    seqs = [e.seq for e in spool.pending(run, 10)]

    spool.mark_sent(seqs[3:5])
    spool.mark_sent([seqs[9]], '{"error": "rejected"}')

    left = spool.pending(run, 10)
    assert [e.seq for e in left] == seqs[:3] + seqs[5:9]
    assert [e.step for e in left] == [0, 1, 2, 5, 6, 7, 8]
    assert spool.result(seqs[9]) == '{"error": "rejected"}'
    assert spool.stats().depth == 7
    spool.mark_sent(seqs)
    assert spool.pending(run, 10) == []
    assert spool.stats().depth == 0
    spool.close()


def test_a_spool_of_the_old_layout_opens_drains_and_takes_new_rows(
    tmp_path: Path, store_home: Path
) -> None:
    uri = f"sqlite:///{store_home / 'mlflow.db'}"
    path = tmp_path / "spool.db"
    run = old_spool(path, uri)

    spool = Spool(path)
    old = spool.pending(run, 100)
    spool.append_points(run, [("metric", "m", float(i), i, 1_000 + i) for i in range(20, 30)])
    new = spool.pending(run, 100)[len(old) :]
    drainer = Drainer(path)
    drained = drainer.flush(timeout_s=60)

    assert [(e.kind, e.key) for e in old[-4:]] == [
        ("metric", "nan"),
        ("param", "lr"),
        ("tag", "t"),
        ("text", None),
    ]
    assert len(old) == 19 + 4
    assert math.isnan(old[-4].value)
    assert new[0].seq == old[-1].seq + 1  # seqs go on after the old rows
    assert drained, drainer.status
    server_id = spool.run(run).server_id
    client = MlflowClient(uri)
    history = client.get_metric_history(server_id, "m")
    assert sorted((m.step, m.value, m.timestamp) for m in history) == [
        (i, float(i), 1_000 + i)
        for i in range(1, 30)  # step 0 was sent before the upgrade
    ]
    assert client.get_run(server_id).data.params == {"lr": "0.1"}
    assert spool.stats().depth == 0
    drainer.stop()
    spool.close()


def test_repair_of_an_old_layout_spool_with_a_corrupted_page_salvages_it(
    tmp_path: Path, store_home: Path
) -> None:
    from tests.unit.tracking.test_faults import corrupt_a_page

    path = tmp_path / "spool.db"
    run = old_spool(path, f"sqlite:///{store_home / 'mlflow.db'}", points=3_000)
    corrupt_a_page(path)

    report = repair(path)

    spool = Spool(path)
    kept = spool.pending(run, 10_000)
    assert report.spool_backup is not None
    assert 0 < report.lost < 3_000
    assert report.salvaged == 3_004 - report.lost
    assert len(kept) == report.salvaged - 1  # the metric sent before is salvaged, as sent
    spool.close()


def test_a_damaged_batch_blob_stops_the_drainer_and_repair_drops_only_that_row(
    tmp_path: Path, store_home: Path
) -> None:
    uri = f"sqlite:///{store_home / 'mlflow.db'}"
    path = tmp_path / "spool.db"
    spool = Spool(path)
    run = spool.create_run(uri, "damaged-row", "r", {})
    for start in range(0, 1_000, 250):
        spool.append_points(
            run, [("metric", "m", float(i), i, 1_000 + i) for i in range(start, start + 250)]
        )
    (seq, blob), *_ = spool._read("SELECT seq, data FROM outbox ORDER BY seq LIMIT 1 OFFSET 1")
    spool._db.execute("UPDATE outbox SET data = ? WHERE seq = ?", (blob[:-8] + b"\0" * 8, seq))
    spool.close()

    failed = Drainer(path, warn=lambda m: None)
    status = failed.drain_once()
    failed.stop()
    report = repair(path)
    drainer = Drainer(path)
    drained = drainer.flush(timeout_s=60)

    assert isinstance(status.fault, SpoolDamaged), status
    assert str(path) in status.fault.message
    assert f"row {seq}" in status.fault.message
    assert "engage sync --repair" in status.fault.hint
    assert (report.lost, report.salvaged) == (250, 750)
    assert drained, drainer.status
    history = MlflowClient(uri).get_metric_history(drainer.spool.run(run).server_id, "m")
    assert sorted(m.step for m in history) == [*range(250), *range(500, 1_000)]
    drainer.stop()
