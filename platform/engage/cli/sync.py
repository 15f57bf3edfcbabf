"""`engage sync`: send what the spool still holds to MLflow (after a crash or an outage)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from engage.cli.console import guarded, out
from engage.cli.options import HomeOption
from engage.errors import TrackingError


def sync(
    home: HomeOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to keep trying.")] = 60.0,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="First mend a damaged spool or a half-created local MLflow store "
            "(backups are kept beside them), then send.",
        ),
    ] = False,
) -> None:
    """Send every spooled run, metric and artifact still waiting to MLflow."""
    from engage import env_vars

    guarded(lambda: drain_spool(env_vars.engage_home(home), timeout, out, repair=repair))


def drain_spool(home: Path, timeout_s: float, console: Console, *, repair: bool = False) -> None:
    """Drain the spool under ``home`` and print what each run still has to send.

    With ``repair``, first mend what :func:`engage.tracking.repair` can (a damaged spool,
    a half-created local MLflow store) and say what it did.

    Raises
    ------
    TrackingError
        When entries are left after ``timeout_s`` seconds (the server is down, or another
        engage process holds the spool); nothing is dropped.
    """
    from engage.tracking import Drainer, Spool
    from engage.tracking import repair as mend

    path = home / "spool.db"
    if not path.exists():
        console.print(f"nothing to sync: no spool at {path}")
        return
    if repair:
        for line in mend(path).lines() or ["nothing to repair"]:
            console.print(line)
    spool = Spool(path)
    before = {r.local_id: r for r in spool.runs()}
    spool.close()
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
