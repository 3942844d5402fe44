"""A deployment's serving capacity on a step chart: the geometry of the status page's SVG (pure).

One plot over the span of the deployment's serving history, from its oldest recorded change
to now:

* the available **Spot** replicas, and the **on-demand** fallback's stacked on them, as
  steps: each change holds until the next one;
* the **required** replicas as a line over them;
* every interval with fewer available replicas than required **shaded** (``short``);
* **marks** where a hedge was sent, where one failed, and where a fallback was undeployed and
  Spot served alone again (see :data:`MARKS`); and where the current phase is HEDGED since a
  time no recorded hedge explains (Spot fell short again during the hold, or a resume took
  over a fallback it found): the history keeps capacities, not phases, so only the current
  phase change is known.

The record keeps at most ``HISTORY_LIMIT`` (40) changes, read as the tick reads them
(:func:`shared.status.display.serving_changes`): the chart never has more steps than that, and
a hand-edited map (mistyped counts, a time that is not one, a cause that is not text) draws
with its values' defaults instead of failing the page. Counts are int32, however large they
are the picture's height is fixed.

Everything here is numbers and words; the template (``serving.svg``) only draws what
:func:`layout` returns, so the picture is tested without a browser, and :attr:`ServingChart.summary`
says it in a sentence for screen readers and for ``flexjobs status``.

Examples:
    >>> from datetime import UTC, timedelta
    >>> t0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    >>> def change(minutes, spot, on_demand, cause=""):
    ...     at = (t0 + timedelta(minutes=minutes)).isoformat()
    ...     return {"at": at, "spot": spot, "onDemand": on_demand, "required": 2, "cause": cause}
    >>> serving = {"history": [change(0, 2, 0), change(5, 0, 0), change(10, 0, 0, "hedge: 2"),
    ...                        change(30, 0, 2), change(60, 2, 0, "restored: gone")]}
    >>> chart = layout(serving, now=t0 + timedelta(minutes=90))
    >>> [(s.spot, s.on_demand, s.short) for s in chart.steps]
    [(2, 0, False), (0, 0, True), (0, 0, True), (0, 2, False), (2, 0, False)]
    >>> [m.label for m in chart.marks]
    ['hedge', 'restored']
    >>> chart.summary.split(";")[1]
    ' fewer than required for 25m00s'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from shared.domain.serving.model import CapacityStep, Phase, ServingState
from shared.domain.serving.rule import HEDGE_CAUSE, HEDGE_FAILED_CAUSE, RESTORED_CAUSE
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
from shared.status.display import duration, gpu_hours, serving_changes, when

#: A replica count's y in the picture.
Height = Callable[[int], float]

LEFT = 64  # the replica counts and the word "replicas", left of the plot
MARK_ROOM = 32  # two rows of mark labels between the axis labels and the plot
PLOT_HEIGHT = 160
LEGEND_HEIGHT = 34
# Room a mark's label needs: a mark closer than this to the one before puts its label on the
# other row, so that a hedge and the restore just after it both stay readable.
LABEL_ROOM = 76
# At most this many replica levels are labelled on the left, whatever the counts.
_LEVELS = 4
#: A change's cause is ``"; "``-joined parts (the capacity change, then the rule's reason); a
#: part that starts with one of these prefixes is marked: (prefix, kind, label). The words
#: are the rule's own (``shared.domain.serving.rule``): the history keeps no other sign of a
#: hedge or a restore. A restore is marked when the fallback is gone ("restored"), the moment
#: RESTORED is notified, not at each of its steps ("restore: traffic back to Spot", ...).
MARKS: Final = (
    (HEDGE_CAUSE, "hedge", "hedge"),
    (HEDGE_FAILED_CAUSE, "failed", "hedge failed"),
    (RESTORED_CAUSE, "restore", "restored"),
)
#: The legend: (kind, words). Spot, on-demand and short are swatches filled as the plot;
#: required is a line, hedge and restore are marks.
KEYS: Final = (
    ("spot", "Spot replicas"),
    ("onDemand", "on-demand replicas"),
    ("required", "required"),
    ("short", "fewer than required"),
    ("hedge", "hedge"),
    ("restore", "restored"),
)


@dataclass(frozen=True)
class Step:
    """One recorded capacity, from its change to the next one (or the chart's end)."""

    begin: datetime
    end: datetime
    spot: int
    on_demand: int
    required: int
    x: float
    width: float
    spot_y: float
    spot_height: float
    on_demand_y: float
    on_demand_height: float
    label: str  # the tooltip: when, how long, the counts and the change's cause

    @property
    def short(self) -> bool:
        """Fewer replicas served than required (the step is shaded)."""
        return self.spot + self.on_demand < self.required


@dataclass(frozen=True)
class HedgeMark:
    """A hedge, a failed hedge or a restore, at the change that recorded it."""

    kind: str
    at: datetime
    x: float
    y1: float
    y2: float
    label: str
    title: str  # the tooltip: when, and the change's cause
    label_x: float
    label_y: float
    anchor: str  # text-anchor of the label: "start", or "end" near the right edge


@dataclass(frozen=True)
class Level:
    """A replica count on the left, with its grid line across the plot."""

    y: float
    label: str


@dataclass(frozen=True)
class ServingChart:
    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    start: datetime
    end: datetime
    axis: tuple[Tick, ...]
    levels: tuple[Level, ...]
    steps: tuple[Step, ...]
    # The required replicas as an SVG path (numbers and the letters M, H, V only).
    required_path: str
    marks: tuple[HedgeMark, ...]
    legend: tuple[Legend, ...]
    summary: str  # for screen readers (the SVG's <desc>) and the CLI


def decode(serving: Any) -> ServingState | None:
    """The ``serving`` map as the tick reads it, or None when it names no Spot model or no
    time (it was never written by the tick) or is not a map."""
    return ServingState.decode(serving) if isinstance(serving, Mapping) else None


def layout(serving: Any, now: datetime, width: int = WIDTH) -> ServingChart:
    """The geometry of a deployment's serving-capacity chart (``serving`` as stored)."""
    stored: Mapping[str, Any] = serving if isinstance(serving, Mapping) else {}
    # Stored in the order the tick appended them; sorted (stably) so that a hand-edited
    # history still draws left to right.
    changes = sorted(serving_changes(stored), key=lambda c: c.at)
    start, end = _bounds(changes, now)
    left, right = float(LEFT), float(width - RIGHT_PAD)
    top = float(AXIS_HEIGHT + MARK_ROOM)
    bottom = top + PLOT_HEIGHT
    x = time_scale(start, end, left, right)
    ceiling = max([1, *(max(c.capacity.serving, c.capacity.required) for c in changes)])

    def y(replicas: int) -> float:
        return round(bottom - replicas * PLOT_HEIGHT / ceiling, 1)

    # Each capacity holds until the next change; the newest until the chart's end.
    ends = [c.at for c in changes[1:]] + [end] if changes else []
    steps = tuple(_step(c, until, x, y) for c, until in zip(changes, ends, strict=True))
    marks = _place(_events(changes, decode(stored), start, end), x, right, bottom)
    legend_y = bottom + 12
    legend = tuple(
        Legend(kind, left + i * 140, legend_y, 28, 12, words, left + i * 140 + 34, legend_y + 10)
        for i, (kind, words) in enumerate(KEYS)
    )
    return ServingChart(
        width=width,
        height=int(bottom + LEGEND_HEIGHT),
        plot_left=left,
        plot_right=right,
        plot_top=top,
        plot_bottom=bottom,
        start=start,
        end=end,
        axis=axis_ticks(start, end, x, AXIS_HEIGHT, bottom),
        levels=tuple(Level(y(n), str(n)) for n in _levels(ceiling)),
        steps=steps,
        required_path=_required_path(steps, y),
        marks=marks,
        legend=legend,
        summary=_summary(steps, marks),
    )


def _bounds(changes: list[CapacityStep], now: datetime) -> tuple[datetime, datetime]:
    """From the oldest change to now (or to the newest change, should the record be ahead of
    this clock), at least a minute."""
    if not changes:
        return now - timedelta(minutes=1), now
    end = max(now, changes[-1].at)
    return min(changes[0].at, end - timedelta(minutes=1)), end


def _levels(ceiling: int) -> list[int]:
    """0 up to ``ceiling`` in round steps, ``ceiling`` itself labelled (the top of the plot),
    at most ``_LEVELS + 1`` of them whatever the counts (``ceiling`` may be 2**31 - 1).

    Examples:
        >>> _levels(2), _levels(10), _levels(2**31 - 1)[-2:]
        ([0, 1, 2], [0, 3, 6, 10], [1610612736, 2147483647])
    """
    step = max(1, -(-ceiling // _LEVELS))
    values = list(range(0, ceiling, step))
    # A round level just under the top would crowd its label: the top's says it.
    if len(values) > 1 and ceiling - values[-1] < step / 2:
        values.pop()
    return [*values, ceiling]


def _step(change: CapacityStep, until: datetime, x: Scale, y: Height) -> Step:
    cap = change.capacity
    left = x(change.at)
    seconds = (until - change.at).total_seconds()
    words = (
        f"{when(change.at)} for {duration(seconds)}: {cap.spot} Spot + {cap.on_demand} on-demand"
        f" of {cap.required} required"
    )
    return Step(
        begin=change.at,
        end=until,
        spot=cap.spot,
        on_demand=cap.on_demand,
        required=cap.required,
        x=left,
        width=max(round(x(until) - left, 1), 0.0),
        spot_y=y(cap.spot),
        spot_height=round(y(0) - y(cap.spot), 1),
        on_demand_y=y(cap.serving),
        on_demand_height=round(y(cap.spot) - y(cap.serving), 1),
        label=f"{words} ({change.cause})" if change.cause else words,
    )


def _required_path(steps: tuple[Step, ...], y: Height) -> str:
    """The required replicas as steps: across each step, up or down at each change."""
    if not steps:
        return ""
    level = y(steps[0].required)
    parts = [f"M{steps[0].x},{level}"]
    for step in steps:
        if y(step.required) != level:
            level = y(step.required)
            parts.append(f"V{level}")
        parts.append(f"H{round(step.x + step.width, 1)}")
    return " ".join(parts)


def mark_kind(cause: str) -> tuple[str, str] | None:
    """(kind, label) of the mark a change's cause calls for (see :data:`MARKS`), or None.

    Examples:
        >>> mark_kind("serving 2+0 -> 0+0 of 2 (Spot+on-demand); hedge: 2 on-demand replica(s)")
        ('hedge', 'hedge')
        >>> mark_kind("restore: traffic back to Spot") is None
        True
    """
    for part in cause.split("; "):
        for prefix, kind, label in MARKS:
            if part.startswith(prefix):
                return kind, label
    return None


#: A mark before it is placed: when, its kind, its label and the cause that called for it.
_Event = tuple[datetime, str, str, str]


def _events(
    changes: list[CapacityStep], state: ServingState | None, start: datetime, end: datetime
) -> list[_Event]:
    found = [(c.at, *marked, c.cause) for c in changes if (marked := mark_kind(c.cause))]
    if state is not None and state.phase is Phase.HEDGED and state.since is not None:
        since = state.since
        explained = any(abs((at - since).total_seconds()) < 1 for at, *_ in found)
        if start <= since <= end and not explained:
            found.append((since, "hedge", "hedged", "the phase is HEDGED since then"))
    return sorted(found, key=lambda event: event[0])


def _place(events: list[_Event], x: Scale, right: float, bottom: float) -> tuple[HedgeMark, ...]:
    marks: list[HedgeMark] = []
    row = 0
    for at, kind, label, cause in events:
        where = x(at)
        row = 1 - row if marks and where - marks[-1].x < LABEL_ROOM else 0
        near_edge = where > right - LABEL_ROOM
        label_y = AXIS_HEIGHT + 12 + row * 14
        marks.append(
            HedgeMark(
                kind=kind,
                at=at,
                x=where,
                y1=label_y + 3,
                y2=bottom,
                label=label,
                title=f"{label} at {when(at)}: {cause}",
                label_x=where - 4 if near_edge else where + 4,
                label_y=label_y,
                anchor="end" if near_edge else "start",
            )
        )
    return tuple(marks)


def _summary(steps: tuple[Step, ...], marks: tuple[HedgeMark, ...]) -> str:
    if not steps:
        return "No serving-capacity change recorded yet."
    last = steps[-1]
    span = (last.end - steps[0].begin).total_seconds()
    short = sum((s.end - s.begin).total_seconds() for s in steps if s.short)
    words = (
        f"{len(steps)} change(s) over {duration(span)}, now {last.spot} Spot and"
        f" {last.on_demand} on-demand of {last.required} required replicas;"
        f" fewer than required for {duration(short)}"
    )
    events = [f"{m.label} at {when(m.at)}" for m in marks]
    return words + ("; " + ", ".join(events) if events else "") + "."


def availability_facts(state: ServingState) -> list[tuple[str, str]]:
    """Availability while followed, against the objective when there is one: the share of
    time served, and the error budget (the time the objective allows to be lost so far, as
    SRE practice keeps one) with how much of it is spent."""
    followed = state.followed_seconds
    if followed <= 0:
        return []
    shares = (
        ("at least one replica", 1 - state.dark_seconds / followed, state.dark_seconds),
        ("all required", 1 - state.short_seconds / followed, state.short_seconds),
    )
    objective = state.objective
    targets = (
        objective.at_least_one if objective else None,
        objective.all_required if objective else None,
    )
    out = []
    for (what, share, lost), target in zip(shares, targets, strict=True):
        text = f"{share:.3%} of {duration(followed)}"
        if target is not None:
            allowed = (1 - target) * followed
            verdict = "met" if share >= target else "missed"
            text += (
                f"; objective {target:.2%} {verdict}; budget {duration(lost)} of"
                f" {duration(allowed)} lost"
            )
        out.append((what, text))
    return out


def serving_facts(serving: Any, now: datetime) -> list[tuple[str, str]]:
    """The serving state's fields worth a line, in words, for the page and ``flexjobs
    status``: the phase and since when, the hedges, the fallback, the call in flight, the
    time short of replicas and the node-hours; empty when the tick never recorded any."""
    state = decode(serving)
    if state is None:
        return []
    phase = state.phase.value
    if state.since is not None:
        phase += f" since {when(state.since)} ({duration((now - state.since).total_seconds())})"
    facts = [
        ("phase", phase),
        ("intent", state.intent.value.lower()),
        (
            "policy",
            f"{state.policy.label(state.required)}" + (f" ({state.why})" if state.why else ""),
        ),
        *availability_facts(state),
        ("hedges", str(state.hedges)),
    ]
    for ours, what in ((state.floor, "on-demand floor"), (state.fallback, "fallback")):
        if ours is not None:
            replicas = f"{ours.replicas} replica(s)"
            facts.append((what, f"{ours.id or 'being deployed'} ({replicas})"))
    call = state.call
    if call is not None:
        operation = call.operation or ("answer lost" if call.unknown else "no operation name yet")
        facts.append(("call in flight", f"{call.kind.value} since {when(call.at)}: {operation}"))
    facts += [
        ("time short of replicas", duration(state.short_seconds)),
        (
            "node-hours",
            f"Spot {gpu_hours(state.spot_node_seconds)},"
            f" on-demand {gpu_hours(state.on_demand_node_seconds)}",
        ),
    ]
    return facts
