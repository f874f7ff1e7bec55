"""Server-rendered SVG pictures: the CEI timeline, budget bars, completeness over time.

Pure functions of the records they draw (no I/O, no clock): a test can count the
rectangles and read their colours. Text is escaped here (``html.escape``), and the
result is marked safe for Jinja only by the caller.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from html import escape

from proxy.store import Cei, ChrononFigures

#: Fill of an EI window by state: missed is red (issue 20), captured green, pending grey.
STATE_FILL = {"captured": "#2e7d32", "missed": "#c62828", "pending": "#9e9e9e"}

_WIDTH = 920
_LABEL = 250
_LANE = 16
_GAP = 10


def _short(feed_id: int, name: str) -> str:
    """``feed 12 · news.xml``: the id and the last part of the URL's path, for a lane label."""
    tail = name.split("?")[0].rstrip("/").rsplit("/", 1)[-1][:18]
    return f"feed {feed_id} · {tail}" if tail and tail != name else f"feed {feed_id}"


def _ticks(lo: int, hi: int, count: int = 6) -> list[int]:
    span = max(hi - lo, 1)
    step = max(1, round(span / count))
    return list(range(lo, hi + 1, step))


def timeline_svg(
    ceis: Sequence[Cei],
    feed_names: dict[int, str],
    start_of: Callable[[int], dt.datetime],
) -> str:
    """Each CEI a row: one lane per EI, its window ``[start, finish]`` as a bar coloured by its
    state, a black mark at the chronon that captured it. The x axis is chronons, labelled
    with their UTC start times. Rows in the given order (the store's: newest first)."""
    if not ceis:
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="420" height="40" role="img" '
                'aria-label="no CEIs"><text x="10" y="25">No CEIs yet.</text></svg>')
    lo = min(ei.start for c in ceis for ei in c.eis) if any(c.eis for c in ceis) else 0
    hi = max(ei.finish + 1 for c in ceis for ei in c.eis) if any(c.eis for c in ceis) else 1
    plot = _WIDTH - _LABEL - 40  # room for the last tick label
    scale = plot / max(hi - lo, 1)

    def x(chronon: float) -> float:
        return _LABEL + (chronon - lo) * scale

    parts: list[str] = []
    y = 10
    for cei in ceis:
        rows = max(len(cei.eis), 1)
        height = rows * _LANE
        fill = STATE_FILL.get(cei.state, "#9e9e9e")
        parts.append(f'<g class="cei cei-{escape(cei.state)}" data-cei="{escape(cei.id)}" '
                     f'data-eis="{len(cei.eis)}">')
        parts.append(f'<rect x="2" y="{y - 2}" width="{_WIDTH - 4}" height="{height + 4}" '
                     f'fill="none" stroke="{fill}" stroke-width="1" rx="3"/>')
        parts.append(f'<text x="8" y="{y + 11}" font-size="11" fill="{fill}">'
                     f'{escape(cei.id[:14])} · {escape(cei.state)}</text>')
        for lane, ei in enumerate(cei.eis):
            top = y + lane * _LANE + 2
            name = feed_names.get(ei.feed_id, f"feed {ei.feed_id}")
            width = max((ei.finish + 1 - ei.start) * scale, 2.0)
            ei_fill = STATE_FILL.get(ei.state, "#9e9e9e")
            parts.append(
                f'<rect class="ei ei-{escape(ei.state)}" x="{x(ei.start):.1f}" y="{top}" '
                f'width="{width:.1f}" height="{_LANE - 4}" fill="{ei_fill}" fill-opacity="0.75">'
                f'<title>{escape(name)}: chronons {ei.start}–{ei.finish} ({escape(ei.state)})</title></rect>')
            parts.append(f'<text x="{_LABEL - 6}" y="{top + 10}" font-size="10" text-anchor="end" '
                         f'fill="#333">{escape(_short(ei.feed_id, name))}</text>')
            if ei.captured_chronon is not None:
                cx = x(ei.captured_chronon + 0.5)
                parts.append(
                    f'<path class="capture" d="M{cx:.1f} {top - 1} l4 {(_LANE - 2) / 2} l-4 {(_LANE - 2) / 2} '
                    f'l-4 -{(_LANE - 2) / 2} z" fill="#111"><title>captured at chronon '
                    f'{ei.captured_chronon}</title></path>')
        parts.append("</g>")
        y += height + _GAP
    axis_y = y + 4
    parts.append(f'<line x1="{_LABEL}" y1="{axis_y}" x2="{_WIDTH - 10}" y2="{axis_y}" stroke="#555"/>')
    for tick in _ticks(lo, hi):
        tx = x(tick)
        label = start_of(tick).strftime("%H:%M:%S")
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y}" x2="{tx:.1f}" y2="{axis_y + 4}" stroke="#555"/>'
                     f'<text x="{tx:.1f}" y="{axis_y + 16}" font-size="10" text-anchor="middle">'
                     f'{tick} · {label}</text>')
    total = axis_y + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{_WIDTH}" height="{total}" '
            f'viewBox="0 0 {_WIDTH} {total}" role="img" aria-label="CEI timeline">'
            f'{"".join(parts)}</svg>')


def budget_svg(chronons: Sequence[ChrononFigures]) -> str:
    """Probes used (bar) against the budget (outline) per recorded chronon, oldest left."""
    width, height = 920, 140
    if not chronons:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" role="img" '
                'aria-label="no chronons"><text x="10" y="25">No chronon recorded yet.</text></svg>')
    top = max(max(c.budget for c in chronons), 1)
    bar = (width - 40) / len(chronons)
    parts = []
    for i, c in enumerate(chronons):
        bx = 30 + i * bar
        full = (height - 30) * c.budget / top
        used = (height - 30) * c.used / top
        parts.append(
            f'<rect x="{bx:.1f}" y="{height - 20 - full:.1f}" width="{max(bar - 1, 1):.1f}" height="{full:.1f}" '
            f'fill="none" stroke="#90a4ae"/><rect class="used" x="{bx:.1f}" y="{height - 20 - used:.1f}" '
            f'width="{max(bar - 1, 1):.1f}" height="{used:.1f}" fill="#1565c0"><title>chronon {c.chronon}: '
            f'{c.used} of {c.budget} probes</title></rect>')
    parts.append(f'<text x="30" y="{height - 4}" font-size="10">chronon {chronons[0].chronon}</text>'
                 f'<text x="{width - 10}" y="{height - 4}" font-size="10" text-anchor="end">'
                 f'chronon {chronons[-1].chronon}</text><text x="2" y="14" font-size="10">{top}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="budget" width="{width}" height="{height}" '
            f'role="img" aria-label="budget used per chronon">{"".join(parts)}</svg>')


def completeness_svg(steps: Sequence[tuple[int, int, int]]) -> str:
    """Cumulative completeness (captured / resolved) after each chronon that resolved CEIs."""
    width, height = 920, 140
    if not steps:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" role="img" '
                'aria-label="no resolved CEIs"><text x="10" y="25">No CEI resolved yet.</text></svg>')
    lo, hi = steps[0][0], max(steps[-1][0], steps[0][0] + 1)
    captured = resolved = 0
    points = []
    for chronon, cap, miss in steps:
        captured += cap
        resolved += cap + miss
        px = 30 + (width - 40) * (chronon - lo) / (hi - lo)
        py = 10 + (height - 30) * (1 - captured / resolved)
        points.append(f"{px:.1f},{py:.1f}")
    last = captured / resolved
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="completeness" width="{width}" height="{height}" '
            f'role="img" aria-label="completeness over time">'
            f'<line x1="30" y1="10" x2="{width - 10}" y2="10" stroke="#eee"/>'
            f'<text x="2" y="14" font-size="10">1.0</text><text x="2" y="{height - 20}" font-size="10">0.0</text>'
            f'<polyline fill="none" stroke="#2e7d32" stroke-width="2" points="{" ".join(points)}"/>'
            f'<text x="{width - 10}" y="{height - 4}" font-size="10" text-anchor="end">'
            f'now {last:.3f} ({captured} of {resolved}) · chronon {steps[-1][0]}</text></svg>')
