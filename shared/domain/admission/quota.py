"""Quota arithmetic: whether a demand fits a queue, its cohort and the project's quota now,
and the most it could ever get. The one place these limits are computed: intake's
inadmissible check, admission and preemption all ask here.

A demand of queue Q for resource r fits when all three hold (Kueue's rules, with Vertex's
quota as a third level):

1. **The queue.** Q's usage plus the demand stays within ``nominal + borrowingLimit`` (no
   limit when ``borrowingLimit`` is absent).
2. **The cohort.** What Q uses beyond what it keeps (``nominal - lendable``) comes out of the
   cohort's pool, the sum of its members' lendable quotas; every member's use beyond what it
   keeps, this demand's included, stays within that pool. A queue in no cohort is a cohort of
   one, so this reads: its usage stays within its nominal.
3. **The project.** Every queue's usage of r plus the demand stays within the project's real
   quota of r (the :class:`Ceiling`), whatever the queues say: queues may promise more than
   the project holds, and a create past the real quota is refused by Vertex.

The implicit ``default`` queue of a file with no queues is bounded by (3) alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from shared.domain.admission.config import Queue, Queues, Resource

#: GPUs admitted per queue, per resource.
Usage = Mapping[str, Mapping[Resource, int]]
#: GPUs a workload asks, per resource.
Demand = Mapping[Resource, int]

_EMPTY: Final[Mapping[Resource, int]] = MappingProxyType({})


class Limit(StrEnum):
    """Which of the three limits a demand is short of (``unread``: the project's quota of the
    resource is not known yet: it was never asked of the quota system)."""

    QUEUE = "queue"
    COHORT = "cohort"
    PROJECT = "project"
    UNREAD = "unread"


@dataclass(frozen=True)
class Shortfall:
    """A limit a demand does not fit now: ``free`` GPUs of ``resource`` are left under it."""

    resource: Resource
    limit: Limit
    free: int
    need: int

    def __str__(self) -> str:
        if self.limit is Limit.UNREAD:
            return f"the project's quota of {self.resource} is not read yet"
        return f"{self.limit.value} quota of {self.resource}: {self.free} free, {self.need} needed"


@dataclass(frozen=True)
class Ceiling:
    """The project's quota per resource: the Cloud Quotas API's limit where it was read,
    else the queue file's ``projectQuota``; a resource in neither has no ceiling beyond the
    queues'. ``configured``: the resources whose limit is the file's fallback (for the logs
    and the status page).

    Examples:
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> c = Ceiling.of(read_queues({}), {r: 8})
        >>> c.limit(r), c.configured
        (8, frozenset())
    """

    limits: Mapping[Resource, int] = field(default_factory=dict)
    configured: frozenset[Resource] = frozenset()
    #: The resources whose limit is known (read, or the file's): with quota reads on, any
    #: other has a limit nobody asked for yet, which no admission may run past. None: the
    #: quota is not read at all (the file's ``projectQuota`` is the only ceiling).
    known: frozenset[Resource] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", MappingProxyType(dict(self.limits)))

    def limit(self, resource: Resource) -> int | None:
        return self.limits.get(resource)

    def unread(self, resource: Resource) -> bool:
        """True when ``resource``'s limit was never asked of the quota system (so it is not
        known whether it has one, nor how low it is)."""
        return self.known is not None and resource not in self.known

    @classmethod
    def of(
        cls,
        queues: Queues,
        observed: Mapping[Resource, int | None],
        asked: Iterable[Resource] | None = None,
    ) -> Ceiling:
        """The ceiling from the quota limits read (None: not readable) and the file's;
        ``asked``: every resource asked of the quota system (None: it is never read)."""
        limits = {r: v for r, v in observed.items() if v is not None}
        fallback = {r: v for r, v in queues.project_quota.items() if r not in limits}
        known = None if asked is None else frozenset({*asked, *limits, *fallback})
        return cls({**limits, **fallback}, frozenset(fallback), known)


def usage_of(held: Iterable[tuple[str, Demand]]) -> dict[str, dict[Resource, int]]:
    """Usage from (queue, demand) pairs: what each admitted workload holds, summed.

    Examples:
        >>> from shared.domain.admission.config import Pool
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> usage_of([("a", {r: 2}), ("a", {r: 3})])["a"][r]
        5
    """
    out: dict[str, dict[Resource, int]] = {}
    for queue, demand in held:
        add(out, queue, demand, 1)
    return out


def add(usage: dict[str, dict[Resource, int]], queue: str, demand: Demand, sign: int) -> None:
    """Add (``sign`` 1) or take back (-1) ``demand`` in ``queue``'s usage, in place."""
    mine = usage.setdefault(queue, {})
    for resource, gpus in demand.items():
        mine[resource] = mine.get(resource, 0) + sign * gpus


def shortfalls(
    queues: Queues, usage: Usage, ceiling: Ceiling, queue: Queue, demand: Demand
) -> tuple[Shortfall, ...]:
    """Every limit ``demand`` does not fit in ``queue`` now (empty: it fits).

    Examples:
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> r = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> qs = read_queues({"queues": [{"name": "a", "quotas": [{"region": "us-central1",
        ...     "acceleratorType": "NVIDIA_L4", "pool": "PREEMPTIBLE", "nominal": 8}]}]})
        >>> [str(s) for s in shortfalls(qs, {"a": {r: 6}}, Ceiling(), qs.queue("a"), {r: 4})]
        ['queue quota of NVIDIA_L4 PREEMPTIBLE in us-central1: 2 free, 4 needed']
    """
    out: list[Shortfall] = []
    for resource, need in sorted(demand.items()):
        if need <= 0:
            continue
        if not queue.unbounded:
            out.extend(_queue_and_cohort(queues, usage, queue, resource, need))
        if ceiling.unread(resource):
            out.append(Shortfall(resource, Limit.UNREAD, 0, need))
            continue
        limit = ceiling.limit(resource)
        if limit is not None:
            free = limit - sum(held.get(resource, 0) for held in usage.values())
            if need > free:
                out.append(Shortfall(resource, Limit.PROJECT, max(free, 0), need))
    return tuple(out)


def _queue_and_cohort(
    queues: Queues, usage: Usage, queue: Queue, resource: Resource, need: int
) -> list[Shortfall]:
    out: list[Shortfall] = []
    quota = queue.quota(resource)
    used = usage.get(queue.name, _EMPTY).get(resource, 0)
    if quota.borrowing_limit is not None:
        free = quota.nominal + quota.borrowing_limit - used
        if need > free:
            out.append(Shortfall(resource, Limit.QUEUE, max(free, 0), need))
    pool = 0
    drawn = 0
    for member in queues.cohort_of(queue):
        theirs = member.quota(resource)
        pool += theirs.lendable
        drawn += max(0, usage.get(member.name, _EMPTY).get(resource, 0) - theirs.kept)
    # What this demand draws from the pool: the part of the queue's new usage above what it keeps.
    extra = max(0, used + need - quota.kept) - max(0, used - quota.kept)
    if drawn + extra > pool:
        # The free GPUs this queue can reach: what it keeps and has not used, plus the pool's.
        free = max(0, quota.kept - used) + max(0, pool - drawn)
        # A queue in no cohort is a cohort of one: the limit is its own nominal.
        limit = Limit.COHORT if queue.cohort is not None else Limit.QUEUE
        out.append(Shortfall(resource, limit, max(free, 0), need))
    return out


def most_ever(queues: Queues, queue: Queue, resource: Resource) -> int | None:
    """The most GPUs of ``resource`` ``queue`` could ever hold: its nominal and all it could
    borrow, within its borrowing limit (None: the queue has no bound of its own).

    Examples:
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> r = {"region": "us-central1", "acceleratorType": "NVIDIA_L4", "pool": "PREEMPTIBLE"}
        >>> qs = read_queues({"queues": [
        ...     {"name": "a", "cohort": "c", "quotas": [{**r, "nominal": 8, "borrowingLimit": 4}]},
        ...     {"name": "b", "cohort": "c", "quotas": [{**r, "nominal": 8, "lendingLimit": 6}]}]})
        >>> most_ever(qs, qs.queue("a"), Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE))
        12
    """
    if queue.unbounded:
        return None
    quota = queue.quota(resource)
    pool = sum(member.quota(resource).lendable for member in queues.cohort_of(queue))
    most = quota.kept + pool
    if quota.borrowing_limit is not None:
        most = min(most, quota.nominal + quota.borrowing_limit)
    return most


@dataclass(frozen=True)
class OutOfReach:
    """One resource a demand can never get: ``gpus`` asked, ``most`` the bound, and whose
    bound it is (``"queue"``: the queue with all it could borrow; ``"project"``: the quota)."""

    resource: Resource
    gpus: int
    most: int
    bound: str


def out_of_reach(
    queues: Queues, queue: Queue, demand: Demand, ceiling: Ceiling | None
) -> list[OutOfReach]:
    """Every resource of ``demand`` larger than ``queue`` could ever hold, or than the
    project's quota where it is known ([] when it may be admitted some day): the one test of
    "inadmissible", for intake's refusal and the rule's setting aside alike.

    Examples:
        >>> from shared.domain.admission.config import Pool, read_queues
        >>> r = {"region": "us-central1", "acceleratorType": "NVIDIA_L4", "pool": "PREEMPTIBLE"}
        >>> qs = read_queues({"queues": [{"name": "a", "quotas": [{**r, "nominal": 8}]}]})
        >>> l4 = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
        >>> [(x.gpus, x.most, x.bound) for x in out_of_reach(qs, qs.queue("a"), {l4: 9}, None)]
        [(9, 8, 'queue')]
    """
    found: list[OutOfReach] = []
    for resource, gpus in sorted(demand.items()):
        most = most_ever(queues, queue, resource)
        limit = ceiling.limit(resource) if ceiling is not None else None
        if most is not None and gpus > most:
            found.append(OutOfReach(resource, gpus, most, "queue"))
        elif limit is not None and gpus > limit:
            found.append(OutOfReach(resource, gpus, limit, "project"))
    return found
