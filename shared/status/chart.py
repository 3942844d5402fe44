"""What the status page's SVG charts share (pure): the width, the time scale, the time axis
along the top, the legend's keys and compact offsets.

A job's attempts (:mod:`shared.status.timeline`) and a deployment's serving capacity
(:mod:`shared.status.serving_chart`) are both read against time, so both draw the same axis
the same way: offsets from the start (``+0``, ``+15m``, ``+2h``), round steps, at most
:data:`MAX_INTERVALS` of them.

Examples:
    >>> from datetime import UTC, timedelta
    >>> t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    >>> x = time_scale(t0, t0 + timedelta(hours=1), 100.0, 700.0)
    >>> x(t0 + timedelta(minutes=30))
    400.0
    >>> [t.label for t in axis_ticks(t0, t0 + timedelta(hours=1), x, 30, 100)]
    ['+0', '+10m', '+20m', '+30m', '+40m', '+50m', '+1h']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH = 960
RIGHT_PAD = 24
AXIS_HEIGHT = 30  # the axis labels, above the plot
# Axis steps, in seconds: the first giving at most this many intervals is used.
STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
MAX_INTERVALS = 8

#: A time's x in the picture.
Scale = Callable[[datetime], float]


@dataclass(frozen=True)
class Tick:
    """A vertical tick with words: a checkpoint on a lane, or a time on the axis."""

    x: float
    y1: float
    y2: float
    label: str
    label_x: float
    label_y: float
    anchor: str = "middle"  # text-anchor of the label: kept inside the picture at its edges


@dataclass(frozen=True)
class Legend:
    """One key of the legend: a swatch drawn like ``kind`` and its words."""

    kind: str
    x: float
    y: float
    width: float
    height: float
    label: str
    label_x: float
    label_y: float

    @property
    def mid_x(self) -> float:
        """Where a tick-shaped key (a checkpoint's, a mark's) is drawn."""
        return self.x + self.width / 2

    @property
    def mid_y(self) -> float:
        """Where a line-shaped key (the required replicas') is drawn."""
        return self.y + self.height / 2

    @property
    def bottom(self) -> float:
        return self.y + self.height


def time_scale(start: datetime, end: datetime, left: float, right: float) -> Scale:
    """``start`` at ``left``, ``end`` at ``right`` (a span under a second reads as one)."""
    per_second = (right - left) / max((end - start).total_seconds(), 1.0)

    def x(at: datetime) -> float:
        return round(left + (at - start).total_seconds() * per_second, 1)

    return x


def axis_ticks(
    start: datetime, end: datetime, x: Scale, top: float, bottom: float
) -> tuple[Tick, ...]:
    """Grid lines from just above ``top`` down to ``bottom``, labelled above ``top`` with
    their offset from ``start``; at most ``MAX_INTERVALS + 1`` of them, however long the span
    (past the longest step, a week, the step grows so the count stays bounded)."""
    span = (end - start).total_seconds()
    step = next((s for s in STEPS if span / s <= MAX_INTERVALS), None)
    if step is None:
        step = STEPS[-1] * -(-int(span) // (STEPS[-1] * MAX_INTERVALS))
    ticks = []
    offset = 0
    while offset <= span:
        label = "+0" if offset == 0 else "+" + compact(offset)
        at = x(start + timedelta(seconds=offset))
        ticks.append(Tick(at, top - 6, bottom, label, at, top - 10))
        offset += step
    return tuple(ticks)


def compact(seconds: int) -> str:
    """``15m``, ``2h``, ``1d``, ``1h30m``: an axis label.

    Examples:
        >>> compact(900), compact(5400), compact(86400), compact(30)
        ('15m', '1h30m', '1d', '0')
    """
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return "".join(parts) or "0"
