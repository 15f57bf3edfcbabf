"""Models: registered models, their versions and aliases, and each version's gate decision."""

from __future__ import annotations

import _ui
import pandas as pd
import streamlit as st

from engage.monitor.views import model_rows

st.title("Models")


def body() -> None:
    src = _ui.sources()
    rows = model_rows(_ui.client(src))
    if not rows:
        st.info(
            f"No registered models yet in `{src.tracking_uri}`. A pipeline with "
            f"`tracking.registration` registers one: {_ui.QUICKSTART}."
        )
        return
    st.metric("registered models", len({r.model for r in rows}))
    frame = pd.DataFrame(
        {
            "model": [r.model for r in rows],
            "version": [r.version for r in rows],
            "aliases": [", ".join(r.aliases) or "-" for r in rows],
            "gate": [r.gate or "-" for r in rows],
            "gate metric": [r.gate_metric or "-" for r in rows],
            "value": [r.metric_value for r in rows],
            "created": [_ui.when(r.created_ms / 1000) for r in rows],
            "run id": [r.run_id or "-" for r in rows],
        }
    )
    _ui.table(frame, {"gate": "large", "created": "medium", "aliases": "medium"})
    with st.expander("Promotion history"):
        told = False
        for r in rows:
            if r.history:
                told = True
                st.markdown(f"**{r.model} version {r.version}**")
                st.code("\n".join(f"{k} = {v}" for k, v in r.history.items()), language=None)
        if not told:
            st.caption("No promotions yet: `engage models promote NAME --reason ...`")


_ui.live(body)
