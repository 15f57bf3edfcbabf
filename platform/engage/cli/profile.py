"""``engage profile``: where a job's input pipeline loses time, and which remedy pays off.

Measures each stage alone (model, loader from storage and from cache, preprocessing),
prints the verdict (storage-, preprocessing- or compute-bound) with each remedy's predicted
speedup, saves ``profile.json`` and ``profile.svg``, and logs the profile as an MLflow run
in the ``engage-profiles`` experiment (as ``engage plan`` logs its plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from engage.cli.console import guarded, out
from engage.cli.options import HomeOption, SetOption, TrackingOption

PROFILE_EXPERIMENT = "engage-profiles"
"""The MLflow experiment profiles are logged in (kept apart from the training runs)."""


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
        ("a batch handed over by a loader worker process", times.transfer),
    ]
    if times.preprocess:  # the co-run probe ran: the two stages side by side
        rows += [
            ("compute, a preprocessing worker beside it", times.compute * times.corun_compute),
            (
                "preprocessing in a worker, beside the step",
                times.preprocess * times.corun_preprocess,
            ),
        ]
    rows += [
        (f"compute after {gap * 1000:.1f} ms idle (waiting for reads)", times.compute + extra)
        for gap, extra in times.idle_penalty
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
    track: Annotated[bool, typer.Option(help="Log the profile as an MLflow run.")] = True,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Profile a job's input pipeline: verdict, stage times and predicted remedy speedups."""

    def _body() -> None:
        from engage import env_vars
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
        folder = output or Path(f"profile-{loaded.spec.name}")
        js, svg = report.save(folder)
        out.print(f"saved {js} and {svg}")
        if track:
            knobs = {"steps": steps, "bandwidth": bandwidth}
            run_id = log_profile(
                loaded, report, folder, knobs, tracking_uri, env_vars.engage_home(home)
            )
            out.print(f"logged as MLflow run {run_id} (experiment {PROFILE_EXPERIMENT})")

    guarded(_body)


def log_profile(
    loaded: Any,
    report: Any,
    folder: Path,
    knobs: Mapping[str, Any],
    tracking_uri: str | None,
    home: Path,
) -> str:
    """Log ``report`` as an MLflow run in :data:`PROFILE_EXPERIMENT`: the spec's name and
    the profile's knobs as parameters, the measured throughputs and predicted speedups as
    metrics, the verdict as a tag, and ``folder`` (profile.json, profile.svg) as artifacts.

    Parameters
    ----------
    knobs
        The command's options (``steps``, ``bandwidth`` as given), logged as parameters.

    Returns
    -------
    str
        The MLflow run id.

    Raises
    ------
    TrackingError
        The spool cannot be written.
    """
    from engage.cli.report_run import log_report_run
    from engage.events import Event

    events = [Event("metric", k, float(v), 0) for k, v in report.metrics().items()]
    return log_report_run(
        loaded,
        experiment=PROFILE_EXPERIMENT,
        kind="profile",
        params={**report.params(), **knobs},
        events=events,
        folder=folder,
        tracking_uri=tracking_uri,
        home=home,
        tags={"engage.profile.verdict": report.verdict},
    )
