"""What every page shares: the sources, the sidebar, auto-refresh and error display."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import Any

import streamlit as st

from engage.errors import EngageError
from engage.monitor.views import Sources

REFRESH_CHOICES = {"off": None, "5 s": 5.0, "10 s": 10.0, "30 s": 30.0, "60 s": 60.0}
DEFAULT_REFRESH = "10 s"
QUICKSTART = "run `engage quickstart` (or `make quickstart`)"


def sources() -> Sources:
    """Resolved from the environment on every run, as `engage monitor` resolves them."""
    return Sources.resolve(
        os.environ.get("ENGAGE_HOME") or None,
        os.environ.get("ENGAGE_EVENTS_URI") or None,
        os.environ.get("MLFLOW_TRACKING_URI") or None,
    )


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Any:
    from engage.monitor.store import EventStore

    return EventStore(url)


def store(src: Sources) -> Any | None:
    """The event store (one engine per URL for the app's life); None while it does not exist."""
    found = _store(src.events_url)
    return found if found.exists() else None


def client(src: Sources) -> Any | None:
    return src.client()


def sidebar() -> None:
    src = sources()
    with st.sidebar:
        st.selectbox(
            "Auto-refresh",
            list(REFRESH_CHOICES),
            index=list(REFRESH_CHOICES).index(DEFAULT_REFRESH),
            key="refresh",
            help="How often the live pages reload their data.",
        )
        st.caption(f"engage home: `{src.home}`")
        st.caption(f"event store: `{_shown(src.events_url)}`")
        st.caption(f"MLflow: `{src.tracking_uri}`")


def live(body: Callable[[], None]) -> None:
    """Run ``body`` in a fragment that reruns itself at the chosen refresh interval."""
    every = REFRESH_CHOICES.get(st.session_state.get("refresh", DEFAULT_REFRESH))
    st.fragment(run_every=every)(lambda: guarded(body))()


def guarded(body: Callable[[], None]) -> None:
    """An EngageError (bad configuration, unreachable store) is one message, not a traceback."""
    try:
        body()
    except EngageError as exc:
        hint = f"\n\nhint: {exc.hint}" if exc.hint else ""
        st.error(f"**{exc.headline}**: {exc.message}{hint}")
    except Exception:
        st.error("**internal error** (a bug in engage; please report it with the details below)")
        with st.expander("details"):
            st.code(traceback.format_exc())


def when(ts: float | None) -> str:
    return "-" if not ts else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def labels_text(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"
