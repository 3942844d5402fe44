"""The admission ledger: what is admitted now, kept in one document beside the records.

Pure: the decisions here read the ledger document (``admission/ledger``) and a job record
as plain values and return what to write; the repository writes both in one conditional
batch (:meth:`shared.app.ports.JobStore.transact_ledger`), so an admission and the record
that says so are written together or not at all.

**Why one document.** Two ticks, a release and an intake may run at once. Every admission
reads the ledger, checks the workload still fits with what the ledger holds
(:func:`~.quota.shortfalls`, against the fresh read, not the plan's snapshot), and writes the
ledger only if it is still as read. Two admissions racing for the last GPUs cannot both win:
the second's write fails its precondition, it decides again on a fresh read, and no longer
fits. The plan's order (:func:`~.rule.admit`) is computed on a snapshot; the quota is never
computed on one.

**The hold.** An admission writes the ledger entry and moves the record from ``WAITING`` to
``ADMITTED`` with its submission due now, in the same batch. The create then runs through the
exactly-once routine (a claim, a label lookup, the create, the record): a crash anywhere
after the admission leaves a due submission, which the tick's due-submission sweep finishes.
A record that ends (or is cancelled before its create) gives its entry back: at once when the
lifecycle sees it end (:func:`released`), and on every tick (:func:`healed`), which drops an
entry whose record is no longer active and admitted, and restores one an admitted record
lacks, so a lost update heals itself within a tick. Each is confirmed on a fresh read of its
record first (:func:`heal_candidates`): an admission that committed after the tick read the
records is never taken for an orphan.

**Bounded.** At most :data:`MAX_HELD` entries of at most :data:`MAX_RESOURCES` resources each,
and at most :data:`MAX_LEDGER_BYTES` in all (a requestId may be 1,500 bytes, so the count
alone would not keep it under Firestore's 1 MiB). A ledger that is full admits nothing more
until an entry is given back.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from shared.domain.admission.config import Pool, Queues, Resource
from shared.domain.admission.quota import Ceiling, Demand, Usage, shortfalls, usage_of
from shared.domain.admission.rule import Release, Workload, decayed_usage, held_until
from shared.domain.model.kinds import CUSTOM_JOB
from shared.domain.model.records import JobRecord
from shared.domain.model.strategies import Strategy
from shared.domain.model.values import clip

#: The reason a record waiting for admission shows (``reason``), beside state QUEUED.
ADMISSION_REASON: Final = "admission"
#: Entries the ledger holds at most.
MAX_HELD: Final = 2000
#: The ledger's stored size at most (compact JSON), well below Firestore's 1 MiB document.
MAX_LEDGER_BYTES: Final = 768 * 1024
#: Resources one demand names at most (a worker pool each; Vertex allows four).
MAX_RESOURCES: Final = 8
#: Quota limits the ledger caches at most (region x accelerator x pool in use).
MAX_OBSERVED: Final = 256


class Stage(StrEnum):
    """Where a request stands in admission (the record's ``admission.stage``)."""

    WAITING = "WAITING"
    ADMITTED = "ADMITTED"
    # The record ended (whatever ended it: recovery.finish): it waits for nothing and holds
    # nothing once Vertex has confirmed its jobs' cancels (holds_quota).
    ENDED = "ENDED"


def demand_to_list(demand: Demand) -> list[dict[str, Any]]:
    """A demand as stored: a list of ``{region, acceleratorType, pool, gpus}``, sorted."""
    return [
        {"region": r.region, "acceleratorType": r.accelerator, "pool": r.pool.value, "gpus": n}
        for r, n in sorted(demand.items())
    ]


def demand_from_list(
    raw: object, limit: int = MAX_RESOURCES, *, least: int = 1
) -> dict[Resource, int]:
    """A stored demand read back; entries that do not read are left out (hand edits), and
    at most ``limit`` are read. ``least``: the smallest count kept (0 for quota limits: a
    limit of 0 GPUs is a limit, the commonest one).

    Examples:
        >>> d = {Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE): 4}
        >>> demand_from_list(demand_to_list(d)) == d
        True
        >>> demand_from_list([{"region": 1}, "x"])
        {}
        >>> limit = [{"region": "r", "acceleratorType": "NVIDIA_L4", "pool": "PREEMPTIBLE",
        ...           "gpus": 0}]
        >>> len(demand_from_list(limit)), len(demand_from_list(limit, least=0))
        (0, 1)
    """
    out: dict[Resource, int] = {}
    if not isinstance(raw, list):
        return out
    for item in raw[:limit]:
        if not isinstance(item, Mapping):
            continue
        region, accelerator = item.get("region"), item.get("acceleratorType")
        pool, gpus = item.get("pool"), item.get("gpus")
        if not (isinstance(region, str) and isinstance(accelerator, str)):
            continue
        if pool not in (Pool.ON_DEMAND.value, Pool.PREEMPTIBLE.value):
            continue
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < least:
            continue
        resource = Resource(region, accelerator, Pool(pool))
        out[resource] = out.get(resource, 0) + gpus
    return out


@dataclass(frozen=True)
class Entry:
    """One admitted request: its queue, its demand, when it was admitted, and the longest
    its first attempt may hold the GPUs (``limit_seconds``, :func:`hold_limit`; None: not
    known)."""

    queue: str
    demand: Mapping[Resource, int]
    at: datetime
    limit_seconds: float | None = None

    def to_dict(self, request_id: str) -> dict[str, Any]:
        return {
            "requestId": request_id,
            "queue": self.queue,
            "demand": demand_to_list(self.demand),
            "at": self.at,
            "limitSeconds": self.limit_seconds,
        }

    def release(self) -> Release | None:
        """When the entry's GPUs are back at the latest, as backfill reads it (rule 4 of
        :mod:`.rule`); None when not known. Vertex counts the limit from the job's create,
        which may come after the admission (a create that failed is finished by the tick):
        the time is then too early, which only ever holds a backfill back (an earlier
        release, an earlier shadow), never lets one through. A retry never outlives it: it
        waits in its queue again (:func:`one_attempt`)."""
        if self.limit_seconds is None:
            return None
        back = held_until(self.at, self.limit_seconds)
        return Release(back, self.queue, self.demand)


@dataclass(frozen=True)
class Ledger:
    """The ledger document, typed: the admitted entries by requestId, each queue's decayed
    usage as of ``decayed_at``, and the quota limits the tick last read from the Cloud Quotas
    API (``observed``; None: not read)."""

    held: Mapping[str, Entry] = field(default_factory=dict)
    decayed: Mapping[str, float] = field(default_factory=dict)
    decayed_at: datetime | None = None
    observed: Mapping[Resource, int] = field(default_factory=dict)
    observed_at: datetime | None = None
    # Why the last read of the Cloud Quotas API failed (None: it did not).
    unreadable: str | None = None
    # Every resource asked of the Cloud Quotas API, by this read or an earlier one: one asked
    # and absent from ``observed`` has no limit there; one never asked has a limit not known
    # yet (:meth:`ceiling`).
    asked: frozenset[Resource] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "held", MappingProxyType(dict(self.held)))
        object.__setattr__(self, "decayed", MappingProxyType(dict(self.decayed)))
        object.__setattr__(self, "observed", MappingProxyType(dict(self.observed)))
        object.__setattr__(self, "asked", frozenset(self.asked))

    def replace(self, **changes: Any) -> Ledger:
        return dataclasses.replace(self, **changes)

    @classmethod
    def decode(cls, raw: Mapping[str, Any] | None) -> Ledger:
        """Read a stored ledger; entries that do not read are left out (never fails)."""
        raw = raw or {}
        held: dict[str, Entry] = {}
        entries = raw.get("held")
        for item in entries if isinstance(entries, list) else []:
            if not isinstance(item, Mapping):
                continue
            rid, queue, at = item.get("requestId"), item.get("queue"), item.get("at")
            demand = demand_from_list(item.get("demand"))
            if isinstance(rid, str) and isinstance(queue, str) and isinstance(at, datetime):
                held[rid] = Entry(queue, demand, at, _limit(item.get("limitSeconds")))
        decayed_raw = raw.get("decayed")
        decayed = {
            str(q): float(v)
            for q, v in (decayed_raw.items() if isinstance(decayed_raw, Mapping) else ())
            if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
        }
        at, seen_at = raw.get("decayedAt"), raw.get("observedAt")
        unreadable = raw.get("quotaUnreadable")
        return cls(
            held,
            decayed,
            at if isinstance(at, datetime) else None,
            demand_from_list(raw.get("observed"), limit=MAX_OBSERVED, least=0),
            seen_at if isinstance(seen_at, datetime) else None,
            unreadable if isinstance(unreadable, str) else None,
            frozenset(demand_from_list(raw.get("asked"), limit=MAX_OBSERVED, least=0)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            # A list, not a map keyed by requestId: a requestId may hold characters a field
            # path cannot, and the whole list is written each time anyway.
            "held": [entry.to_dict(rid) for rid, entry in sorted(self.held.items())],
            "decayed": dict(self.decayed),
            "decayedAt": self.decayed_at,
            # The quota limits as read, in the demand's shape (gpus: the limit).
            "observed": demand_to_list(self.observed),
            "observedAt": self.observed_at,
            "quotaUnreadable": self.unreadable,
            "asked": demand_to_list(dict.fromkeys(self.asked, 0)),
        }

    def ceiling(self, queues: Queues, *, reading: bool) -> Ceiling:
        """The project's quota as admission weighs it: the limits read, else the queue
        file's; with quota reads on (``reading``), a resource never asked has a limit not
        known yet, and nothing is admitted on it until it is read."""
        return Ceiling.of(queues, self.observed, self.asked if reading else None)

    def with_limits(
        self, read: Mapping[Resource, int], asked: Collection[Resource], now: datetime
    ) -> Ledger:
        """The ledger after one read of ``asked``'s limits (``read``: those it reported):
        what earlier reads learned of the resources not asked now is kept, so a resource that
        comes back into use is never without its ceiling; at most :data:`MAX_OBSERVED` each,
        the ones just asked first."""
        fresh = set(asked)
        kept = [r for r in sorted(self.asked) if r not in fresh]
        known = [*sorted(fresh), *kept][:MAX_OBSERVED]
        limits = {r: n for r, n in self.observed.items() if r not in fresh}
        limits.update(read)
        observed = {r: limits[r] for r in known if r in limits}
        return self.replace(
            observed=observed, observed_at=now, unreadable=None, asked=frozenset(known)
        )

    def size_bytes(self) -> int:
        """The stored form's size as compact UTF-8 JSON (times as their ISO text)."""
        text = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False, default=str)
        return len(text.encode("utf-8"))

    def usage(self) -> Usage:
        """GPUs admitted now, per queue and resource."""
        return usage_of((e.queue, e.demand) for e in self.held.values())

    def releases(self) -> list[Release]:
        """When the admitted entries give their GPUs back at the latest, where that is known."""
        return [r for e in self.held.values() if (r := e.release()) is not None]

    def decayed_now(self, now: datetime, half_life_seconds: float) -> dict[str, float]:
        """Each queue's decayed usage brought forward to ``now``: what it held since
        ``decayed_at`` (the ledger's holdings, constant in between as far as it knows)."""
        if self.decayed_at is None:
            return dict(self.decayed)
        elapsed = max(0.0, (now - self.decayed_at).total_seconds())
        holding = {q: float(sum(d.values())) for q, d in self.usage().items()}
        names = set(self.decayed) | set(holding)
        return {
            q: decayed_usage(
                self.decayed.get(q, 0.0), holding.get(q, 0.0), elapsed, half_life_seconds
            )
            for q in names
        }

    def with_decay(self, now: datetime, half_life_seconds: float) -> Ledger:
        """The ledger with its decayed usage brought forward to ``now``."""
        return self.replace(decayed=self.decayed_now(now, half_life_seconds), decayed_at=now)


@dataclass(frozen=True)
class Admitted:
    """An admission decided: the ledger to write and the record's fields."""

    ledger: Ledger
    record: dict[str, Any]


def admission_fields(
    queue: str,
    priority: int,
    demand: Demand,
    now: datetime,
    run_seconds: int | None = None,
    *,
    limit_seconds: float | None = None,
) -> dict[str, Any]:
    """The ``admission`` field of a record that starts waiting; ``run_seconds``: the
    request's ``estimatedRunSeconds`` (what an estimate of the others' starts assumes);
    ``limit_seconds``: :func:`hold_limit` (what backfill needs)."""
    return {
        "queue": queue,
        "priority": priority,
        "demand": demand_to_list(demand),
        "runSeconds": run_seconds,
        "limitSeconds": limit_seconds,
        "stage": Stage.WAITING.value,
        "waitingSince": now,
        "admittedAt": None,
        "heldBy": None,
    }


def workload_of(
    request_id: str, admission: Mapping[str, Any], *, demand: Demand | None = None
) -> Workload | None:
    """A waiting record's workload, or None when its ``admission`` does not read;
    ``demand``: its ``admission.demand`` read already."""
    queue, priority = admission.get("queue"), admission.get("priority")
    since = admission.get("waitingSince")
    if not isinstance(queue, str) or not isinstance(since, datetime):
        return None
    if not isinstance(priority, int) or isinstance(priority, bool):
        return None
    if demand is None:
        demand = demand_from_list(admission.get("demand"))
    limit = _limit(admission.get("limitSeconds"))
    after = admission.get("notBefore")
    later = after if isinstance(after, datetime) else None
    return Workload(request_id, queue, priority, since, demand, limit, later)


def hold_limit(
    kind: str,
    strategy: str,
    max_wait_seconds: float | None,
    timeout_seconds: float | None,
    *,
    ladder: bool = False,
) -> float | None:
    """The longest one attempt of a request may hold its GPUs, which Vertex enforces: a
    custom job's FLEX_START ``maxWaitDuration`` (it fails when not started by then) plus its
    ``scheduling.timeout`` (it is ended when it runs longer). None for any other: a Spot or
    on-demand job may wait pending without end, a tuning job runs its trials one batch
    after another (each with its own timeout), a pipeline or a deployment has no such bound,
    AUTO chooses its strategy and wait when it is created, and a fallback ladder
    (``ladder``) may move a retry to Spot or on-demand, where its wait has no end. None as
    well past :data:`MAX_LIMIT_SECONDS`: a limit that long backfills nothing, and its end
    would not be a time.

    Examples:
        >>> hold_limit("customJob", "FLEX_START", 1800.0, 3600.0)
        5400.0
        >>> hold_limit("customJob", "FLEX_START", None, 3600.0) is None  # waits for ever
        True
        >>> hold_limit("customJob", "SPOT", None, 3600.0) is None
        True
        >>> hold_limit("customJob", "FLEX_START", 1800.0, 3600.0, ladder=True) is None
        True
        >>> hold_limit("customJob", "FLEX_START", 315576000000.0, 3600.0) is None
        True
    """
    if kind != CUSTOM_JOB.name or strategy != Strategy.FLEX_START or ladder:
        return None
    if max_wait_seconds is None or timeout_seconds is None:
        return None
    return _limit(max_wait_seconds + timeout_seconds)


#: The longest limit backfill reads (:func:`hold_limit`): DWS's longest wait and run, seven
#: days each. Longer ones are not known.
MAX_LIMIT_SECONDS: Final = 14 * 86400.0


def one_attempt(admission: Mapping[str, Any]) -> bool:
    """Does a record's admission hold for its current attempt only? When it declared a
    limit (:func:`hold_limit`): its entry's release (:meth:`Entry.release`) is that
    attempt's end, which a retry would outlive, so a retry waits in its queue again. One
    without a limit keeps its entry until the request ends."""
    return _limit(admission.get("limitSeconds")) is not None


def not_before(admission: Mapping[str, Any]) -> datetime:
    """When a waiting record joins its queue's line: at once, or, for a retry waiting again
    (:func:`one_attempt`), once its backoff is over (``admission.notBefore``)."""
    at = admission.get("notBefore")
    return at if isinstance(at, datetime) else datetime.min.replace(tzinfo=UTC)


def _limit(raw: object) -> float | None:
    """A ``limitSeconds``, or None when it does not read as a positive number of at most
    :data:`MAX_LIMIT_SECONDS` (a stored value is never trusted to be a time)."""
    number = isinstance(raw, int | float) and not isinstance(raw, bool)
    if number and 0 < raw <= MAX_LIMIT_SECONDS:  # type: ignore[operator]  # NaN: False
        return float(raw)  # type: ignore[arg-type]
    return None


def admit_one(
    ledger: Ledger,
    queues: Queues,
    workload: Workload,
    record: Mapping[str, Any],
    *,
    ceiling: Ceiling,
    now: datetime,
) -> Admitted | None:
    """Admit ``workload`` on a fresh read of the ledger and its record, or None when it may
    not be now: the record no longer waits (cancelled, admitted by another pass, ended), the
    ledger is full, its queue is gone, or the demand no longer fits what the ledger holds."""
    admission = record.get("admission")
    if not isinstance(admission, Mapping) or admission.get("stage") != Stage.WAITING.value:
        return None
    # QUEUED: it arrived and waits; RETRYING: it was preempted and waits to resume.
    if record.get("cancelRequested") or record.get("state") not in ("QUEUED", "RETRYING"):
        return None
    if workload.request_id in ledger.held or len(ledger.held) >= MAX_HELD:
        return None
    if not_before(admission) > now:
        return None  # a retry's backoff, on the fresh read: a pass on an older snapshot
    queue = queues.queues.get(workload.queue)
    if queue is None or shortfalls(queues, ledger.usage(), ceiling, queue, workload.demand):
        return None
    entry = Entry(workload.queue, workload.demand, now, workload.limit_seconds)
    after = ledger.replace(held={**ledger.held, workload.request_id: entry})
    if after.size_bytes() > MAX_LEDGER_BYTES:
        return None  # full, in bytes: it waits until an entry is given back
    fields = {
        "admission": {
            **admission,
            "stage": Stage.ADMITTED.value,
            "admittedAt": now,
            "heldBy": None,
            "notBefore": None,
        },
        # Due now: the exactly-once create runs next; if this delivery dies first, the tick's
        # due-submission sweep runs it.
        "nextAttemptAt": now,
        "reason": "admitted",
        "updatedAt": now,
    }
    return Admitted(after, fields)


def released(ledger: Ledger, request_ids: Iterable[str]) -> Ledger | None:
    """The ledger without the entries of ``request_ids``; None when it holds none of them."""
    gone = {rid for rid in request_ids if rid in ledger.held}
    if not gone:
        return None
    kept = {rid: e for rid, e in ledger.held.items() if rid not in gone}
    return ledger.replace(held=kept)


def healed(
    ledger: Ledger, drop: Mapping[str, datetime], restore: Mapping[str, Entry]
) -> Ledger | None:
    """The ledger without the entries of ``drop`` (requestId to the entry's ``at`` as the
    caller saw it: an entry admitted again since, with a new ``at``, is kept) and with those
    of ``restore`` (admitted active records that lack one); None when that changes nothing.
    The caller confirms each on a fresh read of its record first (:func:`heal_candidates`)."""
    gone = {rid for rid, at in drop.items() if rid in ledger.held and ledger.held[rid].at == at}
    back = {rid: e for rid, e in restore.items() if rid not in ledger.held}
    if not gone and not back:
        return None
    held = {rid: e for rid, e in ledger.held.items() if rid not in gone}
    held.update(back)
    return ledger.replace(held=held)


def heal_candidates(ledger: Ledger, admitted: Mapping[str, Entry]) -> tuple[list[str], list[str]]:
    """Entries whose record the tick's read did not show admitted and active, and admitted
    active records without an entry. Candidates only: an admission may have committed after
    the tick's read (its entry then looks orphaned), so each is confirmed on a fresh read of
    its record before the ledger is healed. An entry exists only once its admission
    committed, so a fresh read that does not show the record admitted shows it ended since.
    """
    drop = [rid for rid in ledger.held if rid not in admitted]
    restore = [rid for rid in admitted if rid not in ledger.held]
    return drop, restore


def holds_quota(record: JobRecord, live_jobs: Collection[str] | None) -> bool:
    """Does a record still hold its GPUs in Vertex's count? While it is active; and once it
    ended, while one of its jobs is still live in Vertex (``live_jobs``: what the tick's
    listing shows not ended; None: not known, so it holds). A cancelled record's running
    job goes CANCELLING and holds its GPUs until Vertex ends it: its entry is given back
    only then, or a pass would admit past the quota Vertex enforces."""
    if not record.state.terminal:
        return True
    if live_jobs is None:
        return True
    return any(name in live_jobs for name in {*jobs_of(record), *record.pending_cancels})


#: Job names an ended record keeps for its entry at most (a cancel finds few more).
MAX_ENDED_JOBS: Final = 8


def jobs_of(record: JobRecord) -> list[str]:
    """The Vertex jobs an ended record's entry waits on: its current job, and those its
    cancel found by label (``admission.jobs``: a job created while the cancel ran is named
    by no other field, and a pending cancel is forgotten once Vertex accepts it, before the
    job has ended)."""
    kept = record.admission.get("jobs")
    names = [n for n in kept if isinstance(n, str)] if isinstance(kept, list) else []
    return [n for n in dict.fromkeys([record.vertex_job or "", *names]) if n]


def held_reason(shortfalls_text: Iterable[str]) -> str:
    """What a held request waits for, as its record says it (``admission.heldBy``)."""
    return clip("; ".join(t for t in shortfalls_text if t), 500) or ""


def entry_of(record: Mapping[str, Any]) -> Entry | None:
    """The ledger entry an admitted active record holds, from its ``admission`` field."""
    admission = record.get("admission")
    if not isinstance(admission, Mapping) or admission.get("stage") != Stage.ADMITTED.value:
        return None
    queue, at = admission.get("queue"), admission.get("admittedAt")
    if not isinstance(queue, str) or not isinstance(at, datetime):
        return None
    demand = demand_from_list(admission.get("demand"))
    return Entry(queue, demand, at, _limit(admission.get("limitSeconds")))
