"""The plan's plot as a self-contained SVG: predicted efficiency and cost over worker counts.

matplotlib is not one of engage's dependencies, and two line charts need none: the SVG is
written directly (log2 worker axis, a dashed ideal line, the chosen configuration marked), so
any browser and MLflow's artifact viewer show it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

_W, _H = 900, 380
_PANEL_W, _PANEL_H = 360, 260
_LEFT, _TOP = 70, 60
_GAP = 90


def _x(n: int, lo: int, hi: int, x0: float) -> float:
    span = math.log2(hi) - math.log2(lo) or 1.0
    return x0 + (math.log2(n) - math.log2(lo)) / span * _PANEL_W


def _y(v: float, top: float, y0: float) -> float:
    return y0 + _PANEL_H - (v / top if top > 0 else 0.0) * _PANEL_H


def _panel(
    x0: float,
    title: str,
    unit: str,
    workers: Sequence[int],
    series: dict[str, Sequence[float]],
    top: float,
    mark: int | None,
) -> list[str]:
    """One chart: axes, ticks, a polyline per series, the chosen worker count marked."""
    lo, hi = min(workers), max(workers)
    y0 = _TOP
    parts = [
        f'<text x="{x0 + _PANEL_W / 2}" y="{y0 - 20}" text-anchor="middle" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<rect x="{x0}" y="{y0}" width="{_PANEL_W}" height="{_PANEL_H}" fill="none" stroke="#999"/>',
    ]
    for k in range(5):
        v = top * k / 4
        y = _y(v, top, y0)
        parts.append(f'<line x1="{x0}" x2="{x0 + _PANEL_W}" y1="{y}" y2="{y}" stroke="#eee"/>')
        label = f"${v:.3g}" if unit == "$" else f"{v:.3g}{unit}"
        parts.append(f'<text x="{x0 - 6}" y="{y + 4}" text-anchor="end">{label}</text>')
    for n in workers:
        x = _x(n, lo, hi, x0)
        parts.append(f'<text x="{x}" y="{y0 + _PANEL_H + 16}" text-anchor="middle">{n}</text>')
    parts.append(
        f'<text x="{x0 + _PANEL_W / 2}" y="{y0 + _PANEL_H + 36}" text-anchor="middle">workers</text>'
    )
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    for i, (label, values) in enumerate(series.items()):
        dash = ' stroke-dasharray="6 4"' if label.startswith("ideal") else ""
        colour = "#777" if dash else colours[i % len(colours)]
        points = " ".join(
            f"{_x(n, lo, hi, x0):.1f},{_y(v, top, y0):.1f}"
            for n, v in zip(workers, values, strict=True)
        )
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        ly = y0 + 14 + 16 * i
        parts.append(f'<text x="{x0 + 8}" y="{ly}" fill="{colour}">{escape(label)}</text>')
    if mark is not None:
        x = _x(mark, lo, hi, x0)
        parts.append(
            f'<line x1="{x}" x2="{x}" y1="{y0}" y2="{y0 + _PANEL_H}" stroke="#ff7f0e" '
            'stroke-width="2"/>'
        )
    return parts


def plan_svg(
    title: str,
    workers: Sequence[int],
    efficiency: dict[str, Sequence[float]],
    cost: dict[str, Sequence[float]],
    chosen: int | None,
) -> str:
    """The SVG text: efficiency (%) per series on the left, cost per series on the right,
    the chosen worker count as an orange line on both."""
    eff = {k: [100 * v for v in vals] for k, vals in efficiency.items()}
    eff_top = max(100.0, *(max(v) for v in eff.values()))
    cost_top = max(max(v) for v in cost.values()) * 1.1 or 1.0
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
        *_panel(_LEFT, "scaling efficiency", "%", workers, eff, eff_top, chosen),
        *_panel(_LEFT + _PANEL_W + _GAP, "cost to train", "$", workers, cost, cost_top, chosen),
        "</svg>",
    ]
    return "\n".join(body) + "\n"
