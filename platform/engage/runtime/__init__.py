"""Runtime: the Ray session, the one report path, and the pipeline runner."""

from engage.runtime.reporting import Event, EventSink, Reporter
from engage.runtime.session import SessionInfo, ray_session

__all__ = ["Event", "EventSink", "Reporter", "SessionInfo", "ray_session"]
