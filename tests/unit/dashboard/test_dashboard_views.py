"""Pieces of engage.monitor.views that the seeded pages do not reach."""

from __future__ import annotations

import pandas as pd
import pytest

from engage.monitor.views.drift import _detectors, _split
from engage.monitor.views.federated import _union


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("drift_statistic_mmd_online_co2", ("mmd_online", "co2")),
        ("drift_statistic_mmd_co2_ppm", ("mmd", "co2_ppm")),
        ("drift_statistic_cusum_all", ("cusum", "all")),
        ("drift_statistic_nosuch_co2", None),
        (
            "drift_statistic_prediction_shift_confidence_drop",
            ("prediction_shift", "confidence_drop"),
        ),
    ],
)
def test_metric_keys_split_into_the_longest_detector_name_and_the_feature(key, expected) -> None:
    found = ["drift_detected_mmd_online", "drift_detected_mmd", "drift_detected_prediction_shift"]
    detectors = _detectors(found)

    assert _split(key, "drift_statistic_", detectors) == expected


def test_child_run_rows_fill_in_what_the_events_lack_without_duplicating() -> None:
    columns = ["round", "client", "score", "flagged", "action", "reasons"]
    events = pd.DataFrame([(1, "a", 0.1, False, "aggregate", "")], columns=columns)
    children = pd.DataFrame(
        [(1, "a", 0.1, False, "", ""), (1, "b", 3.0, True, "", "")], columns=columns
    )

    merged = _union(events, children, ["round", "client"])

    assert merged[["client", "action"]].values.tolist() == [["a", "aggregate"], ["b", ""]]
