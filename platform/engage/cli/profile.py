"""``engage profile``: where a job's input pipeline loses time, and which remedy pays off.

Measures each stage alone (model, loader from storage and from cache, preprocessing),
prints the verdict (storage-, preprocessing- or compute-bound) with each remedy's predicted
speedup, and saves ``profile.json`` and ``profile.svg``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from engage.cli.console import guarded, out
from engage.cli.options import SetOption


def _stages_table(times) -> Table:
    """Per-step time of each stage, as a rich table."""
    table = Table(title=f"each stage alone, per step of {times.batch} windows", box=box.SIMPLE)
    table.add_column("stage")
    table.add_column("ms / step", justify="right")
    rows = [
        ("storage, cold" + (" (throttled)" if times.bandwidth else ""), times.storage),
        ("cache (decoded windows in memory)", times.cache),
        ("preprocessing, 1 CPU core", times.preprocess),
        ("preprocessing, GPU", times.preprocess_gpu),
        ("compute (model alone)", times.compute),
        (f"compute at batch {2 * times.batch}", times.compute_large),
    ]
    for name, value in rows:
        table.add_row(name, "n/a" if value is None else f"{value * 1000:.2f}")
    return table


def _remedies_table(report) -> Table:
    """Each remedy and its predicted speedup, best first."""
    table = Table(title="remedies, predicted", box=box.SIMPLE)
    for col, justify in (("remedy", "left"), ("speedup", "right"), ("why", "left")):
        table.add_column(col, justify=justify)
    for r in report.remedies:
        table.add_row(r.name, "n/a" if r.speedup is None else f"{r.speedup:.2f}x", r.note)
    return table


def profile(
    file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML).")],
    set_: SetOption = None,
    bandwidth: Annotated[
        str | None,
        typer.Option(help="Throttle storage reads to this rate, e.g. 50MB/s or 1GiB/s."),
    ] = None,
    steps: Annotated[int, typer.Option(min=1, max=10_000, help="Timed steps per stage.")] = 10,
    batch: Annotated[
        int | None, typer.Option(min=1, help="Windows per step; default the per-worker batch.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Folder for profile.json/.svg; default ./profile-NAME."
        ),
    ] = None,
) -> None:
    """Profile a job's input pipeline: verdict, stage times and predicted remedy speedups."""

    def _body() -> None:
        from engage.profiler import parse_bandwidth, profile_job
        from engage.runtime import prepare_data
        from engage.spec import load_spec

        rate = parse_bandwidth(bandwidth) if bandwidth else None
        loaded = load_spec(file, set_ or [])
        data = prepare_data(loaded)
        report = profile_job(loaded.spec, data, bandwidth=rate, steps=steps, batch=batch)
        out.print(_stages_table(report.times))
        out.print(_remedies_table(report))
        t = report.times
        out.print(
            f"[bold]{report.verdict}[/]: predicted step {t.step * 1000:.1f} ms, stalled on data "
            f"{t.stall_ratio:.0%} of it. {report.advice}"
        )
        js, svg = report.save(output or Path(f"profile-{loaded.spec.name}"))
        out.print(f"saved {js} and {svg}")

    guarded(_body)
