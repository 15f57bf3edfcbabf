"""The Serve application: one deployment, ``Ingress``, whose replicas answer HTTP themselves.

A request crosses one Python process. On the head ``engage deploy`` manages, Serve's
HAProxy ingress forwards the connection straight to an ``Ingress`` replica's own HTTP port
(Serve's direct ingress); on any other cluster Serve's HTTP proxy hands it to the replica.
The replica does the rest in-process: bearer token, 413 from ``Content-Length`` before the
body is read, the body's format (engage's own on ``/predict``, MLflow's scoring-server
formats on ``/invocations``: ``engage.serve.scoring``), the signature checks, the version
by the route table (canary split), the model, the JSON answer, and one queued record for
the monitoring hooks, which report from their own thread (``engage.serve.hooks``).

Dynamic batching: requests that are in the replica at the same time share one model call
through ``@serve.batch`` (``max_batch_size``, ``batch_wait_timeout_s`` from the spec); a
batch closes as soon as it holds every request in the replica, and a request alone in the
replica runs at once instead of waiting for a batch that cannot fill (see ``_infer``).

The routed versions live in the replica: a rollout or a canary change loads the new
version next to the served one (``engage.serve.routes``), swaps in one assignment and
acknowledges; no replica restarts and no request fails.

``engage.serve.build`` binds this deployment, for ``engage deploy`` and for a declarative
Serve config (``import_path: engage.serve.build:build_app``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from engage.serve import auth
from engage.serve.hooks import HookSettings, ServingHooks
from engage.serve.model import ModelTarget, load
from engage.serve.routes import Route, RouteTable, table_actor
from engage.serve.scoring import parse_invocation
from engage.serve.validation import (
    InputSpec,
    PredictRequest,
    RequestError,
    check_content_length,
    check_content_type,
    parse_json,
    parse_predict,
    read_limited,
    request_ids,
)

_log = logging.getLogger(__name__)
_ROUTE_WAIT_S = 10.0  # a long poll of the route table returns at a change or after this
_RETRY_S = 5.0  # after a version failed to load or the table was unreachable
_KNOWN = {
    "/predict": ("POST",),
    "/invocations": ("POST",),  # MLflow's scoring-server formats (engage.serve.scoring)
    "/health": ("GET",),
    "/ping": ("GET",),  # what clients of `mlflow models serve` poll
    "/metadata": ("GET",),
}
DEPLOYMENT = "Ingress"


@dataclass(frozen=True)
class IngressSettings:
    """Everything a replica needs, fixed for its life (a change restarts the replicas)."""

    app: str
    max_body_bytes: int
    nan_policy: str
    token_digest: str | None
    hooks: HookSettings
    max_batch_size: int = 16
    batch_wait_timeout_s: float = 0.005
    # Fixed routes (a declarative app, build_app); None: follow the app's route-table actor.
    routes: tuple[Route, ...] | None = None
    # False only for the serving benchmark's hooks-off arm: no metrics, no samples.
    hooks_enabled: bool = True


def _answer(target: ModelTarget, out: np.ndarray) -> tuple[list, dict]:
    """(predictions, extra fields): class labels and probabilities, or values.

    Non-finite outputs (possible with nan_policy allow) become null: JSON has no NaN.
    """
    if target.classes:
        classes = target.classes
        finite = np.isfinite(out)
        if finite.all():  # the usual case: exp of values <= 0, nothing to guard
            shifted = np.exp(out - out.max(axis=1, keepdims=True))
            probs = shifted / shifted.sum(axis=1, keepdims=True)
            labels = [classes[i] for i in out.argmax(axis=1).tolist()]
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                shifted = np.exp(out - out.max(axis=1, keepdims=True))
                probs = shifted / shifted.sum(axis=1, keepdims=True)
            rows = finite.all(axis=1).tolist()
            labels = [
                classes[int(i)] if ok else None
                for i, ok in zip(out.argmax(axis=1).tolist(), rows, strict=True)
            ]
        return labels, {
            "classes": list(classes),
            "probabilities": _nulls(np.round(probs.astype(np.float64), 6)),
        }
    return _nulls(out.reshape(len(out), -1)[:, 0]), {}


def _nulls(values: np.ndarray) -> list:
    if np.isfinite(values).all():
        return values.tolist()
    return [
        _nulls(v) if isinstance(v, np.ndarray) else (float(v) if np.isfinite(v) else None)
        for v in values
    ]


def _replica_tag() -> str:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:
        import uuid

        return uuid.uuid4().hex[:8]


class _Version:
    """One loaded model version: its target, input spec and torch module."""

    __slots__ = ("key", "module", "spec", "target")

    def __init__(self, target: ModelTarget, module: Any) -> None:
        self.target = target
        self.key = (target.name, target.version)
        self.spec: InputSpec = target.input_spec
        self.module = module

    def parse(self, route: str, body: bytes, nan_policy: str) -> PredictRequest:
        """The checked request of ``body``: /predict's own format or MLflow's formats."""
        if route == "/invocations":
            return parse_invocation(body, self.spec, self.target.features, nan_policy)
        return parse_predict(body, self.spec, nan_policy)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The module's output for a float32 batch, without gradients."""
        import torch

        with torch.no_grad():
            return self.module(torch.from_numpy(x)).numpy()


@dataclass(frozen=True)
class _Served:
    """What a replica answers with: swapped as a whole, so a request sees one or the other."""

    table: RouteTable
    versions: tuple[_Version, ...]  # one per route, in the table's order

    def pick(self, body: bytes) -> _Version:
        """The version that answers ``body``: by its first request id when a canary splits."""
        if len(self.versions) == 1:
            return self.versions[0]
        # Routing needs the first request id; the body's parser re-parses and checks it all.
        payload = parse_json(body)
        ids = payload.get("request_ids") if isinstance(payload, dict) else None
        first = ids[0] if isinstance(ids, list) and ids and isinstance(ids[0], str) else None
        route = self.table.pick(first or request_ids(None, 1)[0])
        return self.versions[self.table.routes.index(route)]


class _NoHooks:
    """The hooks-off arm of the benchmark: the same calls, doing nothing."""

    def prepare(self, *args: Any) -> None:
        """Nothing: the hooks are off."""

    def request(self, *args: Any) -> None:
        """Nothing: the hooks are off."""

    def predicted(self, *args: Any) -> None:
        """Nothing: the hooks are off."""

    def batched(self, *args: Any) -> None:
        """Nothing: the hooks are off."""

    def traffic(self, *args: Any) -> None:
        """Nothing: the hooks are off."""

    def close(self) -> None:
        """Nothing to close."""


class Ingress:
    """A replica of the app: HTTP JSON, checks, routing, the models, batching, hooks."""

    def __init__(self, settings: IngressSettings) -> None:
        import torch

        torch.set_num_threads(1)  # a replica reserves a fraction of a CPU
        self.settings = settings
        self._cache = Path(settings.hooks.home) / "serve" / "cache"
        self._replica = _replica_tag()
        self._active = 0  # /predict requests in this replica now
        self._batched.set_max_batch_size(settings.max_batch_size)
        self._batched.set_batch_wait_timeout_s(settings.batch_wait_timeout_s)
        self.hooks: Any = (
            ServingHooks(settings.hooks, self._replica) if settings.hooks_enabled else _NoHooks()
        )
        self._stop = threading.Event()
        if settings.routes is not None:
            self._actor = None
            self._served = self._load(RouteTable(1, settings.routes), None)
        else:
            import ray

            self._actor = table_actor(settings.app)
            table = ray.get(self._actor.get.remote(self._replica, 0))
            if not table.routes:
                raise RuntimeError(f"the route table of {settings.app} is empty")
            self._served = self._load(table, None)
            ray.get(self._actor.get.remote(self._replica, table.generation))  # acknowledge
            threading.Thread(target=self._follow, name="engage-routes", daemon=True).start()
        self.hooks.traffic(self._served.table.routes)

    # -- HTTP ------------------------------------------------------------------------------
    async def __call__(self, request: Request) -> JSONResponse:
        started = time.perf_counter()
        scope = request.scope
        path, root = scope.get("path", "/"), scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        route = "/" + path.strip("/")
        method = request.method
        if route in ("/predict", "/invocations") and method == "POST":
            return await self._predict(request, route, started)
        if route in ("/health", "/ping") and method == "GET":
            return self._health(route, started)
        if route == "/metadata" and method == "GET":
            return self._metadata(request, started)
        if route in _KNOWN:
            allowed = ", ".join(_KNOWN[route])
            exc = RequestError(405, "method_not_allowed", f"{method} {route}: use {allowed}")
            return self._error(exc, route, started, headers={"Allow": allowed})
        exc = RequestError(404, "not_found", f"no route {route}; routes: {', '.join(_KNOWN)}")
        return self._error(exc, "other", started)

    async def _predict(self, request: Request, route: str, started: float) -> JSONResponse:
        """/predict and /invocations: one path, two body formats, the same answer."""
        settings = self.settings
        self._active += 1
        try:
            headers = request.headers
            auth.check(headers.get("authorization"), settings.token_digest)
            check_content_type(headers.get("content-type"))
            check_content_length(headers.get("content-length"), settings.max_body_bytes)
            body = await read_limited(request.stream(), settings.max_body_bytes)
            version = self._served.pick(body)
            req = version.parse(route, body, settings.nan_policy)
            out = await self._infer(version, req.inputs)
        except RequestError as exc:
            return self._error(exc, route, started)
        except Exception as exc:  # never a traceback to the caller
            _log.exception("predict failed")
            error = RequestError(500, "internal", f"prediction failed: {type(exc).__name__}")
            return self._error(error, route, started)
        finally:
            self._active -= 1
        target = version.target
        labels, extra = _answer(target, out)
        answer = JSONResponse(
            {
                "predictions": labels,
                **extra,
                "model": {"name": target.name, "version": target.version},
                "request_ids": req.request_ids,
            }
        )
        self.hooks.request(route, 200, time.perf_counter() - started)
        self.hooks.predicted(target, req.request_ids, req.inputs, out, labels)
        return answer

    def _health(self, route: str, started: float) -> JSONResponse:
        served = self._served
        body = {"status": "ok", "versions": [v.target.version for v in served.versions]}
        return self._json(body, 200, route, started)

    def _metadata(self, request: Request, started: float) -> JSONResponse:
        try:
            auth.check(request.headers.get("authorization"), self.settings.token_digest)
        except RequestError as exc:
            return self._error(exc, "/metadata", started)
        served = self._served
        body = {
            **served.versions[0].target.metadata(),
            "app": self.settings.app,
            "routes": [
                {"version": r.target.version, "role": r.role, "weight": r.weight}
                for r in served.table.routes
            ],
            "limits": {
                "max_body_bytes": self.settings.max_body_bytes,
                "nan_policy": self.settings.nan_policy,
            },
        }
        return self._json(body, 200, "/metadata", started)

    def _error(self, exc: RequestError, route: str, started: float, headers=None) -> JSONResponse:
        return self._json(exc.body(), exc.status, route, started, headers)

    def _json(self, body, status: int, route: str, started: float, headers=None) -> JSONResponse:
        answer = JSONResponse(body, status_code=status, headers=headers)
        self.hooks.request(route, status, time.perf_counter() - started)
        return answer

    # -- the model -----------------------------------------------------------------------------
    async def _infer(self, version: _Version, x: np.ndarray) -> np.ndarray:
        """Alone in the replica: the model at once. Otherwise through the batcher.

        One turn of the event loop first, so requests whose bytes arrived with this one
        reach this point too (a handler otherwise runs from parse to answer without ever
        yielding, and requests would never meet). A batch then closes when it holds every
        request in the replica (up to ``max_batch_size``): waiting the rest of
        ``batch_wait_timeout_s`` for requests that are not there would only idle the CPU.
        """
        limit = self.settings.max_batch_size
        if limit > 1:
            await asyncio.sleep(0)
        if self._active <= 1 or limit <= 1:
            out = version.forward(x)
            self.hooks.batched(1)
            return out
        self._batched.set_max_batch_size(min(limit, self._active))
        return await self._batched((version, x))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def _batched(self, items: list[tuple[_Version, np.ndarray]]) -> list[np.ndarray]:
        """Concurrent requests -> one model call per version -> each caller's rows."""
        results: list[Any] = [None] * len(items)
        groups: dict[tuple[str, str], list[int]] = {}
        for i, (version, _x) in enumerate(items):
            groups.setdefault(version.key, []).append(i)
        for indices in groups.values():
            version = items[indices[0]][0]
            arrays = [items[i][1] for i in indices]
            out = version.forward(arrays[0] if len(arrays) == 1 else np.concatenate(arrays))
            bounds = np.cumsum([len(a) for a in arrays])[:-1]
            for i, part in zip(indices, np.split(out, bounds), strict=True):
                results[i] = part
            self.hooks.batched(len(indices))
        return results

    # -- routes ----------------------------------------------------------------------------
    def _load(self, table: RouteTable, current: _Served | None) -> _Served:
        """The versions of ``table``, reusing those already loaded."""
        have = {v.key: v for v in current.versions} if current else {}
        versions = []
        for route in table.routes:
            key = (route.target.name, route.target.version)
            loaded = have.get(key)
            if loaded is None:
                loaded = have[key] = _Version(route.target, load(route.target, self._cache))
                self.hooks.prepare(route.target)
            versions.append(loaded)
        return _Served(table, tuple(versions))

    def _refresh(self) -> bool:
        """Wait for the next table and serve it; False when that failed (retry later)."""
        import ray

        current = self._served
        generation = current.table.generation
        waiting = self._actor.wait.remote(self._replica, generation, _ROUTE_WAIT_S)
        table = ray.get(waiting, timeout=_ROUTE_WAIT_S + 30)
        if table.generation == generation or not table.routes:
            return True
        try:
            served = self._load(table, current)  # the current versions answer meanwhile
        except Exception as exc:
            _log.warning("cannot load the versions of route table %d: %s", table.generation, exc)
            return False
        self._served = served  # one assignment: a request sees the old or the new versions
        self.hooks.traffic(table.routes)
        ray.get(self._actor.get.remote(self._replica, table.generation), timeout=30)  # ack
        return True

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                ok = self._refresh()
            except Exception as exc:  # the actor restarting: keep serving what we have
                _log.warning("route table unavailable: %s", exc)
                ok = False
            if not ok:
                self._stop.wait(_RETRY_S)

    def check_health(self) -> None:
        """Serve's health check: a replica with no version loaded is unhealthy."""
        if not self._served.versions:
            raise RuntimeError("no model version loaded")

    def __del__(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
        if hasattr(self, "hooks"):
            self.hooks.close()
