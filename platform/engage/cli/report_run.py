"""One MLflow run for a command's report (``engage plan``, ``engage profile``).

Such a command trains nothing: it measures or predicts, prints a report and saves it as
files. :func:`log_report_run` records that report as one finished run (parameters, metric
events, the files as artifacts) in the command's own experiment, through the spool like
every engage run, and waits until MLflow has it, so the printed run id is there to open.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engage.events import Event

_DRAIN_S = 30.0  # how long the command waits for MLflow to have the run


def log_report_run(
    loaded: Any,
    *,
    experiment: str,
    kind: str,
    params: Mapping[str, Any],
    events: Sequence[Event],
    folder: Path,
    tracking_uri: str | None,
    home: Path,
    tags: Mapping[str, str] | None = None,
) -> str:
    """Log a command's report as one FINISHED run and return its MLflow run id.

    Parameters
    ----------
    loaded
        The spec the report is about (its name, tracking URI and folder are used).
    experiment
        The MLflow experiment of this kind of report (kept apart from training runs).
    kind
        What the report is (``plan``, ``profile``): the run's ``engage.kind`` tag, the
        start of its name and the artifact folder the files of ``folder`` go to.
    params, events
        The run's parameters and its metric events.
    folder
        The folder of the report's files, logged as artifacts under ``kind/``.
    tracking_uri, home
        The ``--tracking-uri`` given (None: the spec's, else the home's store) and
        engage's home, whose spool carries the run.
    tags
        More tags for the run.

    Raises
    ------
    TrackingError
        The spool cannot be written.
    """
    from engage.tracking import Drainer, PipelineRun, Spool, resolve_tracking_uri

    spec = loaded.spec
    uri = resolve_tracking_uri(spec.tracking.tracking_uri, tracking_uri, home)
    spool = Spool(home / "spool.db")
    try:
        all_tags = {"engage.pipeline": spec.name, "engage.kind": kind, **(tags or {})}
        name = f"{kind}-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run = PipelineRun.start(spool, uri, experiment, name, all_tags, loaded.base_dir)
        run.log_params(dict(params))
        run.log_metric_events(list(events))
        run.log_artifacts(folder, kind)
        run.end("FINISHED")
        drainer = Drainer(spool.path, in_process=True).start()
        try:
            drainer.flush(run.local_id, timeout_s=_DRAIN_S)
        finally:
            drainer.stop(final_drain_s=2.0)
        return run.run_id
    finally:
        spool.close()
