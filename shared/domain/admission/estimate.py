"""Where a waiting workload stands: its position in its queue, and when it may start.

- **Position** is its place in its queue's order (priority, then arrival, then id), 1 for the
  next to go: what ``flexjobs status`` shows a person waiting.
- **The estimate** replays the admission rule (:func:`~.rule.admit`, never a second copy of
  it) over the running workloads' expected ends, earliest first: at each end their GPUs come
  back and the rule runs on what still waits. What the replay admits holds its GPUs for the
  rest of it (its end is not known yet), so an estimate is never earlier for that reason. It
  assumes no new arrival of a higher priority and the ends as expected; with no expected end
  that frees enough, the start is unknown (None), never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType
from typing import Final

from shared.domain.admission.config import Queues, Resource
from shared.domain.admission.quota import Demand, add
from shared.domain.admission.rule import Standing, Workload, admit, queue_order


@dataclass(frozen=True)
class Running:
    """An admitted workload: what it holds, its latest complete checkpoint's time (None: it
    has none) and when it is expected to end (None: not known)."""

    request_id: str
    queue: str
    priority: int
    demand: Demand
    started: datetime | None = None
    checkpoint: datetime | None = None
    expected_end: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "demand", MappingProxyType(dict(self.demand)))


def position(waiting: Sequence[Workload], request_id: str) -> int | None:
    """The 1-based position of ``request_id`` in its queue (None: it is not waiting).

    Examples:
        >>> from datetime import UTC, datetime
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> ws = [Workload("a", "q", 0, t, {}), Workload("b", "q", 100, t, {}),
        ...       Workload("c", "other", 100, t, {})]
        >>> position(ws, "a"), position(ws, "b"), position(ws, "zzz")
        (2, 1, None)
    """
    mine = next((w for w in waiting if w.request_id == request_id), None)
    if mine is None:
        return None
    line = queue_order([w for w in waiting if w.queue == mine.queue])
    return [w.request_id for w in line].index(request_id) + 1


def estimate_start(
    queues: Queues,
    standing: Standing,
    waiting: Sequence[Workload],
    running: Sequence[Running],
    request_id: str,
    *,
    now: datetime,
) -> datetime | None:
    """When ``request_id`` would be admitted if the running workloads end as expected (None:
    not within their known ends). ``standing.usage`` includes what ``running`` holds.

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> from shared.domain.admission.quota import Ceiling
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> job = Running("run", "default", 0, {r: 8}, expected_end=t + timedelta(hours=2))
        >>> standing = Standing({"default": {r: 8}}, Ceiling({r: 8}))
        >>> ws = [Workload("next", "default", 0, t, {r: 4})]
        >>> estimate_start(read_queues({}), standing, ws, [job], "next", now=t) - t
        datetime.timedelta(seconds=7200)
    """
    return estimate_starts(queues, standing, waiting, running, now=now).get(request_id)


#: Expected ends a replay steps through at most: a start further out is unknown (None).
MAX_MOMENTS: Final = 100


def estimate_starts(
    queues: Queues,
    standing: Standing,
    waiting: Sequence[Workload],
    running: Sequence[Running],
    *,
    now: datetime,
) -> dict[str, datetime]:
    """When each waiting workload would be admitted, in one replay (see the module
    docstring) over at most :data:`MAX_MOMENTS` expected ends; one not admitted within them
    is left out (unknown)."""
    usage: dict[str, dict[Resource, int]] = {q: dict(h) for q, h in standing.usage.items()}
    left = list(waiting)
    ends = sorted(
        (job for job in running if job.expected_end is not None),
        key=lambda job: (job.expected_end, job.request_id),
    )
    moments: list[tuple[datetime, Running | None]] = [(now, None)]
    moments += [(max(now, job.expected_end), job) for job in ends[:MAX_MOMENTS] if job.expected_end]
    starts: dict[str, datetime] = {}
    for when, ended in moments:
        if not left:
            break
        if ended is not None:
            add(usage, ended.queue, ended.demand, -1)
        # Without backfill (no ``now``): an estimate is never earlier for it.
        plan = admit(queues, replace(standing, usage=usage, now=None, releases=()), left)
        gone = {w.request_id for w in plan.inadmissible}
        for workload in plan.admitted:
            starts[workload.request_id] = when
            add(usage, workload.queue, workload.demand, 1)
        gone |= {w.request_id for w in plan.admitted}
        left = [w for w in left if w.request_id not in gone]
    return starts
