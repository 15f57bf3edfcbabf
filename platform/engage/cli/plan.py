"""``engage plan``: predict how a pipeline's training scales, what it costs, and how it fits.

The command parses its options first (a bad one exits 2 before anything runs), loads the spec
and its data, calibrates with a live progress display, prints the plan, saves the plot and
the plan as JSON, and logs the plan as an MLflow run through the spool.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from engage.cli.console import guarded, out
from engage.cli.options import AddressOption, HomeOption, SetOption, TrackingOption


def plan(
    file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML).")],
    workers: Annotated[
        str, typer.Option(help="Worker counts: LOW..HIGH (powers of two between) or 1,2,8.")
    ] = "1..256",
    bandwidth: Annotated[
        str,
        typer.Option(help="Link bandwidth, e.g. 100Gbps or 12.5GB/s; 'measured': gloo on Ray."),
    ] = "measured",
    latency_us: Annotated[
        float, typer.Option(help="Per-hop latency in microseconds (with a given bandwidth).")
    ] = 5.0,
    device: Annotated[
        str, typer.Option(help="Device profile (cpu, t4, v100, a100, h100) or a speed factor.")
    ] = "cpu",
    price: Annotated[
        float | None, typer.Option(help="Dollars per device-hour; default: the profile's.")
    ] = None,
    deadline: Annotated[
        str | None, typer.Option(help="Time the training must fit in, e.g. 2h or 90m.")
    ] = None,
    scaling: Annotated[
        str, typer.Option(help="weak: per-worker batch fixed; strong: global batch fixed.")
    ] = "weak",
    overlap: Annotated[
        float | None,
        typer.Option(help="Share of backward that hides the all-reduce (0-1); default: measured."),
    ] = None,
    samples: Annotated[
        int | None, typer.Option(help="Training samples per epoch; default: the spec's data.")
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Folder for plan.svg and plan.json.")] = None,
    track: Annotated[bool, typer.Option(help="Log the plan as an MLflow run.")] = True,
    set_: SetOption = None,
    address: AddressOption = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Predict scaling efficiency, time and cost over worker counts; pick the cheapest."""

    def _body() -> None:
        from engage import env_vars
        from engage.spec import load_spec

        request = parse_request(
            workers, bandwidth, latency_us, device, price, deadline, scaling, overlap, samples
        )
        loaded = load_spec(file, set_ or [])
        report = run_plan(loaded, request, address)
        engage_home = env_vars.engage_home(home)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = output or engage_home / "plans" / f"{loaded.spec.name}-{stamp}"
        from engage.cli.plan_output import PLAN_EXPERIMENT, log_report, print_report, save_report

        print_report(out, loaded.spec.name, report)
        files = save_report(report, loaded.spec.name, folder)
        out.print(f"plot and plan: {files[0]}, {files[1]}")
        if track:
            run_id = log_report(loaded, report, folder, tracking_uri, engage_home)
            out.print(f"logged as MLflow run {run_id} (experiment {PLAN_EXPERIMENT})")

    guarded(_body)


def parse_request(
    workers: str,
    bandwidth: str,
    latency_us: float,
    device: str,
    price: float | None,
    deadline: str | None,
    scaling: str,
    overlap: float | None,
    samples: int | None,
) -> Any:
    """The plan's options as a ``PlanRequest``, every one checked.

    Raises
    ------
    PlanInputError
        For the first invalid option, naming it and what it accepts (exit code 2).
    """
    from engage.train.scaling import (
        PlanInputError,
        parse_bandwidth,
        parse_duration,
        parse_workers,
        resolve_device,
    )
    from engage.train.scaling.planner import PlanRequest

    counts = parse_workers(workers)
    rate = None if bandwidth.strip().lower() == "measured" else parse_bandwidth(bandwidth)
    profile, speed = resolve_device(device)
    checks = [
        (latency_us >= 0, f"--latency-us must be >= 0, got {latency_us}"),
        (price is None or price >= 0, f"--price must be >= 0, got {price}"),
        (scaling in ("weak", "strong"), f"--scaling must be weak or strong, got {scaling!r}"),
        (overlap is None or 0 <= overlap <= 1, f"--overlap must be in 0..1, got {overlap}"),
        (samples is None or samples >= 1, f"--samples must be at least 1, got {samples}"),
    ]
    for ok, message in checks:
        if not ok:
            raise PlanInputError(message, hint="see `engage plan --help`")
    return PlanRequest(
        workers=counts,
        device=profile,
        speed=speed,
        bandwidth=rate,
        latency=latency_us * 1e-6,
        price=price,
        deadline_s=parse_duration(deadline) if deadline is not None else None,
        mode=scaling,  # type: ignore[arg-type]
        overlap=overlap,
        samples=samples,
    )


def run_plan(loaded: Any, request: Any, address: str | None) -> Any:
    """Load the spec's data, then calibrate and plan under a live progress display; the Ray
    session is opened only when the network is to be measured.

    Raises
    ------
    EngageError
        From the data stage (DataError, SpecError) or the Ray session (ClusterError).
    """
    from contextlib import ExitStack

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from engage.runtime import prepare_data
    from engage.runtime.session import resolve_address
    from engage.train.builders import ModelShape
    from engage.train.loop import TrainJob
    from engage.train.scaling.planner import build_report

    spec = loaded.spec
    columns = (SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=out, transient=True) as progress, ExitStack() as stack:
        task = progress.add_task("loading and checking data", total=None)

        def tick(text: str) -> None:
            """Show the step now running (a line per step when output is not a terminal)."""
            progress.update(task, description=text)
            if not out.is_terminal:
                out.print(f"… {text}")

        data = prepare_data(loaded)
        _, window, features = data.train.x.shape
        shape = ModelShape(window, features, len(data.classes) if data.classes else 1)
        job = TrainJob(spec.train, spec.model, spec.data.task, shape, None, None, "")
        probe = None
        if request.bandwidth is None:
            from engage.runtime.session import ray_session
            from engage.train.scaling.netprobe import probe as ray_probe

            tick("starting Ray")
            stack.enter_context(ray_session(resolve_address(address)))
            probe = ray_probe
        return build_report(job, len(data.train.y), request, probe, tick)
