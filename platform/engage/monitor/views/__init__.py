"""What the dashboard shows, as plain data: read through the event store and MLflow.

The Streamlit app (``dashboard/``) is UI only; every query it makes lives here, so each
page's content is testable without a browser. Functions take an explicit
:class:`~engage.monitor.store.EventStore` and ``MlflowClient`` (see :class:`Sources`) and
return dataclasses or pandas frames; a store or server that cannot be read raises an
:class:`~engage.errors.EngageError` whose message says which one and how to fix it.
"""

from engage.monitor.views.drift import DriftView, drift_views
from engage.monitor.views.experiments import (
    RunFilterError,
    RunRow,
    experiment_names,
    lineage,
    metric_history,
    metric_keys,
    param_diff,
    run_rows,
    runs_frame,
)
from engage.monitor.views.federated import FederatedView, federated_runs, federated_view
from engage.monitor.views.job import SERIES, JobDetail, job_detail, job_order, job_series
from engage.monitor.views.jobs import (
    JobRow,
    alert_rows,
    job_rows,
    jobs_timeline,
    open_alert_count,
)
from engage.monitor.views.models import ModelRow, model_rows
from engage.monitor.views.overview import Overview, overview
from engage.monitor.views.sources import Sources, local_time

__all__ = [
    "SERIES",
    "DriftView",
    "FederatedView",
    "JobDetail",
    "JobRow",
    "ModelRow",
    "Overview",
    "RunFilterError",
    "RunRow",
    "Sources",
    "alert_rows",
    "drift_views",
    "experiment_names",
    "federated_runs",
    "federated_view",
    "job_detail",
    "job_order",
    "job_rows",
    "job_series",
    "jobs_timeline",
    "lineage",
    "local_time",
    "metric_history",
    "metric_keys",
    "model_rows",
    "open_alert_count",
    "overview",
    "param_diff",
    "run_rows",
    "runs_frame",
]
