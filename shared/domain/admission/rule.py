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

A workload that could never be admitted (larger than its queue with all it could borrow, or
than the project's quota) is set aside as inadmissible, never held: holding it would block
its queue for ever. Intake refuses those (:func:`~.demand.check_request`); this covers a
queue file changed since.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "demand", MappingProxyType(dict(self.demand)))


@dataclass(frozen=True)
class Standing:
    """What admission reads besides the queues: the GPUs admitted per queue and resource,
    the project's quota, and each queue's decayed usage (in GPUs, :func:`decayed_usage`)."""

    usage: Usage = field(default_factory=dict)
    ceiling: Ceiling = field(default_factory=Ceiling)
    decayed: Mapping[str, float] = field(default_factory=dict)


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


def queue_order(workloads: Sequence[Workload]) -> list[Workload]:
    """Workloads in their queue's order: priority (higher first), then arrival, then id."""
    return sorted(workloads, key=lambda w: (-w.priority, w.arrival, w.request_id))


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
    lines: dict[str, list[Workload]] = {}
    inadmissible: list[Workload] = []
    for workload in waiting:
        if never_fits(queues, standing.ceiling, workload):
            inadmissible.append(workload)
        else:
            lines.setdefault(workload.queue, []).append(workload)
    for name, line in lines.items():
        lines[name] = queue_order(line)[::-1]  # popped from the end: the head is last
    holds: list[Workload] = []
    levels: dict[str, float] = {}
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
        fits = not short or (
            not shortfalls(queues, above, standing.ceiling, queue, head.demand)
            and (
                _within_nominal(queue, above, head.demand)
                or _share_after(queue, usage, standing.decayed, head.demand) <= catch_up
            )
        )
        if fits:
            admitted.append(head)
            add(usage, head.queue, head.demand, 1)
            lines[head.queue].pop()
            if not lines[head.queue]:
                del lines[head.queue]
        else:
            holds.append(head)
            levels[head.request_id] = _share_after(queue, usage, standing.decayed, head.demand)
            held.append(Held(head, short))
            del lines[head.queue]  # StrictFIFO: nothing behind it in its queue this pass
    return Plan(tuple(admitted), tuple(held), tuple(inadmissible))


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
