"""docs/simulator.md documents every scenario parameter with its range and default."""

from __future__ import annotations

import re
from pathlib import Path

from engage.data.simulator import SCENARIO_SPACE

DOC = Path(__file__).resolve().parents[3] / "docs" / "simulator.md"


def test_parameter_table_matches_the_space() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (\S+) \.\. (\S+) \| (\S+) \| (\w+) \| (.+) \|$",
                      DOC.read_text(), re.M)  # fmt: skip
    table = {name: (float(low), float(high), float(default), kind, doc)
             for name, low, high, default, kind, doc in rows}  # fmt: skip

    assert list(table) == [p.name for p in SCENARIO_SPACE]
    for p in SCENARIO_SPACE:
        assert table[p.name] == (p.low, p.high, p.default, p.kind, p.doc), p.name


def test_the_real_data_side_by_side_is_filled_in() -> None:
    section = DOC.read_text().split("<!-- realdata:start -->")[1].split("<!-- realdata:end -->")[0]

    assert "| co2 | mean |" in section
