"""The admission line: every request waiting for admission, kept compact between passes, so a
pass's cost does not grow with the line (issue 41).

Read from the records, the line costs one billed read per waiting record on every pass (on
every intake of a queued request, every job end, every tick): a burst of 2,000 queued requests
behind 10,000 others is tens of millions of reads. The line keeps them instead, as the watch
list keeps the active records (:mod:`shared.domain.model.watch`, whose stored form it
shares), each as :data:`LINE_FIELDS` only, as of a *mark*:

- **Stamped.** Every write that may move a record into, within or out of the line stamps it
  with its commit time (the store's ``lineTouchedAt``): a write of its ``admission`` field,
  and any write of a record whose ``admission.stage`` is WAITING (a cancel, an end).
  :func:`touches_line` is that rule, and the stores apply it on every record write. Other
  writes (a running job's progress) leave no stamp, so a busy control plane does not make the
  line's sync read more.
- **Synced.** A pass reads the line (one batch get), then the records stamped since its mark,
  as of the line's read (:func:`synced_line`): a pass reads what changed, never the whole line.
- **Built from the watch list.** The tick has every active record already (the watch list,
  itself checked against a count of the records): each tick writes the line again from
  them (:func:`built_line`), so a line that drifted (a hand edit, an older revision that did not
  stamp) is right again within a tick.

- **Saved as each queue's head.** A pass between ticks weighs only each queue's first few
  (``PASS_WINDOW``); decoding 10,000 entries to weigh 500 would cost every intake most of its
  time. So the line is stored as each queue's first :data:`HEAD_KEPT` in queue order, and,
  for a queue with more, its *bound*: the last entry kept (:func:`headed`). Every request
  past a bound orders after every entry kept, so a pass that weighs, of each queue, only what
  orders at or before its bound (:func:`within_bound`) weighs a true prefix of the queue,
  whatever left it or joined it since (the stamps bring those): never a request ahead of one
  it did not see. Only the tick, which has every waiting record, weighs the lines whole and
  sets the bounds afresh.

A line that is missing or does not read is read from the records whole, as before there was
one, until the tick writes it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.domain.admission.ledger import demand_from_list, workload_of
from shared.domain.admission.quota import Demand
from shared.domain.admission.rule import Workload, order_key
from shared.domain.model.records import JobRecord, Stored
from shared.domain.model.states import JobState
from shared.domain.model.watch import Watch, project, resynced

#: What the line keeps of a waiting record: enough to order it (its ``admission``: queue,
#: priority, demand, arrival, backoff) and to leave it out (ended, being cancelled).
LINE_FIELDS: tuple[str, ...] = ("requestId", "state", "cancelRequested", "admission")

#: The most records one sync reads as stamped since the line's mark; past it (a backlog the
#: line cannot have held) a pass reads the line from the records, as when there is none.
MAX_LINE_CHANGED = 2_000
#: What the saved line keeps of each queue: its first this many in queue order (twice what a
#: pass between ticks weighs, so half of them may leave between two ticks before a pass
#: weighs fewer than its window).
HEAD_KEPT = 50


#: The states a record may be in (a stored name outside them reads as terminal).
_STATES = frozenset(JobState.__members__)


@dataclass(frozen=True)
class Waiter:
    """A record in the line as a pass weighs it: what :data:`LINE_FIELDS` say, typed once
    (decoding a whole :class:`~shared.domain.model.records.JobRecord` per waiting record
    costs a pass more than everything else it does at 10,000)."""

    request_id: str
    #: Its state is terminal (or unknown, which reads as terminal, as a record's does).
    ended: bool
    cancel_requested: bool
    admission: Mapping[str, Any]

    @property
    def awaiting_admission(self) -> bool:
        """Waiting in its queue (as :attr:`JobRecord.awaiting_admission`)."""
        return self.admission.get("stage") == "WAITING" and not self.ended

    @functools.cached_property
    def demand(self) -> Demand:
        """The GPUs it asks for (``admission.demand``), read once."""
        return demand_from_list(self.admission.get("demand"))

    def workload(self) -> Workload | None:
        """Its workload (None when its ``admission`` does not read)."""
        return workload_of(self.request_id, self.admission, demand=self.demand)

    @property
    def order(self) -> tuple[int, datetime, str]:
        """Where it stands in its queue's order (:func:`order_of`)."""
        return order_of({"requestId": self.request_id, "admission": self.admission})

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Waiter:
        """The waiter of a line entry (or any record's fields).

        Examples:
            >>> w = Waiter.of({"requestId": "a", "state": "QUEUED",
            ...                "admission": {"stage": "WAITING"}})
            >>> w.awaiting_admission, Waiter.of({"state": "SUCCEEDED"}).ended
            (True, True)
        """
        state = str(raw.get("state"))
        known = state in _STATES
        admission = raw.get("admission")
        return cls(
            str(raw.get("requestId") or ""),
            not known or JobState(state).terminal,
            bool(raw.get("cancelRequested")),
            admission if isinstance(admission, Mapping) else {},
        )

    @classmethod
    def of_record(cls, record: JobRecord) -> Waiter:
        return cls(
            record.request_id, record.state.terminal, record.cancel_requested, record.admission
        )


def touches_line(current: Mapping[str, Any] | None, written: Iterable[str]) -> bool:
    """Whether a write of the fields ``written`` to a record now ``current`` (None: created)
    may move it into, within or out of the admission line: it writes the ``admission`` field,
    or the record waits in the line now.

    Examples:
        >>> touches_line(None, ["requestId", "admission"])
        True
        >>> touches_line({"admission": {"stage": "WAITING"}}, ["cancelRequested"])
        True
        >>> touches_line({"admission": {"stage": "ADMITTED"}}, ["vertexState"])
        False
        >>> touches_line({"state": "RUNNING"}, ["admission.stage"])
        True
    """
    if any(name == "admission" or name.startswith("admission.") for name in written):
        return True
    admission = (current or {}).get("admission")
    return isinstance(admission, Mapping) and admission.get("stage") == "WAITING"


def in_line(raw: Mapping[str, Any]) -> bool:
    """Whether a record (as :data:`LINE_FIELDS`) is in the line: its ``admission.stage`` is
    WAITING (one that ended meanwhile is kept until a pass takes it out, saying so)."""
    admission = raw.get("admission")
    return isinstance(admission, Mapping) and admission.get("stage") == "WAITING"


def built_line(records: Iterable[tuple[str, Stored]], mark: Any, now: datetime) -> Watch:
    """The line of the records ``records`` (each by its document id) as of ``mark``: those in
    the line, as :data:`LINE_FIELDS`."""
    entries = {key: project(s, LINE_FIELDS) for key, s in records if in_line(s.raw)}
    return Watch(entries, {}, mark, now)


def synced_line(
    line: Watch, changed: Sequence[tuple[str, Stored]], mark: Any, now: datetime
) -> Watch:
    """The line brought up to date with ``changed`` (every record stamped since its mark, as
    of ``mark``, the next mark): each replaces its entry, or takes it out.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2026, 12, 7, tzinfo=UTC)
        >>> waiting = Stored({"requestId": "a", "admission": {"stage": "WAITING"}}, 1)
        >>> line = synced_line(built_line([], 0, t), [("a", waiting)], 1, t)
        >>> sorted(line.active)
        ['a']
        >>> admitted = Stored({"requestId": "a", "admission": {"stage": "ADMITTED"}}, 2)
        >>> sorted(synced_line(line, [("a", admitted)], 2, t).active)
        []
    """
    return resynced(line, changed, mark, now, kept=in_line, fields=LINE_FIELDS)


def without(line: Watch, request_ids: Iterable[str], now: datetime) -> Watch:
    """The line less the entries of ``request_ids`` (admitted or ended by this pass): what
    their records' stamps would tell the next sync, told now."""
    gone = set(request_ids)
    kept = {k: s for k, s in line.active.items() if s.raw.get("requestId") not in gone}
    return Watch(kept, {}, line.mark, now, bounds=line.bounds)


def queue_of(raw: Mapping[str, Any]) -> str:
    """The queue a line entry waits in."""
    admission = raw.get("admission")
    return str(admission.get("queue")) if isinstance(admission, Mapping) else "None"


def order_of(raw: Mapping[str, Any]) -> tuple[int, datetime, str]:
    """Where a line entry stands in its queue's order (:func:`order_key`; an entry whose
    priority or arrival does not read stands first, as :func:`workload_of` reads none)."""
    admission = raw.get("admission")
    admission = admission if isinstance(admission, Mapping) else {}
    priority = admission.get("priority")
    since = admission.get("waitingSince")
    return order_key(
        priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        since if isinstance(since, datetime) else _FIRST,
        str(raw.get("requestId") or ""),
    )


#: Where an entry with no arrival time stands: first.
_FIRST = datetime.min.replace(tzinfo=UTC)


def within_bound(line: Watch, queue: str, order: tuple[int, datetime, str]) -> bool:
    """Whether a request of ``queue`` standing at ``order`` is within what the line holds of
    its queue: at or before the queue's bound (any, when the line holds the queue whole)."""
    bound = line.bounds.get(queue)
    return bound is None or order <= order_of(bound)


def headed(line: Watch) -> Watch:
    """The line as it is saved: each queue's first :data:`HEAD_KEPT` in queue order, and the
    bound of each queue that has more (its last entry kept). A queue bounded already keeps
    its bound, or a nearer one: what lies past it was never in this line.

    Examples:
        >>> from datetime import UTC, timedelta
        >>> t = datetime(2026, 12, 7, tzinfo=UTC)
        >>> def entry(i, priority=0):
        ...     admission = {"stage": "WAITING", "queue": "a", "priority": priority,
        ...                  "waitingSince": t + timedelta(seconds=i)}
        ...     return (f"r{i:03d}", Stored({"requestId": f"r{i:03d}", "admission": admission}, 1))
        >>> line = built_line([entry(i) for i in range(HEAD_KEPT + 10)], 0, t)
        >>> saved = headed(line)
        >>> len(saved.active), saved.bounds["a"]["requestId"]
        (50, 'r049')
        >>> late = entry(99)[1].raw
        >>> within_bound(saved, "a", order_of(late))
        False
        >>> within_bound(saved, "a", order_of(entry(100, priority=9)[1].raw))
        True
    """
    by_queue: dict[str, list[tuple[tuple[int, datetime, str], str, Stored]]] = {}
    for key, stored in line.active.items():
        if Waiter.of(stored.raw).workload() is None:
            # Its admission does not read: no pass weighs it, so it holds no place in a head
            # (left in the line, it would stand first and push the bound before every other).
            continue
        item = (order_of(stored.raw), key, stored)
        by_queue.setdefault(queue_of(stored.raw), []).append(item)
    bounds = dict(line.bounds)
    entries: dict[str, Stored] = {}
    for queue, found in by_queue.items():
        kept = sorted(found, key=lambda item: item[0])
        if queue in bounds:
            # Past the bound, a request is one of many this line never held: left out.
            last = order_of(bounds[queue])
            kept = [item for item in kept if item[0] <= last]
        if len(kept) > HEAD_KEPT:
            kept = kept[:HEAD_KEPT]
            bounds[queue] = dict(kept[-1][2].raw)
        entries.update((key, stored) for _, key, stored in kept)
    return Watch(entries, {}, line.mark, line.synced_at, line.built_at, bounds)
