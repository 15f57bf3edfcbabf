"""The live monitor: Prometheus metrics per job, discovery, events, alert rules.

The monitor is a sink of the one report path: training workers and stages never talk to
Prometheus directly.
"""

from engage.monitor.discovery import list_targets, register_target, unregister_target
from engage.monitor.exporter import Endpoint, MonitorSink
from engage.monitor.job import JobMonitor
from engage.monitor.metrics import JobMetrics

__all__ = [
    "Endpoint",
    "JobMetrics",
    "JobMonitor",
    "MonitorSink",
    "list_targets",
    "register_target",
    "unregister_target",
]
