"""``engage validate`` and ``engage run``: check a spec, or run its pipeline with a live display.

``run_file`` is public because ``engage quickstart`` runs its packaged spec the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from engage.cli.console import guarded, out
from engage.cli.options import AddressOption, HomeOption, SetOption, TrackingOption


def validate(
    file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML).")],
    set_: SetOption = None,
    data: Annotated[bool, typer.Option(help="Also load and check the data.")] = True,
) -> None:
    """Check a spec (and its data) without running anything."""

    def _body() -> None:
        from engage.spec import load_spec

        loaded = load_spec(file, set_ or [])
        if not data:
            out.print(f"[green]✓[/] {file}: valid spec for pipeline '{loaded.spec.name}'")
            return
        from engage.data.simulator import slice_note, validation_slice

        sliced = validation_slice(loaded.spec.data)  # a simulation: checked, not generated
        if sliced is not None:
            from engage.data import prepare

            rows = prepare(sliced, loaded.base_dir).fingerprint.rows
            out.print(
                f"[green]✓[/] {file}: valid spec for pipeline '{loaded.spec.name}'; data OK on "
                f"{slice_note(sliced, loaded.spec.data, rows)}"
            )
            return
        from engage.runtime import prepare_data
        from engage.runtime.kinds import job_class, kind_of

        # As `engage run` will: only a kind that trains from a stream gets one.
        streamed = job_class(kind_of(loaded.spec)).trains_from_stream
        prepared = prepare_data(loaded, streamed=streamed)
        val, test = len(prepared.val.y), len(prepared.test.y)
        scored = "windows"
        if prepared.stream is not None:
            scored = "windows scored (evenly spaced samples); train streams from its shards"
        out.print(
            f"[green]✓[/] {file}: valid spec for pipeline '{loaded.spec.name}'; data OK: "
            f"{prepared.fingerprint.rows:,} rows -> train {prepared.train_windows:,} / "
            f"val {val:,} / test {test:,} {scored}"
        )

    guarded(_body)


def run(
    file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML).")],
    set_: SetOption = None,
    address: AddressOption = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Stream Ray worker logs.")
    ] = False,
) -> None:
    """Run a pipeline: data, train, evaluate, register."""

    def _body() -> None:
        run_file(file, set_ or [], address, tracking_uri, home, verbose)

    guarded(_body)


def run_file(
    file: Path,
    sets: list[str],
    address: str | None,
    tracking_uri: str | None,
    home: Path | None,
    verbose: bool,
) -> Any:
    """Load ``file`` with its ``--set`` overrides, run its pipeline live, print the summary.

    Returns
    -------
    PipelineResult
        What the pipeline produced (run, registration, deployment).

    Raises
    ------
    DeployError
        The run finished and its model is registered (its summary is printed), but the
        deploy stage failed; ``run_result`` holds the result.
    EngageError
        Any engage error from loading the spec or running the pipeline.
    """
    from engage import env_vars
    from engage.cli.summary import SummaryDisplay, print_deployment, print_run_summary
    from engage.errors import DeployError
    from engage.runtime.pipeline import RunOptions, run_pipeline
    from engage.spec import load_spec

    loaded = load_spec(file, sets)
    options = RunOptions(address, tracking_uri, env_vars.engage_home(home), verbose=verbose)
    out.print(f"[bold]engage[/] running pipeline [cyan]{loaded.spec.name}[/] from {file}")
    # The display prints the summary once the model is registered, before a deploy starts.
    with SummaryDisplay(out, loaded) as display:
        try:
            result = run_pipeline(loaded, options, display)
        except DeployError as exc:
            if display.shown is None and exc.run_result is not None:
                print_run_summary(out, loaded, exc.run_result)
            raise
    if display.shown is None:
        print_run_summary(out, loaded, result)
    if result.deployment is not None:
        print_deployment(out, result.deployment, result.stage_seconds.get("deploy"))
    return result
