"""The durable spool: ordering, exact values, several writer processes, bad disks."""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import sqlite3
import subprocess
from pathlib import Path

import pytest

from engage.errors import TrackingError
from engage.tracking.spool import Spool


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    s = Spool(tmp_path / "spool.db")
    yield s
    s.close()


def _run(spool: Spool) -> str:
    return spool.create_run("sqlite:///x.db", "exp", "run-1", {"a": "b"})


def test_points_come_back_in_order_with_their_step_and_timestamp(spool: Spool) -> None:
    run = _run(spool)
    spool.append_points(run, [("metric", "loss", 0.5, 1, 1000), ("param", "lr", "0.1", None, 1001)])
    spool.append_points(run, [("metric", "loss", 0.25, 2, 1002)])

    entries = spool.pending(run, 10)

    assert [(e.kind, e.key, e.value, e.step, e.ts) for e in entries] == [
        ("metric", "loss", 0.5, 1, 1000),
        ("param", "lr", "0.1", None, 1001),
        ("metric", "loss", 0.25, 2, 1002),
    ]
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)


def test_non_finite_metrics_survive_exactly(spool: Spool) -> None:
    run = _run(spool)
    spool.append_points(
        run,
        [
            ("metric", "a", math.nan, 0, 1),
            ("metric", "b", math.inf, 0, 1),
            ("metric", "c", -math.inf, 0, 1),
        ],
    )

    a, b, c = (e.value for e in spool.pending(run, 10))

    assert math.isnan(a)
    assert b == math.inf
    assert c == -math.inf


def test_stats_count_unsent_entries_and_mark_sent_removes_them(spool: Spool) -> None:
    run = _run(spool)
    spool.append_points(run, [("metric", "m", float(i), i, 1) for i in range(5)])
    first_two = [e.seq for e in spool.pending(run, 2)]

    spool.mark_sent(first_two)

    assert spool.stats().depth == 3
    assert spool.stats().lag_seconds > 0
    assert [e.step for e in spool.pending(run, 10)] == [2, 3, 4]


def test_unfinished_runs_until_created_and_ended(spool: Spool) -> None:
    run = _run(spool)
    assert [r.local_id for r in spool.unfinished_runs()] == [run]

    spool.set_server_ids(run, "server-run", "7")
    assert spool.unfinished_runs() == []
    spool.end_run(run, "KILLED")
    (ended,) = spool.unfinished_runs()
    assert ended.status == "KILLED"
    assert ended.run_id == "server-run"

    spool.mark_ended(run)
    assert spool.unfinished_runs() == []


def test_end_run_keeps_the_first_status(spool: Spool) -> None:
    run = _run(spool)
    spool.end_run(run, "KILLED")
    spool.end_run(run, "FINISHED")
    assert spool.run(run).status == "KILLED"


def _writer(path: str, run: str, worker: int, n: int) -> None:
    s = Spool(Path(path))
    for i in range(0, n, 50):
        s.append_points(run, [("metric", f"w{worker}", float(j), j, 1) for j in range(i, i + 50)])
    s.close()


def test_several_writer_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "spool.db"
    main = Spool(path)
    run = _run(main)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), run, w, 500)) for w in range(4)]

    for p in procs:
        p.start()
    for p in procs:
        p.join(60)

    assert all(p.exitcode == 0 for p in procs)
    entries = main.pending(run, 10_000)
    assert len(entries) == 2000
    for w in range(4):
        assert [e.step for e in entries if e.key == f"w{w}"] == list(range(500))
    assert main.integrity_check() == "ok"
    main.close()


@pytest.fixture
def mounted(tmp_path: Path):
    """A tmpfs mounted at a fresh folder with the given options (root only, as in CI)."""
    mounts: list[Path] = []

    def mount(options: str) -> Path:
        target = tmp_path / f"mnt{len(mounts)}"
        target.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(target)
        return target

    yield mount
    for target in mounts:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_read_only_folder_fails_fast_with_a_clear_message(mounted) -> None:
    folder = mounted("ro,size=1m")

    with pytest.raises(TrackingError) as caught:
        Spool(folder / "spool.db")

    assert "cannot write the tracking spool" in caught.value.message
    assert str(folder) in caught.value.message
    assert "--home" in caught.value.hint


def test_full_disk_refuses_the_write_instead_of_dropping_it(mounted) -> None:
    spool = Spool(mounted("size=256k") / "spool.db")
    run = _run(spool)
    written = 0

    def fill() -> None:
        nonlocal written
        for i in range(10_000):
            batch = [("metric", "m" * 200, float(j), j, i) for j in range(100)]
            written += spool.append_points(run, batch)

    with pytest.raises(TrackingError, match="refused a write"):
        fill()

    assert written > 0
    assert len(spool.pending(run, 1_000_000)) == written  # every acknowledged point is there


def _fill_to_the_brim(spool: Spool, run: str) -> None:
    # Empty the WAL (a write could reuse its space), then take every block that is left.
    with sqlite3.connect(spool.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with contextlib.suppress(OSError), open(spool.path.parent / "filler", "wb") as filler:
        for _ in range(10_000):
            filler.write(b"x" * 4096)
            filler.flush()


@pytest.mark.parametrize(
    "write",
    [
        lambda s, run: s.create_run("sqlite:///x.db", "exp", "r" * 5000, {"k": "v" * 5000}),
        lambda s, run: s.append_op(run, "text", {"text": "x" * 50_000, "artifact_file": "a"}),
        lambda s, run: s.end_run(run, "FAILED"),
    ],
    ids=["create_run", "append_op", "end_run"],
)
def test_every_write_on_a_full_disk_is_a_tracking_error_naming_the_file(mounted, write) -> None:
    # Issue 11 item 3: sqlite3 errors from these writes used to escape as exit 70.
    spool = Spool(mounted("size=256k") / "spool.db")
    run = _run(spool)
    _fill_to_the_brim(spool, run)

    with pytest.raises(TrackingError) as caught:
        write(spool, run)

    assert str(spool.path) in caught.value.message
    assert "disk" in caught.value.hint


def test_artifacts_copied_into_a_full_spool_folder_are_a_tracking_error(
    mounted, tmp_path: Path
) -> None:
    from engage.tracking import PipelineRun

    spool = Spool(mounted("size=256k") / "spool.db")
    run = PipelineRun(spool, _run(spool), "sqlite:///x.db", "exp")
    big = tmp_path / "big"
    big.mkdir()
    (big / "weights.bin").write_bytes(b"\0" * 1_000_000)

    with pytest.raises(TrackingError) as caught:
        run.log_artifacts(big, "weights")

    assert str(spool.files) in caught.value.message
