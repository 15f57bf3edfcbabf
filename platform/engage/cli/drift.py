"""``engage drift check`` and ``engage drift performance``, against a model version's run.

``check``: a table of current data against the version's reference. ``performance``:
served predictions joined to delayed labels, the rolling metric against the training
baseline (logic in :mod:`engage.drift.decay`). Exit 0: no drift or decay; 8: drift,
a data-quality failure or decay; 9: a detector failed or gave no verdict (too few labels).
For cron and CI: the exit code is the result, the table is for people.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from engage.cli.clients import tracking_client
from engage.cli.console import guarded, out
from engage.cli.options import HomeOption, TrackingOption

drift_app = typer.Typer(
    help="Check current data for drift against a registered model's training reference.",
    no_args_is_help=True,
)


@drift_app.command()
def check(
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            help="Current rows (.parquet or .csv): one row per time step, with the "
            "model's feature columns; other columns are ignored.",
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="NAME[@ALIAS|/VERSION]",
            help="Registered model whose run logged the reference (default alias: candidate).",
        ),
    ] = None,
    reference: Annotated[
        Path | None,
        typer.Option(help="A reference folder (reference.npz + .json) instead of --model."),
    ] = None,
    detectors: Annotated[
        str, typer.Option(help="Comma-separated detectors, e.g. quality,ks_ess or quality,bocpd.")
    ] = "quality,ks_ess",
    p_val: Annotated[float, typer.Option(help="Level of the ks/cvm/mmd tests.")] = 0.05,
    correction: Annotated[str, typer.Option(help="ks/cvm: bonferroni or fdr.")] = "bonferroni",
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Print a per-feature drift report; exit 8 on drift, 9 when a detector fails."""

    def _body() -> None:
        from engage.data.sources import read_table
        from engage.drift.batch import check_batch
        from engage.errors import DriftCheckError, DriftDetected

        names = [n.strip() for n in detectors.split(",") if n.strip()]
        ref, source = _reference(model, reference, tracking_uri, home)
        frame = read_table(data)
        options = {n: {"p_val": p_val, "correction": correction} for n in ("ks", "cvm", "ks_ess")}
        options["mmd"] = {"p_val": p_val}
        try:
            report = check_batch(ref, frame, names, options)
        except (KeyError, ImportError, ValueError) as exc:
            raise DriftCheckError(
                f"cannot set up the detectors {', '.join(names)}: {exc}",
                hint="built in (no alibi-detect needed): quality, cusum",
            ) from None
        out.print(f"[bold]{data}[/]: {report.rows:,} rows against {source}")
        out.print(_table(report))
        for line in report.skipped:
            out.print(f"[yellow]skipped[/] {line}")
        decision = report.decision
        if decision.is_error:
            raise DriftCheckError(decision.reason, hint="an error is never read as 'no drift'")
        if decision.alert:
            raise DriftDetected(f"{decision.severity}: {decision.reason}")
        out.print(f"[green]✓[/] {decision.reason}")

    guarded(_body)


@drift_app.command()
def performance(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            metavar="NAME[@ALIAS|/VERSION]",
            help="Registered model: its training run gives the baseline, its serving app "
            "the predictions.",
        ),
    ],
    labels: Annotated[
        Path,
        typer.Option("--labels", help="Delayed labels (.parquet or .csv): request_id, label."),
    ],
    predictions: Annotated[
        Path | None,
        typer.Option(
            "--predictions",
            help="Predictions (.parquet or .csv: request_id, prediction, optional outputs "
            "and ts) instead of the serving app's samples.sqlite.",
        ),
    ] = None,
    app: Annotated[
        str | None, typer.Option(help="Serving app whose samples to read (default: from NAME).")
    ] = None,
    metric: Annotated[str, typer.Option(help="accuracy (classes) or mae (values).")] = "accuracy",
    tolerance: Annotated[
        float, typer.Option(help="Decay: the CI lies entirely this far past the baseline.")
    ] = 0.02,
    window: Annotated[int, typer.Option(help="The newest labelled predictions compared.")] = 500,
    baseline: Annotated[
        float | None, typer.Option(help="The baseline value, instead of the run's metric.")
    ] = None,
    baseline_metric: Annotated[
        str | None,
        typer.Option(help="Run metric for the baseline (default: test_, then val_<metric>)."),
    ] = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Rolling metric on labelled predictions vs the training baseline; exit 8 on decay."""

    def _body() -> None:
        from engage import env_vars
        from engage.drift import decay
        from engage.errors import DataError, DriftCheckError, DriftDetected

        if metric not in decay.BASELINE_KEYS:
            raise DataError(f"--metric {metric!r}: expected accuracy or mae")
        client, version, where = _registered_version(model, tracking_uri, home)
        found = (
            ("--baseline", baseline)
            if baseline is not None
            else decay.baseline_of(
                client.get_run(version.run_id).data.metrics, metric, baseline_metric
            )
        )
        folder = env_vars.engage_home(home)
        served = (
            decay.read_predictions(predictions)
            if predictions is not None
            else decay.read_served(
                decay.samples_path(folder, version.name, app), version.name, str(version.version)
            )
        )
        pairs = decay.read_labels(labels)
        ref_outputs = _reference_outputs(client, version, where)
        report = decay.assess(
            served, pairs, found, metric=metric, tolerance=tolerance, window=window,
            reference_outputs=ref_outputs,
        )  # fmt: skip
        out.print(f"[bold]{where}[/]: predictions from {served.source}, labels from {labels}")
        for line in _decay_lines(report, served):
            out.print(line)
        if report.result.error:
            raise DriftCheckError(report.result.error, hint="an error is never read as 'no decay'")
        if report.decayed:
            raise DriftDetected(f"performance decay: {_verdict(report)}")
        out.print(f"[green]✓[/] no decay: {_verdict(report)}")

    guarded(_body)


def _reference_outputs(client: Any, version: Any, where: str) -> Any:
    """The reference's outputs for the label-free proxy; None when the run logged none."""
    from engage.errors import TrackingError

    try:
        return _download_reference(client, version, where).outputs
    except TrackingError:
        return None


def _decay_lines(report: Any, served: Any) -> list[str]:
    r = report.result
    lines = [
        f"joined {report.joined:,} labelled predictions; {report.unmatched_labels:,} label(s) "
        f"matched no prediction; {report.unlabelled:,} prediction(s) still unlabelled",
    ]
    if served.other_versions:
        lines.append(f"skipped {served.other_versions:,} sample(s) served by other versions")
    lines.append(f"baseline {report.metric}: {report.baseline:.4g} ({report.baseline_key})")
    if not r.error:
        lo, hi = r.extra["ci"]
        conf = round(100 * r.extra["confidence"])
        lines.append(
            f"{report.metric} over the newest {r.n:,}: {r.statistic:.4g} "
            f"({conf}% CI {lo:.4g} to {hi:.4g}), tolerance {report.tolerance:g}"
        )
    p = report.proxy
    if p is None:
        lines.append(f"label-free proxy: not computed ({report.proxy_note})")
    elif p.error:
        lines.append(f"label-free proxy: error: {p.error}")
    else:
        parts = ", ".join(
            f"{f.feature} {f.statistic:.3g}" + (f" (p {f.p_value:.3g})" if f.p_value is not None else "")
            + (" [red]shifted[/]" if f.is_drift else "")
            for f in p.features
        )  # fmt: skip
        verdict = "[red]shift[/]" if p.is_drift else "no shift"
        lines.append(f"label-free proxy (prediction_shift): {verdict}; {parts}")
    return lines


def _verdict(report: Any) -> str:
    r, m = report.result, report.metric
    lo, hi = r.extra["ci"]
    side = "below" if m == "accuracy" else "above"
    bar = r.threshold
    where = f"CI {lo:.4g} to {hi:.4g}"
    if report.decayed:
        return (
            f"{m} {r.statistic:.4g} ({where}) lies {side} baseline {report.baseline:.4g} "
            f"{'-' if m == 'accuracy' else '+'} {report.tolerance:g} = {bar:.4g}"
        )
    return (
        f"{m} {r.statistic:.4g} ({where}) within baseline {report.baseline:.4g} "
        f"{'-' if m == 'accuracy' else '+'} {report.tolerance:g} = {bar:.4g}"
    )


def _reference(model: str | None, folder: Path | None, tracking_uri, home) -> tuple[Any, str]:
    from engage.drift import Reference
    from engage.errors import DataError

    if (model is None) == (folder is None):
        raise DataError("give exactly one of --model NAME@alias and --reference FOLDER")
    if folder is not None:
        if not (folder / "reference.npz").exists():
            raise DataError(f"{folder}: no reference.npz here", hint="pass the reference/ folder")
        return Reference.load(folder), str(folder)
    return _registered_reference(model, tracking_uri, home)


def _registered_reference(model: str, tracking_uri, home) -> tuple[Any, str]:
    """Download ``reference/`` from the run that produced the named model version."""
    client, version, where = _registered_version(model, tracking_uri, home)
    return _download_reference(client, version, where), where


def _registered_version(model: str, tracking_uri, home) -> tuple[Any, Any, str]:
    """The client, the model version named by NAME[@alias|/version], and how to name it."""
    from engage.tracking.catalog import ModelRef, get_version

    client = tracking_client(tracking_uri, home)
    ref = ModelRef.parse(model)
    version = get_version(client, ref.name, ref.version, ref.alias)
    return client, version, f"{version.name} version {version.version} (run {version.run_id})"


def _download_reference(client: Any, version: Any, where: str) -> Any:
    from engage.drift import Reference
    from engage.drift.reference import ARTIFACT_PATH
    from engage.errors import TrackingError

    with tempfile.TemporaryDirectory(prefix="engage-drift-") as tmp:
        try:
            local = client.download_artifacts(version.run_id, ARTIFACT_PATH, tmp)
            return Reference.load(Path(local))
        except Exception as exc:
            raise TrackingError(
                f"{where} has no usable '{ARTIFACT_PATH}/' artifact: {exc}",
                hint="train the model with an engage that captures references, or pass "
                "--reference FOLDER",
            ) from None


def _table(report: Any) -> Table:
    table = Table(
        "feature", "detector", "statistic", "p-value", "threshold", "drift", box=box.SIMPLE
    )
    for r in report.results:
        if r.error:
            table.add_row("-", r.detector, "-", "-", "-", f"[red]error: {r.error}[/]")
            continue
        for f in r.features or ():
            p = "-" if f.p_value is None else f"{f.p_value:.3g}"
            thr = "-" if f.threshold is None else f"{f.threshold:.3g}"
            flag = "[red]yes[/]" if f.is_drift else "no"
            table.add_row(f.feature, r.detector, f"{f.statistic:.3g}", p, thr, flag)
        if not r.features:
            p = "-" if r.p_value is None else f"{r.p_value:.3g}"
            flag = "[red]yes[/]" if r.is_drift else "no"
            table.add_row("(all)", r.detector, f"{r.statistic:.3g}", p, f"{r.threshold:.3g}", flag)
    return table
