"""Least exposure (issue 11 item 6): the spool and its folder are the user's alone."""

from __future__ import annotations

import stat
from pathlib import Path

from engage.tracking import Drainer, PipelineRun, Spool


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_is_0700_and_the_spool_files_0600(tmp_path: Path) -> None:
    home = tmp_path / "fresh" / ".engage"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("a")

    spool = Spool(home / "spool.db")
    run = PipelineRun(
        spool, spool.create_run("sqlite:///x.db", "e", "r", {}), "sqlite:///x.db", "e"
    )
    run.log_artifacts(notes, "notes")
    Drainer(spool.path).stop()

    assert _mode(home) == 0o700
    for name in ("spool.db", "spool.db-wal", "spool.db-shm", "spool.lock"):
        assert _mode(home / name) == 0o600, name
    assert _mode(home / "spool-files") == 0o700
    assert _mode(home / "spool-files" / run.local_id) == 0o700
    spool.close()


def test_an_existing_spool_file_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "spool.db").touch(mode=0o644)
    (tmp_path / "spool.db").chmod(0o644)

    Spool(tmp_path / "spool.db").close()

    assert _mode(tmp_path / "spool.db") == 0o600


def test_a_new_mlflow_sqlite_store_is_0600(tmp_path: Path) -> None:
    from engage.tracking import ensure_experiment, open_client

    home = tmp_path / "new-home"

    ensure_experiment(open_client(f"sqlite:///{home / 'mlflow.db'}"), "modes")

    assert _mode(home) == 0o700
    assert _mode(home / "mlflow.db") == 0o600
    assert _mode(home / "artifacts") == 0o700
