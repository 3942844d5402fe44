"""What the tick tallies for the status page, beside its watch list: the active jobs by state,
what the jobs that ended in each 10 minutes of the last week used and cost, and the newest
jobs (the first page of the list). The page then reads one document for its totals and its
first page's membership, however many records the database holds (issue 26).

The tick adds each job once, when its sync first sees it ended
(:func:`shared.domain.model.watch.synced`), in the same batch that saves the list: a tick that
dies before saving adds nothing, and the next one sees the same ends. The first build reads
the week's ended records once (:func:`built`).

Examples:
    >>> from datetime import UTC
    >>> t = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    >>> tally = built({"RUNNING": 2}, [], [], t)
    >>> ended = {"requestId": "a", "endedAt": t, "gpuSeconds": 3600.0,
    ...          "cost": {"costUsd": 1.5, "onDemandUsd": 4.0, "savingsUsd": 2.5}}
    >>> tally = added(tally, {"RUNNING": 1}, [ended], [], t)
    >>> figures = tally.window(t - timedelta(hours=24))
    >>> figures.jobs, figures.gpu_seconds, figures.cost_usd, figures.savings_usd
    (1, 3600.0, 1.5, 2.5)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.domain.model.ids import MAX_DOC_ID_BYTES, doc_id

#: The tally's resolution: each window adds whole buckets, so it starts at most this early.
BUCKET = timedelta(minutes=10)
#: How far back ended jobs are kept: the status page's longest window.
KEEP = timedelta(days=7)
#: The newest jobs kept: the status page's first page (100) and one more, which says whether
#: a next page exists.
NEWEST = 101
#: The stored form's version: a tally stored in another form is rebuilt, never misread.
FORMAT = 1


@dataclass(frozen=True)
class Bucket:
    """The jobs that ended in one 10-minute bucket, added up."""

    start: datetime
    jobs: int = 0
    gpu_seconds: float = 0.0
    cost_usd: float = 0.0
    on_demand_usd: float = 0.0
    savings_usd: float = 0.0
    # Jobs some of whose cost has no price (an accelerator or strategy not in the table).
    unpriced: int = 0

    def plus(self, other: Bucket) -> Bucket:
        return Bucket(
            self.start,
            self.jobs + other.jobs,
            self.gpu_seconds + other.gpu_seconds,
            self.cost_usd + other.cost_usd,
            self.on_demand_usd + other.on_demand_usd,
            self.savings_usd + other.savings_usd,
            self.unpriced + other.unpriced,
        )


@dataclass(frozen=True)
class Tally:
    """The tick's tally as of ``as_of``. ``newest``: (createdAt, requestId), newest first (the
    list's order: time, then document id, both descending). ``since``: when it began adding
    ended jobs (its first build, less the week it read then)."""

    active: Mapping[str, int]
    buckets: tuple[Bucket, ...]
    newest: tuple[tuple[datetime, str], ...]
    since: datetime
    as_of: datetime

    def window(self, since: datetime) -> Bucket:
        """What the jobs that ended at or after ``since`` used, to the bucket: the bucket
        holding ``since`` counts whole."""
        first = _floor(since)
        total = Bucket(first)
        for bucket in self.buckets:
            if bucket.start >= first:
                total = total.plus(bucket)
        return total


def _floor(at: datetime) -> datetime:
    seconds = int(BUCKET.total_seconds())
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _bucket_of(raw: Mapping[str, Any]) -> Bucket | None:
    ended = raw.get("endedAt")
    if not isinstance(ended, datetime):
        return None
    cost = raw.get("cost")
    cost = cost if isinstance(cost, Mapping) else {}
    return Bucket(
        _floor(ended),
        1,
        _number(raw.get("gpuSeconds")),
        _number(cost.get("costUsd")),
        _number(cost.get("onDemandUsd")),
        _number(cost.get("savingsUsd")),
        1 if cost and cost.get("priced") is False else 0,
    )


def _folded(
    buckets: Iterable[Bucket], ended: Iterable[Mapping[str, Any]], now: datetime
) -> tuple[Bucket, ...]:
    by_start = {b.start: b for b in buckets}
    for raw in ended:
        bucket = _bucket_of(raw)
        if bucket is not None:
            kept = by_start.get(bucket.start)
            by_start[bucket.start] = bucket if kept is None else kept.plus(bucket)
    oldest = _floor(now - KEEP)
    return tuple(by_start[s] for s in sorted(by_start) if oldest <= s)


def _newest(
    kept: Iterable[tuple[datetime, str]], seen: Iterable[Mapping[str, Any]]
) -> tuple[tuple[datetime, str], ...]:
    by_id = {request_id: at for at, request_id in kept}
    for raw in seen:
        at, request_id = raw.get("createdAt"), raw.get("requestId")
        if isinstance(at, datetime) and isinstance(request_id, str) and request_id:
            by_id[request_id] = at
    ranked = sorted(by_id.items(), key=lambda item: (item[1], _doc(item[0])), reverse=True)
    return tuple((at, request_id) for request_id, at in ranked[:NEWEST])


def _doc(request_id: str) -> str:
    try:
        return doc_id(request_id)
    except ValueError:
        return request_id[:MAX_DOC_ID_BYTES]


def built(
    active: Mapping[str, int],
    ended: Iterable[Mapping[str, Any]],
    newest: Iterable[Mapping[str, Any]],
    now: datetime,
) -> Tally:
    """The tally from whole reads: the active counts, every record that ended within
    :data:`KEEP` (streamed: only the buckets are kept) and the newest records."""
    return Tally(dict(active), _folded((), ended, now), _newest((), newest), now - KEEP, now)


def added(
    tally: Tally,
    active: Mapping[str, int],
    newly_ended: Iterable[Mapping[str, Any]],
    seen: Iterable[Mapping[str, Any]],
    now: datetime,
) -> Tally:
    """``tally`` after one sync: the active counts as the list now holds them, the jobs seen
    ended for the first time added to their buckets (older than a week dropped), and the
    records the sync read ranked into the newest (a new record is always among them: its
    create is a write)."""
    return replace(
        tally,
        active=dict(active),
        buckets=_folded(tally.buckets, newly_ended, now),
        newest=_newest(tally.newest, seen),
        as_of=now,
    )


def active_counts(states: Iterable[str]) -> dict[str, int]:
    """How many of ``states`` there are of each."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return counts


# -- the stored form ------------------------------------------------------------------------


def encode(tally: Tally) -> dict[str, Any]:
    """The tally as one Firestore document: the buckets and the newest as JSON text (Firestore
    holds no arrays of arrays); at most :data:`NEWEST` ids of at most 1,500 bytes and a week of
    buckets, so under 250 KiB."""
    buckets = [
        [
            int(b.start.timestamp()),
            b.jobs,
            round(b.gpu_seconds, 3),
            round(b.cost_usd, 6),
            round(b.on_demand_usd, 6),
            round(b.savings_usd, 6),
            b.unpriced,
        ]
        for b in tally.buckets
    ]
    newest = [[at.isoformat(), request_id] for at, request_id in tally.newest]
    return {
        "format": FORMAT,
        "active": dict(tally.active),
        "buckets": json.dumps(buckets, separators=(",", ":")),
        "newest": json.dumps(newest, separators=(",", ":"), ensure_ascii=False),
        "since": tally.since,
        "asOf": tally.as_of,
    }


#: The most a stored tally's texts may hold: a week of buckets and the newest ids, with room.
MAX_TEXT_BYTES = 512 * 1024


def decode(raw: Mapping[str, Any] | None) -> Tally | None:
    """The tally from its stored form, or None when there is none or it cannot be read (then
    the page adds up the records itself, and the next tick rebuilds it)."""
    if not raw or raw.get("format") != FORMAT:
        return None
    since, as_of, active = raw.get("since"), raw.get("asOf"), raw.get("active")
    texts = raw.get("buckets"), raw.get("newest")
    if not (isinstance(since, datetime) and isinstance(as_of, datetime)):
        return None
    if not isinstance(active, Mapping) or not all(isinstance(t, str) for t in texts):
        return None
    if sum(len(str(t)) for t in texts) > MAX_TEXT_BYTES:
        return None
    try:
        buckets = tuple(_bucket(row) for row in json.loads(str(texts[0]), parse_constant=_bad))
        newest = tuple(_entry(row) for row in json.loads(str(texts[1]), parse_constant=_bad))
        counts = {str(k): int(v) for k, v in active.items() if isinstance(v, int)}
    except Exception:  # noqa: BLE001 - a tally that does not read is rebuilt, never raised
        return None
    if since.tzinfo is None or as_of.tzinfo is None:
        return None
    return Tally(counts, buckets, newest, since, as_of)


def _bad(name: str) -> Any:
    raise ValueError(f"{name} was never written")


def _bucket(row: Any) -> Bucket:
    start, jobs, gpu, cost, on_demand, savings, unpriced = row
    if not all(math.isfinite(float(v)) for v in row):
        raise ValueError("a bucket holds finite numbers")
    return Bucket(
        datetime.fromtimestamp(int(start), tz=UTC),
        int(jobs),
        float(gpu),
        float(cost),
        float(on_demand),
        float(savings),
        int(unpriced),
    )


def _entry(row: Any) -> tuple[datetime, str]:
    at, request_id = row
    if not isinstance(request_id, str):
        raise TypeError("a requestId is text")
    created = datetime.fromisoformat(at)
    if created.tzinfo is None:
        raise ValueError("a time without its zone was never written")
    return created, request_id


def first_ids(tally: Tally, count: int) -> Sequence[str]:
    """The requestIds of the ``count`` newest jobs."""
    return [request_id for _, request_id in tally.newest[:count]]
