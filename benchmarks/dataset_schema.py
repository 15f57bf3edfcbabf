"""CPU time of a run's dataset schema: engage's vectorised pass against MLflow's inference.

Every pipeline run records its dataset input in MLflow with a schema (each column's type and
whether it holds missing values). ``mlflow.data.from_pandas`` infers it with a Python call
per value; ``engage.tracking.dataset_schema`` gets the same schema from a few rows plus
``isna``. Both are timed (process CPU time, the best of ``--repeats``) on the quickstart's
table and on larger tables of the same columns, and the two schemas are compared.

Usage: ``python benchmarks/dataset_schema.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import pandas as pd
from _report import git_commit, machine, write_section

from engage.data import load_frame
from engage.spec import load_spec
from engage.tracking.dataset_schema import dataset_schema_json

REPO = Path(__file__).resolve().parents[1]
SOURCE = str(REPO / "data" / "quickstart.csv")


def _mlflow(frame: pd.DataFrame) -> str | None:
    import mlflow.data

    return mlflow.data.from_pandas(frame, source=SOURCE, digest="-").to_dict()["schema"]


def _best(fn, frame: pd.DataFrame, repeats: int) -> tuple[float, str | None]:
    """The smallest process CPU time of ``repeats`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        out = fn(frame)
        best = min(best, time.process_time() - start)
    return best, out


def main() -> None:
    """Time both on 1x, 4x and 16x the quickstart's rows; write the BENCHMARKS section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)  # MLflow's "source ... multiple ways"

    spec = load_spec(REPO / "pipelines" / "quickstart.yaml").spec
    base = load_frame(spec.data, REPO / "pipelines")
    rows = []
    for times in (1, 4, 16):
        frame = pd.concat([base] * times, ignore_index=True)
        theirs_s, theirs = _best(_mlflow, frame, args.repeats)
        ours_s, ours = _best(lambda f: dataset_schema_json(f, SOURCE), frame, args.repeats)
        rows.append((len(frame), theirs_s, ours_s, ours == theirs))
        print(f"{len(frame):>9,} rows: MLflow {theirs_s:.3f} s, engage {ours_s:.4f} s")

    table = "\n".join(
        f"| {n:,} | {t:.3f} | {o:.4f} | {t / o:,.0f}x | {'yes' if same else 'NO'} |"
        for n, t, o, same in rows
    )
    write_section(
        "dataset-schema",
        f"""## A run's dataset schema: engage's vectorised pass against MLflow's inference (issue 10)

Machine: {machine()}; commit {git_commit()}. Command: `python benchmarks/dataset_schema.py --repeats {args.repeats}`.
Process CPU time (the best of {args.repeats}) to get the schema MLflow records with a run's dataset input, on the quickstart's table (8 columns: a timestamp, a household string, 6 numbers) repeated 1, 4 and 16 times. Baseline: `mlflow.data.from_pandas(frame).to_dict()["schema"]`, what `log_dataset` called before, on every run.

| rows | MLflow (CPU s) | engage (CPU s) | ratio | same schema |
|---:|---:|---:|---:|---|
{table}
""",
    )


if __name__ == "__main__":
    main()
