"""The Ray Serve deployments: a model server per version, and the HTTP ingress.

``ModelServer`` loads one registered version once per replica and answers with dynamic
batching. ``Ingress`` is the FastAPI app on the HTTP proxy: auth, body limit, validation,
routing by weight to the versions in the app's route table, the JSON answer, and the
monitoring hooks (run after the answer is sent).
"""

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from starlette.background import BackgroundTask

from engage.serve import auth
from engage.serve.hooks import HookSettings, ServingHooks
from engage.serve.model import ModelTarget, load
from engage.serve.routes import Route, RouteTable, table_actor
from engage.serve.validation import (
    RequestError,
    check_content_length,
    check_content_type,
    parse_json,
    parse_predict,
    read_limited,
    request_ids,
)

_log = logging.getLogger(__name__)
_ROUTE_POLL_S = 0.25
_KNOWN = {"/predict": ("POST",), "/health": ("GET",), "/metadata": ("GET",)}


def _answer(target: ModelTarget, out: np.ndarray) -> tuple[list, dict]:
    """(predictions, extra fields): class labels and probabilities, or values.

    Non-finite outputs (possible with nan_policy allow) become null: JSON has no NaN.
    """
    if target.classes:
        shifted = out - out.max(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", over="ignore"):
            probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        finite = np.isfinite(out).all(axis=1)
        labels = [
            target.classes[int(i)] if ok else None
            for i, ok in zip(out.argmax(axis=1), finite, strict=True)
        ]
        return labels, {
            "classes": list(target.classes),
            "probabilities": _nulls(np.round(probs.astype(np.float64), 6)),
        }
    return _nulls(out.reshape(len(out), -1)[:, 0]), {}


def _nulls(values: np.ndarray) -> list:
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


class ModelServer:
    """One model version on a replica; ``predict`` batches concurrent requests."""

    def __init__(self, target: ModelTarget, home: str, max_batch_size: int, wait_s: float) -> None:
        import torch

        torch.set_num_threads(1)  # a replica reserves a fraction of a CPU
        self.target = target
        self.model = load(target, Path(home) / "serve" / "cache")
        self.predict.set_max_batch_size(max_batch_size)
        self.predict.set_batch_wait_timeout_s(wait_s)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def predict(self, arrays: list[np.ndarray]) -> list[tuple[np.ndarray, int]]:
        """Each caller's (n, window, features) array -> its (n, outputs) rows, batch size."""
        sizes = [len(a) for a in arrays]
        out = await asyncio.to_thread(self._forward, np.concatenate(arrays))
        parts = np.split(out, np.cumsum(sizes)[:-1])
        return [(p, len(arrays)) for p in parts]

    def _forward(self, x: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.model(torch.from_numpy(x)).numpy()

    def version(self) -> str:
        return self.target.version


@dataclass(frozen=True)
class IngressSettings:
    app: str
    max_body_bytes: int
    nan_policy: str
    token_digest: str | None
    hooks: HookSettings


fastapi_app = FastAPI(title="engage model server", docs_url=None, redoc_url=None, openapi_url=None)


@serve.ingress(fastapi_app)
class Ingress:
    """HTTP JSON in front of the app's model versions."""

    def __init__(self, settings: IngressSettings) -> None:
        self.settings = settings
        self._table = RouteTable(0, ())
        self._handles: dict[str, Any] = {}
        self._replica = _replica_tag()
        self.hooks = ServingHooks(settings.hooks, self._replica)
        self._actor = table_actor(settings.app)
        self._refresh(wait=True)
        self._stop = threading.Event()
        threading.Thread(target=self._poll, name="engage-routes", daemon=True).start()

    # -- routes ------------------------------------------------------------------------------
    @fastapi_app.post("/predict")
    async def predict(self, request: Request) -> JSONResponse:
        started = time.perf_counter()
        try:
            self._guard(request)
            check_content_type(request.headers.get("content-type"))
            check_content_length(
                request.headers.get("content-length"), self.settings.max_body_bytes
            )
            body = await read_limited(request.stream(), self.settings.max_body_bytes)
            route = self._route(body)
            req = parse_predict(body, route.target.input_spec, self.settings.nan_policy)
            out, batch = await self._handle(route).predict.remote(req.inputs)
        except RequestError as exc:
            return self._error(exc, "/predict", started)
        except Exception as exc:  # never a traceback to the caller
            _log.exception("predict failed")
            return self._error(
                RequestError(500, "internal", f"prediction failed: {type(exc).__name__}"),
                "/predict",
                started,
            )
        target = route.target
        labels, extra = _answer(target, out)
        body_out = {
            "predictions": labels,
            **extra,
            "model": {"name": target.name, "version": target.version},
            "request_ids": req.request_ids,
        }
        seconds = time.perf_counter() - started

        def report() -> None:
            self.hooks.request("/predict", 200, seconds)
            self.hooks.predicted(target, req.request_ids, req.inputs, out, labels, batch)

        return JSONResponse(body_out, background=BackgroundTask(report))

    @fastapi_app.get("/health")
    async def health(self) -> JSONResponse:
        started = time.perf_counter()
        ok = bool(self._table.routes)
        body = {
            "status": "ok" if ok else "no model routed yet",
            "versions": [r.target.version for r in self._table.routes],
        }
        return self._json(body, 200 if ok else 503, "/health", started)

    @fastapi_app.get("/metadata")
    async def metadata(self, request: Request) -> JSONResponse:
        started = time.perf_counter()
        try:
            self._guard(request)
        except RequestError as exc:
            return self._error(exc, "/metadata", started)
        primary = self._table.routes[0].target if self._table.routes else None
        body = {
            **(primary.metadata() if primary else {}),
            "app": self.settings.app,
            "routes": [
                {"version": r.target.version, "role": r.role, "weight": r.weight}
                for r in self._table.routes
            ],
            "limits": {
                "max_body_bytes": self.settings.max_body_bytes,
                "nan_policy": self.settings.nan_policy,
            },
        }
        return self._json(body, 200, "/metadata", started)

    @fastapi_app.api_route(
        "/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    )
    async def fallback(self, request: Request, path: str) -> JSONResponse:
        started = time.perf_counter()
        route = "/" + path.strip("/")
        if route in _KNOWN:
            allowed = ", ".join(_KNOWN[route])
            exc = RequestError(
                405, "method_not_allowed", f"{request.method} {route}: use {allowed}"
            )
            return self._error(exc, route, started, headers={"Allow": allowed})
        exc = RequestError(404, "not_found", f"no route {route}; routes: {', '.join(_KNOWN)}")
        return self._error(exc, "other", started)

    # -- helpers -----------------------------------------------------------------------------
    def _guard(self, request: Request) -> None:
        auth.check(request.headers.get("authorization"), self.settings.token_digest)

    def _route(self, body: bytes) -> Route:
        table = self._table
        if not table.routes:
            raise RequestError(503, "no_model", "no model version is routed yet; retry shortly")
        if len(table.routes) == 1:
            return table.routes[0]
        # Routing needs the first request id; parse_predict re-parses and checks it all.
        payload = parse_json(body)
        ids = payload.get("request_ids") if isinstance(payload, dict) else None
        first = ids[0] if isinstance(ids, list) and ids and isinstance(ids[0], str) else None
        return table.pick(first or request_ids(None, 1)[0])

    def _handle(self, route: Route) -> Any:
        handle = self._handles.get(route.model_app)
        if handle is None:
            handle = serve.get_deployment_handle("ModelServer", app_name=route.model_app)
            self._handles[route.model_app] = handle
        return handle

    def _error(self, exc: RequestError, route: str, started: float, headers=None) -> JSONResponse:
        return self._json(exc.body(), exc.status, route, started, headers)

    def _json(self, body, status: int, route: str, started: float, headers=None) -> JSONResponse:
        seconds = time.perf_counter() - started
        task = BackgroundTask(self.hooks.request, route, status, seconds)
        return JSONResponse(body, status_code=status, headers=headers, background=task)

    def _refresh(self, wait: bool = False) -> None:
        import ray

        table = ray.get(self._actor.get.remote(self._replica, self._table.generation))
        if table.generation != self._table.generation:
            self._table = table  # one assignment: a request sees the old or the new table
            self.hooks.traffic(table.routes)

    def _poll(self) -> None:
        while not self._stop.wait(_ROUTE_POLL_S):
            try:
                self._refresh()
            except Exception as exc:  # the actor restarting: keep the last table
                _log.warning("route table unavailable: %s", exc)

    def check_health(self) -> None:
        if self._table.generation == 0:
            raise RuntimeError("no route table yet")

    def __del__(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
        if hasattr(self, "hooks"):
            self.hooks.close()
