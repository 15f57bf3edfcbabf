"""The live monitor: Prometheus metrics per job, discovery, events, alert rules.

The monitor is a sink of the one report path: training workers and stages never talk to
Prometheus directly.
"""

from engage.monitor.discovery import list_targets, register_target, unregister_target
from engage.monitor.evaluator import AlertEvaluator, AlertTransition
from engage.monitor.exporter import Endpoint, MonitorSink
from engage.monitor.job import JobMonitor
from engage.monitor.metrics import JobMetrics
from engage.monitor.rules import RULES, AlertRule
from engage.monitor.series import SeriesBuffer

__all__ = [
    "RULES",
    "AlertEvaluator",
    "AlertRule",
    "AlertTransition",
    "Endpoint",
    "EventStore",
    "JobMetrics",
    "JobMonitor",
    "MonitorService",
    "MonitorSink",
    "SeriesBuffer",
    "StoreSink",
    "list_targets",
    "register_target",
    "unregister_target",
]

# The store side pulls in SQLAlchemy: loaded on first use, so a training worker that only
# imports engage.monitor.resources does not pay for it.
_LAZY = {
    "EventStore": "engage.monitor.store",
    "MonitorService": "engage.monitor.service",
    "StoreSink": "engage.monitor.store_sink",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engage.monitor' has no attribute {name!r}")
