"""The Turing Change Point Dataset (TCPD) for benchmarks: loading, metrics, published table.

Series and annotations come from a local copy of github.com/alan-turing-institute/TCPD
(MIT; each series keeps its own source licence, see its ``datasets/<name>/README.md``):
``datasets/<name>/<name>.json`` and ``annotations.json``. Nothing here downloads.

The metrics follow van den Burg & Williams (2020), "An Evaluation of Change Point
Detection Algorithms", section 4 (written here from the paper's definitions):

- F1: location 0 is added to every annotator's set and to the predictions; a prediction
  is a true positive for an annotation within ``margin`` rows, each prediction used at
  most once (closest first). Precision counts predictions matching the union of the
  annotations; recall is averaged over annotators.
- Cover: every annotator's segmentation is covered by the predicted one (each annotated
  segment weighted by its length, scored by its best Jaccard overlap); averaged over
  annotators.

``PUBLISHED_F1`` is the paper's default-setting F1 table (TCPDBench,
``analysis/output/scores/default_f1_scores.json``, rounded to 3 decimals) for the series
that TCPD's repository ships, and ``occupancy``, which it builds from a source file; ``None`` is a method that failed or does not apply.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path

import numpy as np

METHODS = (
    "amoc", "binseg", "bocpd", "bocpdms", "cpnp", "ecp", "kcpa",
    "pelt", "prophet", "rbocpdms", "rfpop", "segneigh", "wbs", "zero",
)  # fmt: skip
_N = None
_ROWS = """
bank .667 .4 .047 .118 .044 .154 .008 .4 .154 .286 .015 .333 .039 1
brent_spot .272 .483 .521 .239 .607 .478 .104 .465 .249 .321 .490 .431 .516 .315
businv .455 .370 .270 .370 .304 .301 .047 .370 .275 .238 .245 .313 .230 .588
centralia .763 .909 .909 .846 .909 .763 .714 .909 .763 .846 1 .909 .556 .763
children_per_woman .618 .618 .637 .337 .326 .349 .068 .618 .310 .432 .246 .337 .271 .507
co2_canada .544 .691 .619 .265 .578 .817 .169 .661 .482 .381 .569 .661 .520 .361
construction .516 .709 .634 .410 .602 .574 .038 .709 .324 .291 .185 .709 .316 .696
debt_ireland .469 .760 .760 .611 .760 .469 .519 .760 .469 .530 .824 .760 .538 .469
gdp_argentina .889 .889 .947 .583 .818 .824 .131 .889 .615 .452 .571 .947 .148 .824
gdp_croatia .583 .583 1 .583 1 .824 .160 .583 .824 .452 .400 .583 .167 .824
gdp_iran .492 .492 .622 .492 .330 .652 .219 .492 .652 .395 .609 .395 .246 .652
gdp_japan .615 .615 .8 .471 .667 .889 .068 .615 .889 .471 .190 .615 .077 .889
global_co2 .929 .929 .754 .458 .421 .754 .167 .754 .463 .458 .293 .754 .179 .846
homeruns .812 .812 .729 .552 .604 .675 .133 .812 .723 .508 .661 .397 .593 .659
jfk_passengers .776 .776 .437 .559 .574 .437 .026 .776 .354 .296 .344 .650 .437 .723
lga_passengers .422 .438 .630 .297 .606 .392 .054 .438 .366 .348 .498 .395 .524 .535
nile 1 1 1 .8 1 1 .04 1 .824 .452 1 1 1 .824
occupancy - - .807 .461 - .750 .107 - - .329 - - - .341
ozone .531 .650 .650 .531 .750 .723 .109 1 .723 .559 .375 1 .113 .723
quality_control_1 1 1 .8 .667 .667 .667 .025 1 .5 .667 .667 1 .571 .667
quality_control_2 1 1 1 .667 1 1 .028 1 .545 .667 1 1 1 .75
quality_control_3 1 1 1 .667 .571 1 .022 1 .667 .667 .286 1 1 .667
quality_control_4 .810 .873 .658 .438 .608 .393 .028 .726 .335 .360 .233 .726 .246 .780
quality_control_5 1 1 1 .5 1 1 .006 1 1 .5 1 1 1 1
rail_lines .846 .846 .846 .349 .966 .537 .2 .846 .423 .349 .571 .846 .205 .537
run_log - - 1 .475 - .792 .139 - - .660 - - - .446
seatbelts .474 .683 .583 .383 .509 .321 .051 .683 .452 .383 .494 .583 .583 .621
shanghai_license .868 .868 .713 .491 .437 .698 .048 .868 .532 .326 .357 .713 .208 .636
uk_coal_employ - - - .495 - .513 .513 - .639 - - - - .513
unemployment_nl .566 .876 .683 .592 .683 .620 .145 .773 .566 .495 .549 .773 .571 .566
us_population 1 .667 .216 .471 .216 .174 .007 .471 .159 .320 .889 .320 .077 .889
usd_isk .785 .657 .609 .678 .504 .661 .079 .657 .489 .282 .390 .657 .513 .489
well_log .279 .534 .796 .797 .822 .818 .069 .555 .149 .517 .923 .485 .724 .237
"""
PUBLISHED_F1: dict[str, dict[str, float | None]] = {
    row.split()[0]: {
        m: (None if v == "-" else float(v)) for m, v in zip(METHODS, row.split()[1:], strict=True)
    }
    for row in _ROWS.strip().splitlines()
}


def load_series(root: Path, name: str) -> np.ndarray:
    """Series ``name`` as float rows ``(n_obs, n_dim)``; missing values are NaN."""
    doc = json.loads((root / "datasets" / name / f"{name}.json").read_text())
    cols = [[np.nan if v is None else float(v) for v in s["raw"]] for s in doc["series"]]
    return np.column_stack(cols)


def load_annotations(root: Path) -> dict[str, dict[str, list[int]]]:
    """``{series: {annotator: [change locations]}}`` (0-based)."""
    return json.loads((root / "annotations.json").read_text())


def available(root: Path) -> list[str]:
    """Names of the annotated series present under ``root`` (sorted)."""
    notes = load_annotations(root)
    return sorted(n for n in notes if (root / "datasets" / n / f"{n}.json").exists())


def _matched(truth: Iterable[int], pred: Iterable[int], margin: int) -> int:
    """How many locations of ``truth`` have their own prediction within ``margin``."""
    left, hits = sorted(set(pred)), 0
    for tau in sorted(set(truth)):
        near = [(abs(tau - x), x) for x in left if abs(tau - x) <= margin]
        if near:
            left.remove(min(near)[1])
            hits += 1
    return hits


def f1_score(
    annotations: Mapping[str, Iterable[int]], pred: Iterable[int], margin: int = 5
) -> float:
    """TCPD's F1 of predicted change locations against several annotators."""
    truths = [set(a) | {0} for a in annotations.values()]
    x = set(pred) | {0}
    union = set().union(*truths)
    precision = _matched(union, x, margin) / len(x)
    recall = float(np.mean([_matched(t, x, margin) / len(t) for t in truths]))
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _segments(cps: Iterable[int], n: int) -> list[tuple[int, int]]:
    cuts = sorted({c for c in cps if 0 < c < n})
    bounds = [0, *cuts, n]
    return list(pairwise(bounds))


def cover_score(annotations: Mapping[str, Iterable[int]], pred: Iterable[int], n: int) -> float:
    """TCPD's segmentation cover of the predicted segmentation, averaged over annotators."""
    mine = _segments(pred, n)
    scores = []
    for truth in annotations.values():
        total = 0.0
        for a0, a1 in _segments(truth, n):
            best = max(
                max(0, min(a1, b1) - max(a0, b0)) / (max(a1, b1) - min(a0, b0)) for b0, b1 in mine
            )
            total += (a1 - a0) * best
        scores.append(total / n)
    return float(np.mean(scores))
