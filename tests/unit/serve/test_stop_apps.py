"""``engage serve stop`` deletes its apps together, not one blocking delete after another.

Serve's own ``serve.delete`` blocks per app (the replicas' drain, then a 1 s poll) before
the next app is asked to stop, so stopping N apps took N drains in a row. Serve is a fake
here: it takes a few polls to delete what it was asked to, and records the calls.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engage.errors import EngageError
from engage.serve import admin


class FakeServe:
    """Serve's delete/status/shutdown: an app is gone ``polls`` status calls after its delete."""

    def __init__(self, apps: list[str], polls: int = 3) -> None:
        self.apps = {a: None for a in apps}
        self.polls = polls
        self.pending: dict[str, int] = {}
        self.calls: list[tuple] = []

    def delete(self, name: str, _blocking: bool = True) -> None:
        self.calls.append(("delete", name, _blocking))
        self.pending[name] = self.polls

    def status(self) -> SimpleNamespace:
        self.calls.append(("status",))
        for name in list(self.pending):
            self.pending[name] -= 1
            if self.pending[name] <= 0:
                del self.pending[name]
                self.apps.pop(name, None)
        return SimpleNamespace(applications=dict(self.apps))

    def shutdown(self) -> None:
        self.calls.append(("shutdown",))


@pytest.fixture
def fake_serve(monkeypatch):
    """Serve with apps a and b; no cluster is joined and no actor is killed."""
    import ray
    from ray import serve

    fake = FakeServe(["a", "b"])
    for name in ("delete", "status", "shutdown"):
        monkeypatch.setattr(serve, name, getattr(fake, name))
    monkeypatch.setattr(ray, "get_actor", lambda *a, **k: (_ for _ in ()).throw(ValueError()))
    monkeypatch.setattr(ray, "shutdown", lambda: fake.calls.append(("ray.shutdown",)))
    monkeypatch.setattr(admin, "_attach", lambda home, address: True)
    return fake


def _deployed(home, *apps: str) -> None:
    for app in apps:
        folder = home / "serve" / app
        folder.mkdir(parents=True)
        (folder / "deployment.json").write_text(json.dumps({"app": app}))


def test_every_app_is_asked_to_stop_before_any_wait(tmp_path, fake_serve) -> None:
    _deployed(tmp_path, "a", "b")

    stopped = admin.stop(tmp_path, address="127.0.0.1:6379")  # not the managed head

    deletes = [c for c in fake_serve.calls if c[0] == "delete"]
    assert stopped == ["a", "b"]
    assert deletes == [("delete", "a", False), ("delete", "b", False)]
    first_wait = fake_serve.calls.index(("status",), fake_serve.calls.index(deletes[0]))
    assert fake_serve.calls.index(deletes[-1]) < first_wait
    assert fake_serve.apps == {}  # returned only once Serve no longer lists them
    assert admin.known_apps(tmp_path) == []


def test_a_single_app_stops_and_the_others_keep_serving(tmp_path, fake_serve) -> None:
    _deployed(tmp_path, "a", "b")

    assert admin.stop(tmp_path, "b", address="127.0.0.1:6379") == ["b"]

    assert list(fake_serve.apps) == ["a"]
    assert admin.known_apps(tmp_path) == ["a"]
    assert ("shutdown",) not in fake_serve.calls


def test_an_app_serve_does_not_delete_in_time_is_named(tmp_path, fake_serve) -> None:
    fake_serve.polls = 10**9

    with pytest.raises(EngageError, match=r"did not delete a, b within 0\.3 s"):
        admin.delete_apps(["a", "b"], timeout_s=0.3)
