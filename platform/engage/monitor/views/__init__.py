"""What the dashboard shows, as plain data: read through the event store and MLflow.

The Streamlit app (``dashboard/``) is UI only; every query it makes lives here, so each
page's content is testable without a browser. Functions take an explicit
:class:`~engage.monitor.store.EventStore` and ``MlflowClient`` (see :class:`Sources`) and
return dataclasses or pandas frames; a store or server that cannot be read raises an
:class:`~engage.errors.EngageError` whose message says which one and how to fix it.
"""

from engage.monitor.views.drift import DriftView, drift_views
from engage.monitor.views.federated import FederatedView, federated_runs, federated_view
from engage.monitor.views.jobs import JobRow, alert_rows, job_rows
from engage.monitor.views.models import ModelRow, model_rows
from engage.monitor.views.sources import Sources

__all__ = [
    "DriftView",
    "FederatedView",
    "JobRow",
    "ModelRow",
    "Sources",
    "alert_rows",
    "drift_views",
    "federated_runs",
    "federated_view",
    "job_rows",
    "model_rows",
]
