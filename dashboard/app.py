"""engage's dashboard: an overview, experiments, jobs (each one live), alerts, drift,
federated rounds and registered models.

UI only: every query goes through ``engage.monitor.views``. Start it with ``make dashboard``
or ``engage dashboard`` (both bind 127.0.0.1); it reads the same stores as ``engage
monitor``: ENGAGE_HOME (default ./.engage), ENGAGE_EVENTS_URI and MLFLOW_TRACKING_URI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# MLflow logs its schema checks at INFO on every new client; the page needs none of it.
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # `streamlit run` adds it; other runners may not
    sys.path.insert(0, str(HERE))

import _ui  # noqa: E402
import streamlit as st  # noqa: E402

st.set_page_config(page_title="engage", page_icon=":material/monitoring:", layout="wide")
page = st.navigation(_ui.pages())
_ui.sidebar()
page.run()
