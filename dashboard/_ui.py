"""What every page shares: the pages, the sources, the sidebar, auto-refresh, error display,
and how tables and time axes are drawn."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from engage.errors import EngageError
from engage.monitor.views import Sources

REFRESH_CHOICES = {"off": None, "5 s": 5.0, "10 s": 10.0, "30 s": 30.0, "60 s": 60.0}
DEFAULT_REFRESH = "10 s"
QUICKSTART = "run `engage quickstart` (or `make quickstart`)"
# Every page: its file under screens/ and its URL path are one name, so /jobs is the Jobs
# page (a path that names no page opens Streamlit's "Page not found"). The first is the
# landing page, served at / (its own path is reserved, not served).
SCREENS = (
    ("overview", "Overview", ":material/dashboard:"),
    ("experiments", "Experiments", ":material/science:"),
    ("jobs", "Jobs", ":material/directions_run:"),
    ("job", "Job", ":material/monitor_heart:"),
    ("alerts", "Alerts", ":material/notifications_active:"),
    ("drift", "Drift", ":material/ssid_chart:"),
    ("federated", "Federated", ":material/hub:"),
    ("models", "Models", ":material/inventory_2:"),
)


def page_specs() -> list[dict[str, Any]]:
    """``st.Page`` arguments of every page: its file, title, icon, URL path and default."""
    return [
        {
            "page": f"screens/{name}.py",
            "title": title,
            "icon": icon,
            "url_path": name,
            "default": i == 0,
        }
        for i, (name, title, icon) in enumerate(SCREENS)
    ]


def pages() -> list[Any]:
    """The app's pages for ``st.navigation``, each served at ``/<name>``."""
    return [st.Page(**spec) for spec in page_specs()]


def link(name: str, label: str | None = None) -> None:
    """A link to the page ``name`` (one of SCREENS)."""
    title, icon = next((t, i) for n, t, i in SCREENS if n == name)
    st.page_link(f"screens/{name}.py", label=label or title, icon=icon)


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
    """The MLflow client of ``src``; None while its local store does not exist."""
    return src.client()


def table(frame: pd.DataFrame, widths: dict[str, str | int] | None = None, **config: Any) -> None:
    """A table as wide as the page, never wider: every column gets a width in pixels.

    Without one, Streamlit sizes a column to its longest cell and a wide table scrolls
    sideways, its right-hand columns cut off. The columns share ``TABLE_PX`` (the page's
    width in a 1400-pixel window) by weight: ``widths`` maps a column to ``"small"`` (1),
    ``"medium"`` (2), ``"large"`` (4) or a weight of its own (default small for numbers,
    times and flags, medium otherwise); a cell longer than its column ends in "..." and shows whole on hover.
    ``config`` adds column configs (links, formats) by column name.
    """
    weights = {}
    for name in frame.columns:
        given = (widths or {}).get(str(name)) or _default_width(frame[name])
        weights[str(name)] = _WEIGHTS.get(given, given) if isinstance(given, str) else given
    columns = {}
    for name, width in _share(weights).items():
        given = config.get(name)
        columns[name] = _with_width(given, width) if given is not None else {"width": width}
    st.dataframe(frame, hide_index=True, width="stretch", column_config=columns)


def _share(weights: dict[str, float]) -> dict[str, int]:
    """``TABLE_PX`` split by weight; a column under ``MIN_COLUMN_PX`` gets that, the rest
    share what is left, so the total stays within ``TABLE_PX``."""
    narrow: set[str] = set()
    while True:
        budget = TABLE_PX - MIN_COLUMN_PX * len(narrow)
        total = sum(w for n, w in weights.items() if n not in narrow) or 1
        share = {n: budget * w / total for n, w in weights.items() if n not in narrow}
        more = {n for n, px in share.items() if px < MIN_COLUMN_PX}
        if not more:
            return {n: MIN_COLUMN_PX if n in narrow else int(share[n]) for n in weights}
        narrow |= more


TABLE_PX = 900  # what a table may take: the main column of a 1400-pixel-wide window
MIN_COLUMN_PX = 60
_WEIGHTS = {"small": 1, "medium": 2, "large": 4}


def _default_width(column: pd.Series) -> str:
    numeric = pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)
    if numeric or pd.api.types.is_datetime64_any_dtype(column):
        return "small"
    return "medium"


def _with_width(column: Any, width: int) -> Any:
    column = dict(column)
    column["width"] = width
    return column


def time_x(times: pd.Series, field: str = "time", title: str = "time") -> alt.X:
    """An x axis of times that reads as times (``14:05``), never as bare milliseconds.

    Vega-Lite picks a tick format by the tick's own precision, so ticks a few seconds apart
    read ``.925``; a fixed format by the span shown avoids that.
    """
    span = (times.max() - times.min()) if len(times) else pd.Timedelta(0)
    if span > pd.Timedelta(days=2):
        fmt = "%b %d"
    elif span > pd.Timedelta(hours=12):
        fmt = "%b %d %H:%M"
    elif span > pd.Timedelta(minutes=10):
        fmt = "%H:%M"
    else:
        fmt = "%H:%M:%S"
    return alt.X(f"{field}:T", title=title, axis=alt.Axis(format=fmt, labelAngle=0))


def sidebar() -> None:
    """The refresh choice and where the dashboard reads from."""
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
    """Unix seconds as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for none."""
    return "-" if not ts else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def labels_text(labels: dict[str, str]) -> str:
    """``k=v, ...`` sorted by key; ``-`` for none."""
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"
