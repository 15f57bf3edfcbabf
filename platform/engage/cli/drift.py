"""``engage drift check``: a table of current data against a model version's reference.

Exit 0: no drift; 8: drift or a data-quality failure; 9: a detector failed or gave no
verdict. For cron and CI: the exit code is the result, the table is for people.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

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
        str, typer.Option(help="Comma-separated detectors, e.g. quality,ks or quality,cusum.")
    ] = "quality,ks",
    p_val: Annotated[float, typer.Option(help="Level of the ks/cvm/mmd tests.")] = 0.05,
    correction: Annotated[str, typer.Option(help="ks/cvm: bonferroni or fdr.")] = "bonferroni",
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="MLflow tracking URI; overrides env.")
    ] = None,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home", help="Folder for engage's files; default: ENGAGE_HOME or ./.engage."
        ),
    ] = None,
) -> None:
    """Print a per-feature drift report; exit 8 on drift, 9 when a detector fails."""
    from engage.cli.main import _guarded, out

    def body() -> None:
        from engage.errors import DriftCheckError, DriftDetected
        from engage.monitor.drift.batch import check_batch

        names = [n.strip() for n in detectors.split(",") if n.strip()]
        ref, source = _reference(model, reference, tracking_uri, home)
        frame = _read(data)
        options = {n: {"p_val": p_val, "correction": correction} for n in ("ks", "cvm")}
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

    _guarded(body)


def _reference(model: str | None, folder: Path | None, tracking_uri, home) -> tuple[Any, str]:
    from engage.errors import DataError
    from engage.monitor.drift import Reference

    if (model is None) == (folder is None):
        raise DataError("give exactly one of --model NAME@alias and --reference FOLDER")
    if folder is not None:
        if not (folder / "reference.npz").exists():
            raise DataError(f"{folder}: no reference.npz here", hint="pass the reference/ folder")
        return Reference.load(folder), str(folder)
    return _registered_reference(model, tracking_uri, home)


def _registered_reference(model: str, tracking_uri, home) -> tuple[Any, str]:
    """Download ``reference/`` from the run that produced the named model version."""
    from engage.cli.models import _client
    from engage.errors import TrackingError
    from engage.monitor.drift import Reference
    from engage.monitor.drift.reference import ARTIFACT_PATH
    from engage.tracking.catalog import ModelRef, get_version

    client = _client(tracking_uri, home)
    ref = ModelRef.parse(model)
    version = get_version(client, ref.name, ref.version, ref.alias)
    where = f"{version.name} version {version.version} (run {version.run_id})"
    with tempfile.TemporaryDirectory(prefix="engage-drift-") as tmp:
        try:
            local = client.download_artifacts(version.run_id, ARTIFACT_PATH, tmp)
            return Reference.load(Path(local)), where
        except Exception as exc:
            raise TrackingError(
                f"{where} has no usable '{ARTIFACT_PATH}/' artifact: {exc}",
                hint="train the model with an engage that captures references, or pass "
                "--reference FOLDER",
            ) from None


def _read(path: Path) -> Any:
    import pandas as pd

    from engage.errors import DataError

    if not path.exists():
        raise DataError(f"{path}: no such file")
    readers = {".parquet": pd.read_parquet, ".csv": pd.read_csv}
    if path.suffix not in readers:
        raise DataError(f"{path}: expected a .parquet or .csv file", hint="convert it first")
    try:
        return readers[path.suffix](path)
    except Exception as exc:
        raise DataError(f"{path}: cannot read it: {exc}") from None


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
