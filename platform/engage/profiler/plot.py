"""The profile as an SVG picture: stage times per step, and each remedy's predicted speedup.

Plain SVG text (no plotting library): two horizontal bar charts any browser shows.
"""

from __future__ import annotations

from html import escape

from engage.profiler.verdict import Remedy, StageTimes

_W, _LABEL, _ROW = 720, 220, 22


def _bars(
    title: str, rows: list[tuple[str, float, str]], top: int, colour: str
) -> tuple[list[str], int]:
    """SVG elements of one bar chart starting at ``top``; returns them and the next top."""
    out = [f'<text x="10" y="{top + 16}" font-weight="bold">{escape(title)}</text>']
    peak = max((v for _, v, _ in rows), default=0.0) or 1.0
    span = _W - _LABEL - 120
    for i, (label, value, text) in enumerate(rows):
        y = top + 28 + i * _ROW
        width = max(1.0, span * value / peak)
        out += [
            f'<text x="10" y="{y + 14}">{escape(label)}</text>',
            f'<rect x="{_LABEL}" y="{y + 2}" width="{width:.1f}" height="{_ROW - 6}" fill="{colour}"/>',
            f'<text x="{_LABEL + width + 6:.1f}" y="{y + 14}">{escape(text)}</text>',
        ]
    return out, top + 40 + len(rows) * _ROW


def render_svg(times: StageTimes, fixes: list[Remedy], verdict: str, title: str) -> str:
    """The SVG document of a profile."""
    ms = 1000.0
    stages = [
        ("storage (cold)", times.storage, f"{times.storage * ms:.2f} ms"),
        ("cache", times.cache, f"{times.cache * ms:.2f} ms"),
        ("preprocess (1 CPU)", times.preprocess, f"{times.preprocess * ms:.2f} ms"),
        ("compute", times.compute, f"{times.compute * ms:.2f} ms"),
    ]
    if times.preprocess_gpu is not None:
        stages.insert(
            3, ("preprocess (GPU)", times.preprocess_gpu, f"{times.preprocess_gpu * ms:.2f} ms")
        )
    body, top = _bars(f"time per step of {times.batch} windows", stages, 40, "#4878a8")
    speed = [
        (r.name, r.speedup or 0.0, "n/a" if r.speedup is None else f"{r.speedup:.2f}x")
        for r in fixes
    ]
    more, top = _bars("predicted speedup of each remedy", speed, top, "#58a058")
    head = f'<text x="10" y="22" font-size="16">{escape(title)}: {escape(verdict)}</text>'
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{top}" '
        f'font-family="sans-serif" font-size="12">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join([head, *body, *more])
        + "\n</svg>\n"
    )
