"""The per-job monitor: a Prometheus endpoint fed by the report path, and its discovery."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from engage.errors import EngageError
from engage.events import Event, Row
from engage.monitor.discovery import register_target, unregister_target
from engage.monitor.metrics import JobMetrics


@dataclass(frozen=True)
class Endpoint:
    """Where a job's metrics are served: the bound host and the actual port."""

    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``, as Prometheus discovery lists it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The full URL of the ``/metrics`` page."""
        return f"http://{self.address}/metrics"


class MonitorSink:
    """An EventSink that keeps a job's Prometheus metrics and serves them over HTTP.

    ``start()`` binds the endpoint (127.0.0.1 and a free port unless told otherwise) and
    writes the job's discovery file; ``stop()`` removes the file and closes the server.
    """

    def __init__(
        self, job: str, run_id: str, home: Path, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.job = job
        self.run_id = run_id
        self.home = home
        self.registry = CollectorRegistry(auto_describe=True)
        self.metrics = JobMetrics(self.registry, job, run_id)
        self._host = host
        self._port = port
        self._server: Any = None
        self._thread: Any = None
        self.endpoint: Endpoint | None = None

    def start(self) -> Endpoint:
        """Serve the metrics over HTTP and write the job's discovery file.

        Raises
        ------
        EngageError
            If the host and port cannot be bound (for example a port already in use).
        """
        try:
            self._server, self._thread = start_http_server(
                self._port, addr=self._host, registry=self.registry
            )
        except OSError as exc:
            raise EngageError(
                f"cannot serve job metrics on {self._host}:{self._port}: {exc.strerror or exc}",
                hint="choose another monitor.port in the spec (0 picks a free one)",
            ) from None
        self.endpoint = Endpoint(self._host, self._server.server_port)
        register_target(self.home, self.job, self.run_id, self.endpoint.address, {})
        return self.endpoint

    def emit(self, events: Sequence[Event]) -> None:
        """Update the job's metrics from ``events``."""
        self.metrics.observe(events)

    def emit_rows(self, batch: Sequence[Event | Row]) -> None:
        """:meth:`emit` of ``batch``'s Events, read from its rows (issue 11): the points the
        job's metrics are fed from are picked out by name, no Event built per point."""
        self.metrics.observe_rows(batch)

    def stop(self) -> None:
        """Remove the discovery file and shut the HTTP server down; safe to call twice."""
        unregister_target(self.home, self.job, self.run_id)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
