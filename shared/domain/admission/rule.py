"""The admission rule: which waiting workloads to create now. Pure: the caller passes the
queues, what is admitted, the project's quota and the waiting workloads, and gets a plan back;
the tick calls it on every release of capacity and every minute.

**The order.** Priority first (a higher number first); then fair share between queues, lowest
first; then arrival within a queue (then the request id, so the order is total). A queue's
fair share is ``(decayed usage + GPUs it holds now) / weight``:

- the decayed usage (:func:`decayed_usage`) is Kueue's admission fair sharing: what the queue
  used recently, forgiven with a half-life, so a team that just had the pool to itself waits
  behind one that had none;
- the GPUs it holds now count as well, and grow as this pass admits (Kueue's entry penalty):
  decayed usage lags by a half-life, so without them the first queue of a pass would take all
  that is free. Over a contended day each queue then holds about its weight's share.

**The blocking rule** (one rule, stated once). Workloads are taken one at a time in that
order, the order recomputed after each admission (a queue's share grows as it admits).

1. A workload that fits every limit (:func:`~.quota.shortfalls`) is admitted.
2. One that does not fit is *held*: it waits, its queue admits nothing more in this pass
   (a queue is strictly first-in first-out within a priority, as Kueue's ``StrictFIFO``: a
   stream of small jobs can never starve a large one behind it), and its demand is charged for
   the rest of the pass against every later workload of lower priority, in any queue. A
   lower-priority workload is then admitted only if it fits beside what the held one waits
   for: it can never take the capacity a higher priority is waiting for (no priority
   inversion), but it may use capacity the held one could not use anyway (another region,
   accelerator or pool, or another cohort's quota when the project's quota is not short).
3. A later workload of the *same* priority in another queue sees the held demand charged too,
   with two exceptions; in both it must fit with nothing held charged but the higher
   priorities' (:func:`~.quota.shortfalls`):

   - it fits within its own queue's nominal quota (it borrows nothing): a queue's nominal is
     its own, and holding it idle for another queue's large job would turn fair share into
     first come, first served;
   - or, admitted, its queue's fair share stays at or below the held queue's with the held
     workload admitted: it catches up with the held queue, never overtakes it. The order
     would have given it those GPUs next anyway once the held one went in; meanwhile they do
     not sit idle.

   This is Kueue's ``BestEffortFIFO`` between queues, bounded by fair share. It can delay a
   large job, never starve it: the queues that pass it hold more, so their decayed usage, and
   their share, grow until they no longer pass, while the held queue's share falls, and the
   held demand is charged against them again.

   Measured (``./dev bench admission``): always charging the held demand against the same
   priority left a large head's GPUs idle and the smaller jobs' queues starved of their
   share's gaps (utilisation 92 %); never charging it let a queue of one-GPU trials fill every
   gap and take a third more than its weight. This rule keeps each share within 10 % of its
   weight at the least idle of the three.

4. **Backfill** (EASY backfilling, as Slurm's and Kueue's peers schedule HPC queues). A
   workload the rules above keep waiting, its own queue's behind a held head included, is
   admitted when all of these hold:

   - it fits with nothing held charged;
   - it keeps every held workload's *shadow*: the time the held one fits at the latest,
     were every admitted job to hold its GPUs for all of its own limit (the caller's
     releases: a request's ``maxWaitDuration`` plus ``scheduling.timeout``, both of which
     Vertex enforces), every held workload of a higher priority to hold its own from now
     until its shadow plus its limit, and a retry's backoff to run its course
     (:attr:`Workload.not_before`). It keeps it in either of two ways:

     - it declares how long it may hold its GPUs (``limit_seconds``), and that ends by the
       shadow;
     - or, whatever its limit (none included), the held one still fits at its shadow beside
       it and beside all that this pass admitted and that may still hold its GPUs then: it
       takes only what the releases due by the shadow free beyond the held one's demand
       (EASY's *extra* GPUs; the held one's *room*).

     So a backfill never delays a held workload past the start the declared limits promise
     it; for a head whose queue preempts, the shadow is now and it leaves no room (its
     victims' GPUs come back at its asking, and a job just created is never a victim), so
     nothing backfills before it;
   - no waiting workload of a higher priority fits with nothing held charged (it would be
     an inversion: that one could go first, and did not only because it would delay a held
     one);
   - it fits within its own queue's nominal quota: it borrows nothing. Measured, letting it
     borrow left a team of short trials 25 % above its weight's share (seed 1), and letting
     it borrow as far as rule 3's catch-up 11.7 % (seed 9).

   Only when the caller says what time it is and when the admitted jobs give their GPUs
   back at the latest (:attr:`Standing.now`, :attr:`Standing.releases`): the estimate of
   starts replays the rule without backfill, so an estimate is never earlier for it.

   Measured (``./dev bench admission``, limits 1 to ~5 times the run and a third at the
   default eight days, seeds 25, 1, 2 and 3, no hint): utilisation 93.8-94.3 % without
   backfill; 94.5-95.8 % when a backfill had to end by the shadow (GPUs kept idle for a
   held head cost 3.2-4.6 points, the tick's lag 0.9-1.0) and seed 1's shares 12.4 % off
   their weights; 95.7-96.4 % with the room as well (kept idle 2.7-3.4 points), no
   inversion, shares within 8.4 %. With hints, seed 1's are 15 % off: team-c's one-GPU
   trials, which backfill took 7 GPU-hours for and rule 3's catch-up 43; without the
   catch-up they are still 11 % off, and utilisation falls to 94.6-95.5 %.

A workload that could never be admitted (larger than its queue with all it could borrow, or
than the project's quota) is set aside as inadmissible, never held: holding it would block
its queue for ever. Intake refuses those (:func:`~.demand.check_request`); this covers a
queue file changed since.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Final

from shared.domain.admission.config import Queue, Queues, Resource
from shared.domain.admission.quota import (
    Ceiling,
    Demand,
    Shortfall,
    Usage,
    add,
    out_of_reach,
    shortfalls,
)

_NO_USAGE: Final[Mapping[str, int]] = MappingProxyType({})


@dataclass(frozen=True)
class Workload:
    """A request waiting for admission: its queue, its resolved priority, when it arrived
    and its demand."""

    request_id: str
    queue: str
    priority: int
    arrival: datetime
    demand: Demand
    #: The longest one admission may hold its GPUs, in seconds (None: not known): what
    #: backfill (rule 4) needs of it.
    limit_seconds: float | None = None
    #: A retry waiting in its queue again may not start before its backoff is over: until
    #: then (with :attr:`Standing.now`) it is held, as a head that does not fit.
    not_before: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "demand", MappingProxyType(dict(self.demand)))


@dataclass(frozen=True)
class Release:
    """An admitted job's GPUs, and when it has given them back at the latest (its admission
    plus its limit; a past time: any moment now)."""

    at: datetime
    queue: str
    demand: Demand


@dataclass(frozen=True)
class Standing:
    """What admission reads besides the queues: the GPUs admitted per queue and resource,
    the project's quota, and each queue's decayed usage (in GPUs, :func:`decayed_usage`).
    With ``now``, the rule backfills (rule 4) against ``releases``: when each admitted job
    gives its GPUs back at the latest, as far as its limit bounds it; an admitted job in none
    of them never does. No margin is added: an end is seen late (at a hint or the next
    tick) alike for the releases a shadow counts on and for a backfill's own end."""

    usage: Usage = field(default_factory=dict)
    ceiling: Ceiling = field(default_factory=Ceiling)
    decayed: Mapping[str, float] = field(default_factory=dict)
    now: datetime | None = None
    releases: Sequence[Release] = ()


@dataclass(frozen=True)
class Held:
    """A workload that did not fit, and the limits it is short of (with what is held
    before it charged)."""

    workload: Workload
    shortfalls: tuple[Shortfall, ...]


@dataclass(frozen=True)
class Plan:
    """What to do now: the workloads to create, in order; the heads held (the rest of their
    queues waits behind them); and those that can never be admitted."""

    admitted: tuple[Workload, ...] = ()
    held: tuple[Held, ...] = ()
    inadmissible: tuple[Workload, ...] = ()


def decayed_usage(
    previous: float, holding: float, elapsed_seconds: float, half_life_seconds: float
) -> float:
    """A queue's decayed usage after ``elapsed_seconds`` in which it held ``holding`` GPUs:
    an exponential moving average of the GPUs it held, with the given half-life.

    ``previous * f + holding * (1 - f)`` with ``f = 0.5 ** (elapsed / half_life)``: exact for
    a constant holding over the interval, so the result does not depend on how often the tick
    samples. Usage held at nothing halves in one half-life; held at g it tends to g.

    Examples:
        >>> decayed_usage(8.0, 0.0, 3600, 3600)
        4.0
        >>> decayed_usage(8.0, 8.0, 600, 3600)
        8.0
        >>> round(decayed_usage(0.0, 16.0, 3600, 3600), 6)
        8.0
    """
    if elapsed_seconds < 0 or half_life_seconds <= 0:
        raise ValueError(
            f"elapsed must be >= 0 and the half-life > 0: {elapsed_seconds}, {half_life_seconds}"
        )
    kept = math.pow(0.5, elapsed_seconds / half_life_seconds)
    return previous * kept + holding * (1.0 - kept)


def fair_share(queue: Queue, usage: Usage, decayed: Mapping[str, float]) -> float:
    """A queue's standing in fair share: ``(decayed usage + GPUs held now) / weight``; lower
    goes first.

    Examples:
        >>> from shared.domain.admission.config import Pool, Resource
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> fair_share(Queue("a", weight=2.0), {"a": {r: 4}}, {"a": 2.0})
        3.0
    """
    holding = sum(usage.get(queue.name, _NO_USAGE).values())
    return (decayed.get(queue.name, 0.0) + holding) / queue.weight


def order_key(priority: int, arrival: datetime, request_id: str) -> tuple[int, datetime, str]:
    """Where a request stands in its queue's order: priority (higher first), then arrival,
    then id (so the order is total)."""
    return (-priority, arrival, request_id)


def queue_order(workloads: Sequence[Workload]) -> list[Workload]:
    """Workloads in their queue's order (:func:`order_key`)."""
    return sorted(workloads, key=lambda w: order_key(w.priority, w.arrival, w.request_id))


def never_fits(queues: Queues, ceiling: Ceiling, workload: Workload) -> bool:
    """True when ``workload`` could never be admitted as the queues and quota stand."""
    queue = queues.queues.get(workload.queue)
    return queue is None or bool(out_of_reach(queues, queue, workload.demand, ceiling))


def admit(queues: Queues, standing: Standing, waiting: Sequence[Workload]) -> Plan:
    """Which waiting workloads to create now, by the module's order and blocking rule.

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> from shared.domain.admission.config import Pool, Resource, read_queues
        >>> r = {"region": "us-central1", "acceleratorType": "NVIDIA_L4", "pool": "PREEMPTIBLE"}
        >>> qs = read_queues({"queues": [
        ...     {"name": "a", "quotas": [{**r, "nominal": 8}],
        ...      "priorities": {"high": 100, "normal": 0}}]})
        >>> res = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> ws = [Workload("big-high", "a", 100, t, {res: 6}),
        ...       Workload("small-low", "a", 0, t - timedelta(hours=1), {res: 4}),
        ...       Workload("first", "a", 100, t - timedelta(hours=2), {res: 2})]
        >>> plan = admit(qs, Standing(), ws)
        >>> [w.request_id for w in plan.admitted], [h.workload.request_id for h in plan.held]
        (['first', 'big-high'], ['small-low'])
    """
    usage: dict[str, dict[Resource, int]] = {q: dict(held) for q, held in standing.usage.items()}
    lines, inadmissible = _lines(queues, standing.ceiling, waiting)
    holds: list[Workload] = []
    levels: dict[str, float] = {}
    reserved_for: dict[str, _Reservation] = {}  # each held head's, by request id (rule 4)
    releases = list(standing.releases)
    blocked: set[str] = set()  # queues whose head is held: the rest of them only backfills
    # Queues with a retry in its backoff held: the rest of them fit beside it, or wait.
    reserved: set[str] = set()
    barred = -math.inf  # a priority that fits but did not backfill: none below it may
    admitted: list[Workload] = []
    held: list[Held] = []
    while lines:
        head = min(
            (line[-1] for line in lines.values()),
            key=lambda w: (
                -w.priority,
                fair_share(queues.queue(w.queue), usage, standing.decayed),
                w.arrival,
                w.request_id,
            ),
        )
        queue = queues.queue(head.queue)
        above = _charged(usage, [h for h in holds if h.priority > head.priority])
        level = _charged(above, [h for h in holds if h.priority == head.priority])
        short = shortfalls(queues, level, standing.ceiling, queue, head.demand)
        # The held queues' fair shares with their held workload admitted (rule 3).
        catch_up = min(
            (levels[h.request_id] for h in holds if h.priority == head.priority),
            default=-math.inf,
        )
        within = _within_nominal(queue, above, head.demand)
        catches_up = _share_after(queue, usage, standing.decayed, head.demand) <= catch_up
        backing_off = _backing_off(head, standing.now)
        fits = (
            head.queue not in blocked
            and not backing_off
            and (
                not short
                or (
                    head.queue not in reserved
                    and not shortfalls(queues, above, standing.ceiling, queue, head.demand)
                    and (within or catches_up)
                )
            )
        )
        if not fits and not backing_off and standing.now is not None and holds:
            free = not shortfalls(queues, usage, standing.ceiling, queue, head.demand)
            fits = free and _backfills(
                queues,
                standing.ceiling,
                head,
                standing.now,
                [reserved_for[h.request_id] for h in holds],
                fair=within,  # rule 4: a backfill borrows nothing
                barred=barred,
                coming=_entitled(queues, lines, head, holds, usage, closed=blocked | reserved),
            )
            if free and not fits:
                barred = max(barred, head.priority)
        if fits:
            admitted.append(head)
            add(usage, head.queue, head.demand, 1)
            ends: datetime | None = None
            if standing.now is not None and head.limit_seconds is not None:
                ends = held_until(standing.now, head.limit_seconds)
                releases.append(Release(ends, head.queue, head.demand))
            # Whatever this pass admits after a head was held (a backfill, or a workload
            # rules 2 and 3 let in) and may still hold its GPUs at that head's shadow
            # narrows the room a later backfill may take there.
            for reservation in reserved_for.values():
                reservation.charge(queues, standing.ceiling, head, ends)
        elif head.queue not in blocked:
            holds.append(head)
            levels[head.request_id] = _share_after(queue, usage, standing.decayed, head.demand)
            if standing.now is not None:
                reserved_for[head.request_id] = _reserve(
                    queues,
                    standing,
                    usage,
                    holds,
                    releases=releases,
                    head=head,
                    reserved_for=reserved_for,
                )
                # A retry in its backoff is charged as a hold, but its queue goes on: the
                # rest of it may fit beside what the retry will need (never in its place:
                # rule 3's exceptions are for other queues).
                (reserved if backing_off else blocked).add(head.queue)
            held.append(Held(head, short))
            if standing.now is None:
                del lines[head.queue]  # StrictFIFO: nothing behind it in its queue this pass
                continue
        line = lines[head.queue]
        line.pop()
        if not line:
            del lines[head.queue]
    return Plan(tuple(admitted), tuple(held), tuple(inadmissible))


def _lines(
    queues: Queues, ceiling: Ceiling, waiting: Sequence[Workload]
) -> tuple[dict[str, list[Workload]], list[Workload]]:
    """Each queue's line, its head last (popped from the end), and those never admissible."""
    lines: dict[str, list[Workload]] = {}
    inadmissible: list[Workload] = []
    for workload in waiting:
        if never_fits(queues, ceiling, workload):
            inadmissible.append(workload)
        else:
            lines.setdefault(workload.queue, []).append(workload)
    return {name: queue_order(line)[::-1] for name, line in lines.items()}, inadmissible


def _backing_off(workload: Workload, now: datetime | None) -> bool:
    """Is ``workload`` a retry whose backoff runs past ``now`` (None: the time is not known,
    as in the estimate's replay, which takes it as due)?"""
    return now is not None and workload.not_before is not None and workload.not_before > now


@dataclass
class _Reservation:
    """What a held head is promised (rule 4): its *shadow*, when it fits at the latest (None:
    no known end makes room), and the *room* it leaves there: the usage at its shadow of
    everything that may still hold its GPUs then (None: nothing may run past its shadow).
    A pass charges the room as it admits (:meth:`charge`), so the head still fits at its
    shadow beside all that this pass let run past it."""

    head: Workload
    shadow: datetime | None
    room: dict[str, dict[Resource, int]] | None = None

    def charge(
        self, queues: Queues, ceiling: Ceiling, workload: Workload, ends: datetime | None
    ) -> None:
        """``workload`` is admitted and holds its GPUs until ``ends`` (None: not known). One
        that leaves the head no room at its shadow (a workload of its priority in another
        queue, let in by rules 2 and 3) takes the shadow away: nothing backfills before the
        head for the rest of the pass (the next pass computes it again)."""
        if self.room is not None and (ends is None or self.shadow is None or ends > self.shadow):
            add(self.room, workload.queue, workload.demand, 1)
            head = self.head
            if shortfalls(queues, self.room, ceiling, queues.queue(head.queue), head.demand):
                self.shadow = None

    def spares(
        self,
        queues: Queues,
        ceiling: Ceiling,
        workload: Workload,
        ends: datetime | None,
        coming: Sequence[tuple[Workload, datetime | None]] = (),
    ) -> bool:
        """Does admitting ``workload`` now, until ``ends`` (None: not known), keep this
        head's shadow, beside what is ``coming`` (each until its end)? It does when it is back
        by the shadow, or when the head still fits at its shadow beside it and them (EASY
        backfilling's extra GPUs)."""
        if self.shadow is None:
            return False
        if ends is not None and ends <= self.shadow:
            return True
        if self.room is None:
            return False
        beside = {name: dict(held) for name, held in self.room.items()}
        add(beside, workload.queue, workload.demand, 1)
        for other, until in coming:
            if until is None or until > self.shadow:
                add(beside, other.queue, other.demand, 1)
        return not shortfalls(
            queues, beside, ceiling, queues.queue(self.head.queue), self.head.demand
        )


def _reserve(
    queues: Queues,
    standing: Standing,
    usage: Usage,
    holds: Sequence[Workload],
    *,
    releases: Sequence[Release],
    head: Workload,
    reserved_for: Mapping[str, _Reservation],
) -> _Reservation:
    """A held head's reservation (rule 4). Its shadow: when it fits at the latest beside
    ``usage`` with the higher holds charged (from now: they may start any moment; each given
    back at its own shadow plus its limit, where both are known), and not before its backoff
    is over. Its room: that usage, less every release due by the shadow. Now, and no room,
    for a head of a queue that preempts: its victims' GPUs come back at its asking, which a
    backfill admitted beside it would take (a new job is never a victim), so nothing
    backfills before it."""
    assert standing.now is not None
    queue = queues.queue(head.queue)
    preempts = queue.preemption.within_queue or queue.preemption.within_cohort
    if preempts and not _backing_off(head, standing.now):  # a retry preempts nobody
        return _Reservation(head, standing.now)
    before = [h for h in holds if h.priority > head.priority]
    charged = _charged(usage, before)
    after_them = [
        Release(held_until(at, h.limit_seconds), h.queue, h.demand)
        for h in before
        if (at := reserved_for[h.request_id].shadow) is not None and h.limit_seconds is not None
    ]
    gone = [*releases, *after_them]
    shadow = shadow_time(queues, replace(standing, usage=charged), gone, head)
    if shadow is None:
        return _Reservation(head, None)
    if head.not_before is not None:
        shadow = max(shadow, head.not_before)
    for release in gone:
        if release.at <= shadow:
            add(charged, release.queue, release.demand, -1)
    return _Reservation(head, shadow, charged)


def _entitled(
    queues: Queues,
    lines: Mapping[str, Sequence[Workload]],
    head: Workload,
    holds: Sequence[Workload],
    usage: Usage,
    *,
    closed: set[str],
) -> list[Workload]:
    """The workloads still to come in this pass that rule 2 lets in whatever is held: of
    each other open queue, its first ones of a held head's priority or higher that fit
    within the queue's nominal, one after another. They take room at a held head's shadow
    without it charged, so a backfill decided before them must leave it for them too."""
    lowest = min(h.priority for h in holds)
    coming: list[Workload] = []
    for name, line in lines.items():
        if name == head.queue or name in closed:
            continue
        queue = queues.queue(name)
        mine: dict[str, dict[Resource, int]] = {name: dict(usage.get(name, {}))}
        for workload in reversed(line):  # the head is last
            if workload.priority < lowest or not _within_nominal(queue, mine, workload.demand):
                break
            add(mine, name, workload.demand, 1)
            coming.append(workload)
    return coming


def _backfills(
    queues: Queues,
    ceiling: Ceiling,
    workload: Workload,
    now: datetime,
    reservations: Sequence[_Reservation],
    *,
    fair: bool,
    barred: float,
    coming: Sequence[Workload] = (),
) -> bool:
    """Rule 4 for a workload that fits with nothing held charged: it keeps every held
    workload's shadow (:meth:`_Reservation.spares`), beside what rule 2 will still let in
    this pass (``coming``: :func:`_entitled`); no higher priority that fits waits
    (``barred``); and it borrows nothing (``fair``: it fits within its queue's nominal)."""
    if workload.priority < barred or not fair:
        return False
    ends = None if workload.limit_seconds is None else held_until(now, workload.limit_seconds)
    after = [
        (w, None if w.limit_seconds is None else held_until(now, w.limit_seconds)) for w in coming
    ]
    return all(r.spares(queues, ceiling, workload, ends, after) for r in reservations)


def held_until(at: datetime, seconds: float) -> datetime:
    """``at`` plus ``seconds``: when GPUs held from ``at`` for ``seconds`` are back; the end
    of the calendar when that is past it (a hand-edited time is never trusted to leave room).

    Examples:
        >>> from datetime import UTC, datetime
        >>> held_until(datetime(2026, 12, 1, tzinfo=UTC), 3600).hour
        1
        >>> held_until(datetime.max.replace(tzinfo=UTC), 3600).year
        9999
    """
    try:
        return at + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=at.tzinfo)


def shadow_time(
    queues: Queues, standing: Standing, releases: Sequence[Release], workload: Workload
) -> datetime | None:
    """When ``workload`` fits at the latest: the first of ``releases`` (earliest first; one
    already past counts as now) after which it fits beside ``standing.usage``; now when it
    fits already; None when no release makes room (a job with no known end holds for ever).

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> from shared.domain.admission.config import Pool, Resource, read_queues
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> st = Standing({"default": {r: 8}}, Ceiling({r: 8}), now=t)
        >>> big = Workload("big", "default", 0, t, {r: 6})
        >>> gone = [Release(t + timedelta(hours=h), "default", {r: 4}) for h in (3, 1)]
        >>> shadow_time(read_queues({}), st, gone, big) - t
        datetime.timedelta(seconds=10800)
        >>> shadow_time(read_queues({}), st, gone[:1], big) is None
        True
    """
    assert standing.now is not None, "a shadow is a time: the standing must say when it is"
    queue = queues.queue(workload.queue)
    usage = {name: dict(held) for name, held in standing.usage.items()}
    if not shortfalls(queues, usage, standing.ceiling, queue, workload.demand):
        return standing.now
    for release in sorted(releases, key=lambda r: r.at):
        add(usage, release.queue, release.demand, -1)
        if not shortfalls(queues, usage, standing.ceiling, queue, workload.demand):
            return max(release.at, standing.now)
    return None


def _charged(usage: Usage, holds: Sequence[Workload]) -> dict[str, dict[Resource, int]]:
    """``usage`` with the held workloads' demands charged as if they were admitted."""
    out = {name: dict(held) for name, held in usage.items()}
    for workload in holds:
        add(out, workload.queue, workload.demand, 1)
    return out


def _within_nominal(queue: Queue, usage: Usage, demand: Demand) -> bool:
    """True when ``demand`` fits within the queue's own nominal quota (it borrows nothing)."""
    if queue.unbounded:
        return False
    mine = usage.get(queue.name, {})
    return all(mine.get(r, 0) + gpus <= queue.quota(r).nominal for r, gpus in demand.items())


def _share_after(queue: Queue, usage: Usage, decayed: Mapping[str, float], demand: Demand) -> float:
    """The queue's fair share with ``demand`` admitted too."""
    after = {name: dict(held) for name, held in usage.items()}
    add(after, queue.name, demand, 1)
    return fair_share(queue, after, decayed)
