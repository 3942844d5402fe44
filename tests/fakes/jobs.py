"""The job stores in memory (:class:`~shared.app.ports.JobStore`, ``AttemptStore``,
``AdmissionStore``, ``WatchStore``, ``SeriesStore``): storage only, like Firestore (copies in
and out, every sequence read back as a list, attempt fields merged as ``set(merge=True)``
merges them, a version per record that a known record's write must still match).
tests/integration/test_store_contract.py and test_watch_contract.py run the same cases on these
and on the Firestore adapters.

The five share one :class:`InMemoryJobDatabase`, as the adapters share one Firestore database:
a record's transaction writes its attempt, a ledger's its record, and a series decision and
the watch list's reads see the records, so their documents live in one place, under one lock.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from shared.app.ports import MAX_WATCHERS
from shared.app.repository.jobs import JobRecords
from shared.domain.admission.line import LINE_FIELDS, touches_line
from shared.domain.model import tally as tallies
from shared.domain.model import watch as watches
from shared.domain.model.changes import Change, Decided, Written
from shared.domain.model.ids import doc_id
from shared.domain.model.records import TICK_FIELDS, Stored
from shared.domain.model.states import JobState
from shared.domain.model.tally import Tally
from shared.domain.model.watch import WATCH_FIELDS, Saved, Watch
from tests.fakes.documents import as_stored, check_size, merge, select

R = TypeVar("R")


class InMemoryJobDatabase:
    """The documents of the job stores' collections (``jobs`` and their ``attempts``,
    ``series``, ``admission``, ``watch``), one lock over all of them.

    ``calls`` counts each store method; ``ops`` counts what Firestore would bill and serve:
    reads (a get, or a transact without a current known version), writes and queries."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.attempts: dict[tuple[str, int], dict[str, Any]] = {}
        self.series: dict[str, dict[str, Any]] = {}
        # The admission ledger (admission/ledger), None until first written.
        self.ledger: dict[str, Any] | None = None
        self.ledger_version = 0
        # What operators see of admission (admission/summary), None until first written.
        self.admission_summary: dict[str, Any] | None = None
        self.versions: dict[str, int] = {}
        # Every write of a record takes the next version: it is also the record's stamp
        # (Firestore's touchedAt), and a watch mark is the version the next write will take.
        self.last_version = 0
        # The tick's watch list as saved (watch/head, watch/shard-N, watch/tally): the
        # shards in their stored form, so the fake holds the list to its bound as Firestore's
        # documents do.
        self.watch_head: dict[str, Any] | None = None
        self.watch_shards: list[bytes] = []
        self.watch_tally: dict[str, Any] | None = None
        self.watch_version = 0
        # The admission line as saved (line/head, line/shard-N), kept as the watch list is.
        self.line_head: dict[str, Any] | None = None
        self.line_shards: list[bytes] = []
        self.line_tally: dict[str, Any] | None = None
        self.line_version = 0
        # The versions of each record's writes that stamped it for the line (touches_line).
        self.line_stamps: dict[str, list[int]] = {}
        self.history: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.calls: Counter[str] = Counter()
        self.ops: Counter[str] = Counter()
        self.lock = threading.RLock()
        # False while a write that leaves no stamp is made (see written).
        self.stamping = True

    def written(self, request_id: str, line: bool = False) -> None:
        """A write of the record: its next version, and its state then (for reads as of a
        version: the history Firestore keeps for reads at a past time).

        With ``stamping`` False the write is one that does not stamp the record (an older
        revision of the functions during a rollout, a hand edit): its version moves (the
        update time a precondition reads), but no query for records changed since a mark
        finds it."""
        self.last_version += 1
        self.versions[request_id] = self.last_version
        if self.stamping:
            self.history.setdefault(request_id, []).append(
                (self.last_version, copy.deepcopy(self.jobs[request_id]))
            )
            if line:  # the write may move it in the admission line: stamped for it too
                self.line_stamps.setdefault(request_id, []).append(self.last_version)

    def as_of(self, request_id: str, at: Any) -> dict[str, Any] | None:
        """The record as it was at version ``at`` (now when None), or None when it did not
        exist yet. A record changed by hand since its last write (no version: as a console
        edit leaves no stamp) reads as it is now, unless a later write followed."""
        current = self.jobs.get(request_id)
        if at is None or current is None:
            return current
        kept = self.history.get(request_id, [])
        if not kept or kept[-1][0] <= at:
            return current if not kept or kept[0][0] <= at else None
        before = [doc for version, doc in kept if version <= at]
        return before[-1] if before else None

    def count(self, method: str, **ops: int) -> None:
        self.calls[method] += 1
        self.ops.update(ops)

    def snapshot(self, request_id: str) -> Stored:
        return Stored(copy.deepcopy(self.jobs[request_id]), self.versions[request_id])

    def partial(self, found: Iterable[str], fields: Sequence[str], at: Any = None) -> list[Stored]:
        """Records as a query of ``fields`` returns them (as of version ``at``), each counted
        as a document a query returned."""
        rows = []
        for rid in found:
            doc = self.as_of(rid, at)
            if doc is not None:
                rows.append(Stored(select(doc, fields), self.versions[rid], True, doc_id(rid)))
        self.ops["returned"] += len(rows)
        return rows

    def active_ids(self, at: Any) -> list[str]:
        found = []
        for rid in self.jobs:
            doc = self.as_of(rid, at)
            if doc is not None and not JobState(doc["state"]).terminal:
                found.append(rid)
        return found

    def where(self, test: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        with self.lock:
            self.ops["query"] += 1
            return [copy.deepcopy(r) for r in self.jobs.values() if test(r)]

    def update_record(self, request_id: str, change: Change) -> None:
        """Apply a change's record fields and deletes to a stored record (checked already)."""
        current = self.jobs[request_id]
        line = touches_line(current, [*change.record, *change.deletes])
        current.update(as_stored(change.record))
        for name in change.deletes:
            current.pop(name, None)
        self.written(request_id, line)


class _OnDatabase:
    """A store over an :class:`InMemoryJobDatabase` (a new one of its own when none given)."""

    def __init__(self, database: InMemoryJobDatabase | None = None) -> None:
        self.database = database if database is not None else InMemoryJobDatabase()


class InMemoryJobStore(_OnDatabase):
    """The JobStore port in memory: the records and the queries over them."""

    def get(self, request_id: str) -> dict[str, Any] | None:
        db = self.database
        with db.lock:
            db.count("get", read=1)
            return copy.deepcopy(db.jobs.get(request_id))

    def read(self, request_id: str) -> Stored | None:
        db = self.database
        with db.lock:
            db.count("read", read=1)
            return db.snapshot(request_id) if request_id in db.jobs else None

    def create(self, request_id: str, record: Mapping[str, Any]) -> Stored | None:
        db = self.database
        with db.lock:
            db.count("create", write=1)
            if request_id in db.jobs:
                return None
            check_size(f"jobs/{doc_id(request_id)}", record)
            db.jobs[request_id] = as_stored(record)
            db.written(request_id, touches_line(None, record))
            return db.snapshot(request_id)

    def transact(
        self,
        request_id: str,
        decide: Callable[[dict[str, Any]], Change | Decided[Change, Any] | None],
        known: Stored | None = None,
    ) -> Written[Change, Stored] | None:
        db = self.database
        with db.lock:
            db.calls["transact"] += 1
            current = db.jobs.get(request_id)
            if current is None:
                return None
            if known is not None and known.version == db.versions[request_id]:
                seen = copy.deepcopy(dict(known.raw))
            else:
                # No known version, or a stale one (Firestore's precondition would fail and
                # the adapter would read): decided on what is stored.
                db.ops["read"] += 1
                seen = copy.deepcopy(current)
            made = decide(seen)
            change = made.change if isinstance(made, Decided) else made
            result = made.result if isinstance(made, Decided) else None
            if change is None:
                return Written(None, Stored(seen, db.versions[request_id]), result)
            db.ops["write"] += 1
            number = change.attempt_no or int(current.get("attempt", 1))
            # The batch commits whole or not at all: check every document before any write.
            check_size(f"jobs/{doc_id(request_id)}", change.applied_to(current))
            if change.attempt:
                attempt = copy.deepcopy(db.attempts.get((request_id, number), {}))
                merge(attempt, change.attempt)
                check_size(f"jobs/{doc_id(request_id)}/attempts/{number}", attempt)
            if change.record or change.deletes:
                db.update_record(request_id, change)
            if change.attempt:
                merge(db.attempts.setdefault((request_id, number), {}), change.attempt)
            return Written(change, db.snapshot(request_id), result)

    def find_by_job_id(self, job_id: str) -> Stored | None:
        db = self.database
        with db.lock:
            db.count("find_by_job_id", query=1)
            for request_id, record in db.jobs.items():
                if job_id in (record.get("vertexJobIds") or []):
                    return db.snapshot(request_id)
            return None

    def active(self, at: Any = None) -> list[Stored]:
        db = self.database
        with db.lock:
            db.count("active", query=1)
            return db.partial(sorted(db.active_ids(at), key=doc_id), TICK_FIELDS, at)

    def count_active(self, at: Any) -> int:
        db = self.database
        with db.lock:
            db.count("count_active", query=1)
            return len(db.active_ids(at))

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        db = self.database
        with db.lock:
            db.count("changed_since", query=1)
            # Written after the mark and by ``at``, read as it was at ``at``, by stamp.
            found = sorted(
                (max(v for v, _ in kept if mark < v <= at), rid)
                for rid, kept in db.history.items()
                if any(mark < v <= at for v, _ in kept)
            )
            return db.partial([rid for _, rid in found][: most + 1], WATCH_FIELDS, at)

    def ended_since(self, since: datetime, at: Any = None) -> Iterator[Stored]:
        db = self.database
        with db.lock:
            db.count("ended_since", query=1)
            found = []
            for rid in db.jobs:
                doc = db.as_of(rid, at)
                ended = doc.get("endedAt") if doc is not None else None
                if isinstance(ended, datetime) and ended >= since:
                    found.append((ended, doc_id(rid), rid))
            rows = db.partial([rid for _, _, rid in sorted(found)], WATCH_FIELDS, at)
        yield from rows

    def newest(self, limit: int, at: Any = None) -> list[dict[str, Any]]:
        db = self.database
        with db.lock:
            db.count("newest", query=1)
            found = []
            for rid in db.jobs:
                doc = db.as_of(rid, at)
                if doc is not None and isinstance(doc.get("createdAt"), datetime):
                    found.append((doc["createdAt"], doc_id(rid), rid))
            ranked = [rid for _, _, rid in sorted(found, reverse=True)[:limit]]
            rows = db.partial(ranked, ("requestId", "createdAt"), at)
            return [dict(row.raw) for row in rows]

    def due_submissions(self, now: datetime) -> list[str]:
        due = self.database.where(
            lambda r: r.get("nextAttemptAt") is not None and r["nextAttemptAt"] <= now
        )
        return [r["requestId"] for r in due]

    def with_outbox(self) -> list[str]:
        found = self.database.where(lambda r: r.get("outboxPending") is True)
        return [r["requestId"] for r in found]

    def with_pending_cancels(self) -> list[str]:
        found = self.database.where(lambda r: r.get("cancelPending") is True)
        return [r["requestId"] for r in found]

    def with_checkpoint_prefix(self, prefix: str) -> list[dict[str, Any]]:
        found = self.database.where(
            lambda r: r.get("checkpointPrefix") == prefix and not JobState(r["state"]).terminal
        )
        return found[:MAX_WATCHERS]


class InMemoryAttemptStore(_OnDatabase):
    """The AttemptStore port in memory: the attempt documents of the records."""

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        db = self.database
        with db.lock:
            db.count("get_attempt", read=1)
            return copy.deepcopy(db.attempts.get((request_id, attempt)))

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        db = self.database
        with db.lock:
            db.count("update_attempt", write=1)
            merged = copy.deepcopy(db.attempts.get((request_id, attempt), {}))
            merge(merged, fields)
            check_size(f"jobs/{doc_id(request_id)}/attempts/{attempt}", merged)
            db.attempts[(request_id, attempt)] = merged


class InMemoryAdmissionStore(_OnDatabase):
    """The AdmissionStore port in memory: the ledger, the summary and the waiting line."""

    def write_admission_summary(self, document: dict[str, Any]) -> None:
        db = self.database
        with db.lock:
            check_size("admission/summary", document)
            db.ops["write"] += 1
            db.admission_summary = as_stored(document)

    def read_ledger(self) -> Stored | None:
        db = self.database
        with db.lock:
            db.count("read_ledger", read=1)
            if db.ledger is None:
                return None
            return Stored(copy.deepcopy(db.ledger), db.ledger_version)

    def transact_ledger(
        self,
        request_id: str | None,
        decide: Callable[
            [dict[str, Any] | None, dict[str, Any] | None],
            tuple[dict[str, Any] | None, Change | None] | None,
        ],
    ) -> bool:
        db = self.database
        with db.lock:
            db.count("transact_ledger", read=1 + (request_id is not None))
            record = db.jobs.get(request_id) if request_id is not None else None
            decided = decide(copy.deepcopy(db.ledger), copy.deepcopy(record))
            if decided is None:
                return False
            write, change = decided
            if change is not None and record is None:
                change = None
            if write is None and change is None:
                return False
            # The batch commits whole or not at all: check every document before any write.
            if write is not None:
                check_size("admission/ledger", write)
            if change is not None and record is not None:
                check_size(f"jobs/{doc_id(str(request_id))}", change.applied_to(record))
            if write is not None:
                db.ops["write"] += 1
                db.ledger = as_stored(write)
                db.ledger_version += 1
            if change is not None and record is not None and request_id is not None:
                db.ops["write"] += 1
                db.update_record(request_id, change)
            return True

    def _waiting(self, queue: str | None) -> list[tuple[str, dict[str, Any]]]:
        found = [
            (rid, r)
            for rid, r in self.database.jobs.items()
            if isinstance(r.get("admission"), dict)
            and r["admission"].get("stage") == "WAITING"
            and (queue is None or r["admission"].get("queue") == queue)
        ]
        found.sort(key=lambda item: (item[1]["admission"].get("waitingSince"), doc_id(item[0])))
        return found

    def waiting_admission(self, queue: str | None = None, most: int = 1) -> list[Stored]:
        db = self.database
        with db.lock:
            db.count("waiting_admission", query=1)
            rows = db.partial([rid for rid, _ in self._waiting(queue)[:most]], TICK_FIELDS)
            return [Stored(dict(row.raw), row.version, partial=True) for row in rows]

    def count_waiting(self, queue: str) -> int:
        db = self.database
        with db.lock:
            db.count("count_waiting", query=1)
            return len(self._waiting(queue))

    def read_line(self) -> Saved:
        return InMemoryWatchStore(self.database, "line").read_watch()

    def save_line(self, line: Watch, version: Any) -> bool:
        return InMemoryWatchStore(self.database, "line").save_watch(line, None, version)

    def line_changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        db = self.database
        with db.lock:
            db.count("line_changed_since", query=1)
            # Stamped for the line after the mark and by ``at``, read as it was at ``at``.
            found = sorted(
                (max(v for v in kept if mark < v <= at), rid)
                for rid, kept in db.line_stamps.items()
                if any(mark < v <= at for v in kept)
            )
            return db.partial([rid for _, rid in found][: most + 1], LINE_FIELDS, at)


class InMemoryWatchStore(_OnDatabase):
    """The WatchStore port in memory: the watch list as saved, read as of the records' last
    version (the database's time). Named ``line``: the admission line, kept the same way in
    documents of its own (no tally)."""

    def __init__(self, database: InMemoryJobDatabase | None = None, name: str = "watch") -> None:
        super().__init__(database)
        self.name = name

    def _get(self, part: str) -> Any:
        return getattr(self.database, f"{self.name}_{part}")

    def _set(self, part: str, value: Any) -> None:
        setattr(self.database, f"{self.name}_{part}", value)

    def read_watch(self) -> Saved:
        db = self.database
        with db.lock:
            tally = self.name == "watch"
            # One batch get of the head, the tally and every shard a list may have.
            db.ops[f"{self.name}_read"] += 1 + tally + watches.MAX_SHARDS
            db.calls[f"read_{self.name}"] += 1
            # Reads as of this one are as of the last version written.
            at = db.last_version
            head = self._get("head")
            if head is None:
                return Saved(None, None, None, None, at)
            version = self._get("version")
            overflowed = head.get("overflowedAt")
            if isinstance(overflowed, datetime):
                return Saved(None, None, overflowed, version, at)
            return Saved(
                watches.decode(list(self._get("shards"))),
                tallies.decode(copy.deepcopy(self._get("tally"))),
                None,
                version,
                at,
            )

    def save_watch(
        self, watch: Watch | None, tally: Tally | None, version: Any, *, list_too: bool = True
    ) -> bool:
        db = self.database
        with db.lock:
            shards = watches.encode(watch) if watch is not None else []
            stored_tally = tallies.encode(tally) if tally is not None else None
            for i, shard in enumerate(shards):
                check_size(f"{self.name}/shard-{i}", {"data": shard})
            if stored_tally is not None:
                check_size(f"{self.name}/tally", stored_tally)
            current = self._get("version") if self._get("head") is not None else None
            if version != current:
                return False  # another writer saved since this one read: the precondition fails
            # The head and the tally, and every shard when the list is written too.
            tallied = self.name == "watch"
            db.ops[f"{self.name}_write"] += 1 + tallied + (watches.MAX_SHARDS if list_too else 0)
            db.calls[f"save_{self.name}"] += 1
            if list_too:
                overflowed = None if watch is not None else datetime.now(UTC)
                self._set("head", {"shards": len(shards), "overflowedAt": overflowed})
                self._set("shards", shards)
            self._set("tally", as_stored(stored_tally) if stored_tally is not None else None)
            self._set("version", self._get("version") + 1)
            return True


class InMemorySeriesStore(_OnDatabase):
    """The SeriesStore port in memory: the series documents (a decision reads the holding
    request's record in the same database)."""

    def transact_series(
        self,
        series: str,
        decide: Callable[[dict[str, Any] | None, dict[str, Any] | None], Decided[Any, R]],
    ) -> R:
        db = self.database
        with db.lock:
            document = db.series.get(series)
            holder = (document or {}).get("current")
            current = db.jobs.get(holder) if isinstance(holder, str) else None
            decided = decide(copy.deepcopy(document), copy.deepcopy(current))
            if decided.change is not None:
                check_size(f"series/{doc_id(series)}", decided.change)
                db.series[series] = as_stored(decided.change)
            return decided.result


def in_memory_job_stores(database: InMemoryJobDatabase | None = None) -> dict[str, Any]:
    """The five job stores in memory on ``database`` (a new one when None), by the names
    :class:`~shared.bootstrap.Ports` and :class:`JobRecords` take them."""
    database = database if database is not None else InMemoryJobDatabase()
    return {
        "job_store": InMemoryJobStore(database),
        "attempt_store": InMemoryAttemptStore(database),
        "admission_store": InMemoryAdmissionStore(database),
        "watch_store": InMemoryWatchStore(database),
        "series_store": InMemorySeriesStore(database),
    }


def in_memory_records(
    default_location: str, database: InMemoryJobDatabase | None = None
) -> JobRecords:
    """:class:`JobRecords` over the five job stores in memory, on ``database`` (a new one
    when None)."""
    return JobRecords(**in_memory_job_stores(database), default_location=default_location)
