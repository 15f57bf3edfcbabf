"""``engage monitor``: the live view, the standalone service, and the event store's lists."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from engage.cli.console import guarded, out
from engage.cli.options import AllowRemoteOption, EventsUriOption, HomeOption, require_loopback

monitor_app = typer.Typer(
    name="monitor",
    help="Watch running jobs live; run the monitor service; list stored events and alerts.",
    invoke_without_command=True,
)


@monitor_app.callback(invoke_without_command=True)
def live(
    ctx: typer.Context,
    home: HomeOption = None,
    events_uri: EventsUriOption = None,
    once: Annotated[bool, typer.Option("--once", help="Print the view once and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.", min=0.2)] = 2.0,
) -> None:
    """Running jobs, their key metrics and open alerts, live in the terminal (Ctrl-C quits)."""
    if ctx.invoked_subcommand is not None:
        return

    def _body() -> None:
        from engage.monitor.live import collect

        resolved, store = _store(home, events_uri)
        try:
            if once:
                out.print(_render(collect(resolved, store)))
                return
            # Ctrl-C ends watching (contextlib.suppress): there is nothing to clean up.
            with (
                contextlib.suppress(KeyboardInterrupt),
                Live(_render(collect(resolved, store)), console=out, screen=False) as view,
            ):
                while True:
                    time.sleep(interval)
                    view.update(_render(collect(resolved, store)))
        finally:
            store.close()

    guarded(_body)


@monitor_app.command()
def serve(
    home: HomeOption = None,
    events_uri: EventsUriOption = None,
    host: Annotated[str, typer.Option(help="Address to serve /metrics on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port for /metrics (0 picks a free one).")] = 9470,
    interval: Annotated[float, typer.Option(help="Seconds between scrapes.", min=0.2)] = 5.0,
    allow_remote: AllowRemoteOption = False,
) -> None:
    """The standalone monitor service: scrape every job, record liveness, serve /metrics."""

    def _body() -> None:
        from engage.monitor.service import MonitorService, default_hooks

        require_loopback(host, allow_remote, "monitor")
        resolved, store = _store(home, events_uri)
        service = MonitorService(resolved, store, interval_s=interval, hooks=default_hooks())
        stop = threading.Event()
        endpoint = service.serve(host, port)
        out.print(
            f"engage monitor service on {endpoint.url}, watching {resolved} "
            f"every {interval:g} s; events in {store.display_url}"
        )
        try:
            service.run(stop)
        except KeyboardInterrupt:
            stop.set()
            out.print("monitor service stopped")
        finally:
            service.close()
            store.close()

    guarded(_body)


@monitor_app.command()
def events(
    run: Annotated[str | None, typer.Option("--run", help="Only this run id.")] = None,
    limit: Annotated[int, typer.Option(help="How many of the newest events.", min=1)] = 50,
    home: HomeOption = None,
    events_uri: EventsUriOption = None,
) -> None:
    """Lifecycle events and alerts of recent jobs, oldest first."""

    def _body() -> None:
        _, store = _store(home, events_uri)
        rows = store.events(run_id=run, limit=limit) if store.exists() else []
        if not rows:
            out.print("no events recorded yet" + (f" for run {run}" if run else ""))
            return
        table = Table("time", "job", "run id", "event", "severity", "message", header_style="bold")
        for e in rows:
            table.add_row(_time(e.ts), e.job, e.run_id, e.name, _severity(e.severity), e.message)
        out.print(table)

    guarded(_body)


@monitor_app.command()
def alerts(
    all_: Annotated[bool, typer.Option("--all", help="Resolved alerts too.")] = False,
    run: Annotated[str | None, typer.Option("--run", help="Only this run id.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (with --all).", min=1)] = 50,
    home: HomeOption = None,
    events_uri: EventsUriOption = None,
) -> None:
    """Open alerts (with --all, resolved ones too), newest first."""

    def _body() -> None:
        _, store = _store(home, events_uri)
        if not store.exists():
            rows = []
        else:
            rows = store.alerts(run, limit) if all_ else store.open_alerts(run)
        if not rows:
            out.print("no alerts" if all_ else "no open alerts")
            return
        out.print(_alerts_table(rows, with_state=all_))

    guarded(_body)


@monitor_app.command("rules")
def rules(
    output: Annotated[
        Path | None, typer.Option(help="Write rules.yml here (default: stdout).")
    ] = None,
    tests: Annotated[
        Path | None, typer.Option(help="Also write the promtool unit tests here.")
    ] = None,
) -> None:
    """Export the alert rules for Prometheus (one source of truth: engage's catalogue)."""
    from engage.cli.monitor_rules import rules_command

    guarded(lambda: rules_command(output, tests))


# -- rendering ------------------------------------------------------------------------------------
_COLUMNS = (
    "job", "run id", "state", "stage", "epoch", "train loss", "val metric",
    "samples/s", "stall", "comm", "last step", "workers", "spool",
)  # fmt: skip


def _render(view: Any) -> Group:
    table = Table(title=f"engage jobs · {_time(view.taken_at)}", header_style="bold")
    for name in _COLUMNS:
        table.add_column(
            name, justify="right" if name not in ("job", "run id", "state") else "left"
        )
    for j in view.jobs:
        val = (
            f"{j.val_metric[0].removeprefix('val_')} {j.val_metric[1]:.4g}" if j.val_metric else "-"
        )
        table.add_row(
            j.job,
            j.run_id,
            _state(j.state),
            j.stage or "-",
            _num(j.epoch, "{:.0f}"),
            _num(j.train_loss, "{:.4g}"),
            val,
            _num(j.samples_per_second, "{:,.0f}"),
            _num(j.stall_ratio, "{:.0%}"),
            _num(j.comm_blocked_ratio, "{:.0%}"),
            _num(j.since_last_step_s, "{:.0f} s ago"),
            _num(j.workers, "{:.0f}"),
            _num(j.spool_depth, "{:.0f}"),
        )
    if not view.jobs:
        table.caption = "no running jobs (start one with `engage run SPEC`)"
    parts: list[Any] = [table]
    if view.alerts:
        parts.append(Panel(_alerts_table(view.alerts, False), title="open alerts", expand=False))
    else:
        parts.append(Panel("[green]no open alerts[/]", title="open alerts", expand=False))
    parts += [f"[yellow]{note}[/]" for note in view.notes]
    return Group(*parts)


def _alerts_table(rows: list[Any], with_state: bool) -> Table:
    table = Table("since", "job", "run id", "rule", "severity", header_style="bold")
    if with_state:
        table.add_column("state")
    table.add_column("value", justify="right")
    table.add_column("summary")
    for a in rows:
        labels = ", ".join(f"{k}={v}" for k, v in a.labels.items())
        state = [a.state if a.state == "firing" else f"resolved {_time(a.resolved_at)}"]
        table.add_row(
            _time(a.started_at),
            a.job,
            a.run_id,
            a.rule + (f" {{{labels}}}" if labels else ""),
            _severity(a.severity),
            *(state if with_state else []),
            _num(a.value, "{:.4g}"),
            a.summary,
        )
    return table


def _state(state: str) -> str:
    colour = {"running": "green", "unreachable": "yellow", "lost": "red"}.get(state, "white")
    return f"[{colour}]{state}[/]"


def _severity(severity: str) -> str:
    colour = {"critical": "bold red", "warning": "yellow"}.get(severity, "white")
    return f"[{colour}]{severity}[/]"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _time(ts: float | None) -> str:
    return "-" if not ts else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


# -- plumbing -------------------------------------------------------------------------------------
def _store(home: Path | None, events_uri: str | None) -> tuple[Path, Any]:
    from engage import env_vars
    from engage.monitor.store import EventStore

    resolved = env_vars.engage_home(home)
    return resolved, EventStore.open(resolved, events_uri)
