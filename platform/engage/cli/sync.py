"""`engage sync`: send what the spool still holds to MLflow (after a crash or an outage)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from engage.errors import TrackingError


def sync(home: Path, timeout_s: float, console: Console) -> None:
    """Drain the spool under ``home``; raise TrackingError when something is left."""
    from engage.tracking import Drainer, Spool

    path = home / "spool.db"
    if not path.exists():
        console.print(f"nothing to sync: no spool at {path}")
        return
    before = {r.local_id: r for r in Spool(path).runs()}
    drainer = Drainer(path, warn=lambda m: console.print(f"[yellow]{m}[/]"))
    try:
        drained = drainer.flush(timeout_s=timeout_s)
        _print(console, drainer.spool, before)
        if not drained:
            stats = drainer.spool.stats()
            raise TrackingError(
                f"{stats.depth} spool entries could not be sent within {timeout_s:g} s "
                f"({drainer.status.error or 'another engage process holds the spool'})",
                hint="check that the tracking server is up, then run `engage sync` again; "
                "nothing has been dropped",
            )
    finally:
        drainer.stop()


def _print(console: Console, spool, before: dict) -> None:
    table = Table(title=f"spool {spool.path}", header_style="bold")
    for column in ("local run id", "MLflow run id", "status", "left to send"):
        table.add_column(column)
    for run in spool.runs():
        if run.local_id in before and before[run.local_id].ended_on_server and run.ended_on_server:
            continue  # long done; keep the table to what this sync touched
        table.add_row(
            run.local_id,
            run.server_id or "(not created yet)",
            run.status or "RUNNING",
            str(spool.pending_count(run.local_id)),
        )
    console.print(table)
    stats = spool.stats()
    console.print(f"spool depth {stats.depth}, lag {stats.lag_seconds:.1f} s")
