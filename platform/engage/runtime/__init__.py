"""Runtime: the Ray session and the job template that runs every job kind."""

from engage.runtime.session import SessionInfo, ray_session

__all__ = ["SessionInfo", "ray_session"]
