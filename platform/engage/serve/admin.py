"""``engage serve status | stop``: what is served, and taking it down."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from engage.errors import EngageError
from engage.serve.auth import auth_headers
from engage.serve.controller import AppStatus, _read_state, known_apps


def _attach(home: Path, address: str | None) -> bool:
    """Connect to the cluster; False when there is no engage-managed one to look at."""
    from engage.serve.cluster import connect, is_alive, read_cluster

    if address:
        connect(address, home)
        return True
    cluster = read_cluster(home)
    if cluster is None or not is_alive(cluster):
        return False
    connect(cluster.address, home, cluster.env())
    return True


def status(home: Path, address: str | None = None) -> list[AppStatus]:
    """Every Serve app engage deployed from ``home`` (and any other app on the cluster)."""
    if not _attach(home, address):
        return []
    from ray import serve

    from engage.monitor.discovery import list_targets

    apps = serve.status().applications
    targets = list_targets(home)
    out = []
    for name, info in sorted(apps.items()):
        state = _read_state(home, name)
        replicas = {
            f"{name}/{d}": s.replica_states.get("RUNNING", 0) for d, s in info.deployments.items()
        }
        url = state.get("url")
        out.append(
            AppStatus(
                name,
                str(getattr(info.status, "value", info.status)),
                state.get("model"),
                dict(state.get("versions", {})),
                replicas,
                url,
                _health(url, state.get("token_env")) if url else "unknown",
                tuple(f"http://{t['address']}/metrics" for t in targets if t.get("app") == name),
            )
        )
    return out


def _health(url: str, token_env: str | None) -> str:
    request = urllib.request.Request(f"{url}/health", headers=auth_headers(token_env))
    try:
        with urllib.request.urlopen(request, timeout=3) as answer:
            return json.loads(answer.read()).get("status", "ok")
    except Exception as exc:
        return f"unreachable ({getattr(exc, 'reason', exc)})"


def stop(home: Path, app: str | None = None, address: str | None = None) -> list[str]:
    """Delete ``app`` (or every engage app of ``home``) and its route table; end their runs.

    The apps are deleted together (their replicas drain side by side, not one app after
    the other). The engage-managed head stops when no Serve app is left on it.
    """
    if not _attach(home, address):
        if app is not None:
            raise EngageError(f"no serving cluster is running for {home}", hint="nothing to stop")
        return []
    import ray
    from ray import serve

    from engage.serve.routes import NAMESPACE, table_actor_name

    running = serve.status().applications
    names = [app] if app else [a for a in known_apps(home) if a in running]
    if app is not None and app not in running:
        listed = ", ".join(running) or "none"
        raise EngageError(f"no serving app named {app!r}", hint=f"running apps: {listed}")
    delete_apps(names)
    for name in names:
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(table_actor_name(name), namespace=NAMESPACE))
    _end_runs(home, names)
    if address is None and not serve.status().applications:
        from engage.serve.cluster import stop_managed

        serve.shutdown()
        ray.shutdown()
        stop_managed(home)
    return names


#: How long :func:`delete_apps` waits for Serve to take the apps down (Serve's own: 60 s).
DELETE_TIMEOUT_S = 60.0
_DELETE_POLL_S = 0.1  # Serve's blocking delete polls every 1 s, one app after the other


def delete_apps(names: Sequence[str], timeout_s: float = DELETE_TIMEOUT_S) -> None:
    """Delete the Serve apps ``names`` at once; return when none of them is listed any more.

    ``serve.delete`` blocks per app: each app's replicas drain (at least the HAProxy
    deregistration period) and Serve is polled once a second before the next app is even
    asked to stop. Here every delete is sent first, so the apps drain side by side, and
    Serve is polled every 0.1 s.

    Raises
    ------
    EngageError
        Some app was still listed after ``timeout_s``.
    """
    if not names:
        return
    from ray import serve

    from engage.serve.cluster import wait_until

    for name in names:
        serve.delete(name, _blocking=False)  # the wait is below, for all of them
    left: set[str] = set(names)

    def _gone() -> bool:
        left.intersection_update(serve.status().applications)
        return not left

    if not wait_until(_gone, timeout_s, _DELETE_POLL_S):
        raise EngageError(
            f"Serve did not delete {', '.join(sorted(left))} within {timeout_s:g} s",
            hint="`engage serve status` shows what is left; the replica logs are in the "
            "Ray session's logs/serve/ folder",
        )


def _end_runs(home: Path, apps: Sequence[str]) -> None:
    """End the monitoring run of each app (one spool and one drainer for all of them)."""
    states = {app: _read_state(home, app) for app in apps}
    runs = [s["run_local_id"] for s in states.values() if s.get("run_local_id")]
    if runs:
        from engage.tracking import Drainer, Spool

        spool = Spool(home / "spool.db")
        try:
            for run in runs:
                spool.end_run(run, "FINISHED")
            drainer = Drainer(spool.path)
            try:
                for run in runs:
                    drainer.flush(run, timeout_s=10.0)
            finally:
                drainer.stop()
        finally:
            spool.close()
    for app in apps:
        (home / "serve" / app / "deployment.json").unlink(missing_ok=True)
