"""A job's attempts on a timeline: the geometry of the status page's SVG (pure).

One lane per attempt, on one time axis from the first submission to the last end (or now):

* **queued** (submitted, waiting for capacity) and **running** spans, side by side;
* the **work lost**: the running time after the attempt's last complete checkpoint, shaded
  over the end of its running span (the attempt's ``workLostSeconds``);
* a **mark** where the attempt ended, named by its failure class (``preempted``,
  ``stockout``, ...) or by how it ended (``succeeded``);
* **checkpoint ticks**: the last complete checkpoint each attempt saved (where its work-lost
  shading begins; labelled with the step the next attempt resumed from) and the record's
  latest checkpoint. The records keep no other checkpoint history.

Everything here is numbers and words; the template only draws what :func:`layout` returns,
so the picture is tested without a browser.

Examples:
    >>> from datetime import UTC, timedelta
    >>> t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    >>> m = timedelta(minutes=1)
    >>> first = AttemptTimes(1, t0, t0 + 5 * m, t0 + 25 * m, "FAILED", "preempted", 300.0)
    >>> second = AttemptTimes(2, t0 + 26 * m, t0 + 30 * m, t0 + 60 * m, "SUCCEEDED", None, 0.0)
    >>> chart = layout([first, second], now=t0 + 90 * m)
    >>> [(s.kind, s.label) for s in chart.lanes[0].spans]
    [('queued', 'queued 5m00s'), ('running', 'running 20m00s'), ('lost', 'work lost 5m00s')]
    >>> chart.lanes[0].mark.label, chart.lanes[1].mark.label
    ('preempted', 'succeeded')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.domain.model.checkpoint import Checkpoint
from shared.domain.policy.checkpoints import FILE_SUFFIXES, step_of
from shared.kernel.regions import is_region
from shared.status.chart import (
    AXIS_HEIGHT,
    RIGHT_PAD,
    WIDTH,
    Legend,
    Scale,
    Tick,
    axis_ticks,
    time_scale,
)
from shared.status.display import duration

LABEL_WIDTH = 132  # the lane titles ("attempt 12", its strategy) left of the plot
LANE_HEIGHT = 58
BAR_TOP = 16  # the spans' top, inside a lane (a checkpoint's words go above them)
BAR_HEIGHT = 20
LEGEND_HEIGHT = 34
# A span narrower than this is drawn this wide, so that a second of queueing still shows.
MIN_WIDTH = 1.5
# Room a span needs for its words inside it; a narrower span says them in its tooltip only.
LABEL_ROOM = 92


@dataclass(frozen=True)
class AttemptTimes:
    """What the timeline needs of one attempt (from its ``attempts/{n}`` document)."""

    number: int
    # When it began waiting for capacity: the Vertex job's creation, on Vertex's clock like
    # ``started_at`` and ``ended_at``.
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    state: str
    error_class: str | None = None
    work_lost_seconds: float | None = None
    strategy: str | None = None
    # (when, label) of the complete checkpoints known to have been saved in this attempt.
    checkpoints: tuple[tuple[datetime, str], ...] = ()
    # The region it was created in (the attempt document's ``location``): AUTO may move a
    # job between regions, so each lane names its own.
    location: str | None = None


@dataclass(frozen=True)
class Span:
    """A bar: ``queued``, ``running`` or ``lost`` (drawn over the end of ``running``)."""

    kind: str
    x: float
    y: float
    width: float
    height: float
    seconds: float
    label: str  # the words, e.g. "running 20m00s": in the tooltip, and inside when it fits
    inside: bool  # whether the words fit inside the bar
    label_x: float
    label_y: float


@dataclass(frozen=True)
class EndMark:
    """Where an attempt ended, and how (a failure class, or ``succeeded``...)."""

    kind: str
    x: float
    y1: float
    y2: float
    label: str
    label_x: float
    label_y: float
    anchor: str  # text-anchor of the label: "start", or "end" near the right edge


@dataclass(frozen=True)
class Lane:
    number: int
    y: float
    title: str
    title_y: float
    subtitle: str
    subtitle_y: float
    spans: tuple[Span, ...]
    mark: EndMark | None
    checkpoints: tuple[Tick, ...]
    region: str = ""
    region_y: float = 0.0


@dataclass(frozen=True)
class Timeline:
    width: int
    height: int
    plot_left: float
    plot_right: float
    start: datetime
    end: datetime
    axis: tuple[Tick, ...]
    lanes: tuple[Lane, ...]
    legend: tuple[Legend, ...] = field(default=())
    summary: str = ""  # one sentence for screen readers (the SVG's <desc>)


def layout(attempts: Sequence[AttemptTimes], now: datetime, width: int = WIDTH) -> Timeline:
    """The geometry of the attempts' timeline; an attempt still open ends at ``now``."""
    ordered = sorted(attempts, key=lambda a: a.number)
    start, end = _bounds(ordered, now)
    left, right = float(LABEL_WIDTH), float(width - RIGHT_PAD)
    x = time_scale(start, end, left, right)
    lanes = tuple(
        _lane(a, AXIS_HEIGHT + i * LANE_HEIGHT, x, now, right) for i, a in enumerate(ordered)
    )
    bottom = AXIS_HEIGHT + len(lanes) * LANE_HEIGHT
    axis = axis_ticks(start, end, x, AXIS_HEIGHT, bottom)
    legend = tuple(
        Legend(kind, left + i * 150, bottom + 12, 28, 12, words, left + i * 150 + 34, bottom + 22)
        for i, (kind, words) in enumerate(
            [
                ("queued", "queued (waiting)"),
                ("running", "running"),
                ("lost", "work lost"),
                ("checkpoint", "checkpoint"),
            ]
        )
    )
    return Timeline(
        width=width,
        height=bottom + LEGEND_HEIGHT,
        plot_left=left,
        plot_right=right,
        start=start,
        end=end,
        axis=axis,
        lanes=lanes,
        legend=legend,
        summary=_summary(ordered),
    )


def _bounds(attempts: Sequence[AttemptTimes], now: datetime) -> tuple[datetime, datetime]:
    times = [
        t
        for a in attempts
        for t in (a.submitted_at, a.started_at, a.ended_at or now)
        if t is not None
    ]
    if not times:
        return now - timedelta(minutes=1), now
    start, end = min(times), max(times)
    return start, max(end, start + timedelta(minutes=1))


def _lane(
    attempt: AttemptTimes,
    top: float,
    x: Scale,
    now: datetime,
    right: float,
) -> Lane:
    bar_y = top + BAR_TOP
    finish = attempt.ended_at or now
    spans: list[Span] = []
    queued_until = attempt.started_at or finish
    if attempt.submitted_at is not None and queued_until >= attempt.submitted_at:
        spans.append(_span("queued", attempt.submitted_at, queued_until, bar_y, x))
    if attempt.started_at is not None and finish >= attempt.started_at:
        spans.append(_span("running", attempt.started_at, finish, bar_y, x))
        lost = attempt.work_lost_seconds or 0.0
        if attempt.ended_at is not None and lost > 0:
            since = max(attempt.started_at, attempt.ended_at - timedelta(seconds=lost))
            shaded = _span("lost", since, attempt.ended_at, bar_y, x)
            running = spans[-1]
            # The running span's words must fit in what the shading leaves uncovered.
            fits = running.width - shaded.width >= LABEL_ROOM
            spans[-1] = dataclasses.replace(running, inside=running.inside and fits)
            spans.append(shaded)
    mark = None
    if attempt.ended_at is not None:
        at = x(attempt.ended_at)
        words = attempt.error_class or attempt.state.lower()
        near_edge = at > right - 90
        mark = EndMark(
            kind=words,
            x=at,
            y1=bar_y - 4,
            y2=bar_y + BAR_HEIGHT + 6,
            label=words,
            label_x=at - 4 if near_edge else at + 4,
            label_y=bar_y + BAR_HEIGHT + 16,
            anchor="end" if near_edge else "start",
        )
    ticks = tuple(_checkpoint(x(when), bar_y, words, right) for when, words in attempt.checkpoints)
    subtitle = (attempt.strategy or "").replace("_", " ").lower()
    return Lane(
        number=attempt.number,
        y=top,
        # Three lines when the lane names a region, two otherwise, within LANE_HEIGHT.
        title=f"attempt {attempt.number}",
        title_y=bar_y + (8 if attempt.location else 14),
        subtitle=subtitle,
        subtitle_y=bar_y + (22 if attempt.location else 30),
        spans=tuple(spans),
        mark=mark,
        checkpoints=ticks,
        region=attempt.location or "",
        region_y=bar_y + 36,
    )


def _checkpoint(at: float, bar_y: float, words: str, right: float) -> Tick:
    # Centred over the tick, unless that would run past the plot's right edge.
    anchor, label_x = ("end", at + 4) if at > right - 40 else ("middle", at)
    return Tick(at, bar_y - 4, bar_y + BAR_HEIGHT + 4, words, label_x, bar_y - 6, anchor)


def _span(kind: str, begin: datetime, end: datetime, y: float, x: Scale) -> Span:
    seconds = (end - begin).total_seconds()
    width = max(round(x(end) - x(begin), 1), MIN_WIDTH)
    label = f"{'work lost' if kind == 'lost' else kind} {duration(seconds)}"
    # The lost span sits over the end of the running one: its words go in its tooltip only,
    # or the two labels would overlap.
    inside = kind != "lost" and width >= LABEL_ROOM
    left = x(begin)
    return Span(kind, left, y, width, BAR_HEIGHT, seconds, label, inside, left + 6, y + 14)


def _summary(attempts: Sequence[AttemptTimes]) -> str:
    if not attempts:
        return "No attempts yet."
    ends = [f"attempt {a.number}: {a.error_class or a.state.lower()}" for a in attempts]
    return f"{len(attempts)} attempt(s). " + "; ".join(ends) + "."


def attempt_times(
    attempts: Sequence[Mapping[str, Any]],
    latest: Checkpoint | None,
    now: datetime,
    current_created: datetime | None = None,
) -> list[AttemptTimes]:
    """The timeline's view of stored attempt documents, with the checkpoints they imply.

    Every span is on Vertex's clock: an ended attempt waited ``queuedSeconds`` before it
    started (or ended), as its accounting says; the attempt still open began waiting when its
    job was created (``current_created``, the record's ``vertexCreateTime``). Only without
    either does the timeline fall back to ``submittedAt``, when flexjobs recorded the job.

    An ended attempt whose ``workLostSeconds`` is less than its running time saved a complete
    checkpoint that long before its end: the one the next attempt resumed from (its step is
    read from the next attempt's ``resumedFrom``). The record's latest checkpoint is placed on
    the attempt that was running when it was saved.
    """
    docs = sorted(attempts, key=lambda a: _count(a.get("attempt")))
    out = []
    for i, doc in enumerate(docs):
        started, ended = _time(doc.get("startedAt")), _time(doc.get("endedAt"))
        waited = _seconds(doc.get("queuedSeconds"))
        began = started or ended
        if began is not None and waited is not None:
            submitted: datetime | None = began - timedelta(seconds=waited)
        elif i == len(docs) - 1 and current_created is not None:
            submitted = current_created
        else:
            submitted = _time(doc.get("submittedAt"))
        lost = _seconds(doc.get("workLostSeconds"))
        running = _seconds(doc.get("runningSeconds")) or 0.0
        marks: list[tuple[datetime, str]] = []
        if ended is not None and started is not None and lost is not None and lost < running:
            following = docs[i + 1].get("resumedFrom") if i + 1 < len(docs) else None
            marks.append((ended - timedelta(seconds=lost), _step_label(following)))
        if latest is not None and started is not None and started <= latest.at <= (ended or now):
            words = f"step {latest.step}" if latest.step is not None else "checkpoint"
            if not any(abs((at - latest.at).total_seconds()) < 1 for at, _ in marks):
                marks.append((latest.at, words))
        out.append(
            AttemptTimes(
                number=_count(doc.get("attempt")),
                submitted_at=submitted,
                started_at=started,
                ended_at=ended,
                state=str(doc.get("state") or "UNKNOWN"),
                error_class=_text(doc.get("errorClass")),
                work_lost_seconds=lost,
                strategy=_text(doc.get("strategy")),
                location=_region(doc.get("location")),
                checkpoints=tuple(sorted(marks)),
            )
        )
    return out


def _region(value: Any) -> str | None:
    return value if is_region(value) else None


def _step_label(uri: Any) -> str:
    """``step 300`` from a checkpoint URI (``…/step-00000300/``, ``…/model_step300.pt``)."""
    if not isinstance(uri, str) or not uri:
        return "checkpoint"
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    for suffix in FILE_SUFFIXES:
        name = name.removesuffix(suffix)
    step = step_of(name)
    return f"step {step}" if step is not None else "checkpoint"


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
