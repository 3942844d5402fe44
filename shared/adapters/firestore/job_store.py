"""FirestoreJobStore: the JobStore port on Cloud Firestore (collection ``jobs``), storage only.

``create()`` is Firestore's conditional put (it fails when the document exists); every other
write reads the record, lets a pure decision compute the change and writes it if the record
is unchanged since the read (:func:`transact_document`). What the writes mean lives in
:mod:`shared.app.repository.jobs` and the domain.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.app.ports import MAX_WATCHERS
from shared.domain.model import tally as tallies
from shared.domain.model import watch as watches
from shared.domain.model.changes import AnyChange, Change, Written
from shared.domain.model.ids import doc_id
from shared.domain.model.records import TICK_FIELDS, Stored
from shared.domain.model.states import JobState
from shared.domain.model.tally import Tally
from shared.domain.model.watch import WATCH_FIELDS, Saved, Watch
from shared.kernel.config import Settings
from shared.kernel.errors import StoreUnavailable

T = TypeVar("T")

JOBS = "jobs"
ATTEMPTS = "attempts"
SERIES = "series"
ADMISSION = "admission"
LEDGER = "ledger"
SUMMARY = "summary"
#: The tick's watch list (shared.domain.model.watch): ``watch/head``, ``watch/shard-N`` (the
#: list, compressed) and ``watch/tally`` (what the status page reads), saved in one batch.
WATCH = "watch"
HEAD = "head"
TALLY = "tally"
#: Every write of a record stamps it with its commit time (a server timestamp), so the tick
#: reads only the records written since its watch list's mark.
TOUCHED_AT = "touchedAt"
#: How far before its mark a sync reads: a read as of a time sees every commit before it, and
#: a later commit's stamp is later; the margin still re-reads the writes of the second before
#: the mark rather than trust that the stamp and the read time tie exactly (the emulator keeps
#: stamps to the millisecond).
MARK_MARGIN = timedelta(seconds=1)

_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.Aborted,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Unknown,
    gexc.RetryError,
)


ACTIVE_STATES = [s.value for s in JobState if not s.terminal]


#: Every query the Firestore adapters run, in the order declared (see :class:`Query`).
DECLARED: list[Query] = []


@dataclass(frozen=True)
class Query:
    """A query an adapter runs, declared once: its collection, the field and operator of
    each filter, and the field and direction (``ASCENDING``, ``DESCENDING``) of each order.
    The adapters build every query from a declaration, so the declarations are the queries;
    the infra drift test checks that each composite one has its index.
    """

    collection: str
    filters: tuple[tuple[str, str], ...]
    order: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        DECLARED.append(self)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the query filters or orders on, each once, filters first."""
        return tuple(dict.fromkeys(name for name, _ in (*self.filters, *self.order)))

    @property
    def composite(self) -> bool:
        """Filters or orders on more than one field need a composite index (Firestore builds
        the single-field ones itself)."""
        return len(self.fields) > 1

    def on(self, db: Any, *values: Any, ordered: bool = True) -> Any:
        """The query on ``db``, with one value per filter, in order, then its orders (none
        when not ``ordered``: a count)."""
        query = db.collection(self.collection)
        for (field, op), value in zip(self.filters, values, strict=True):
            query = query.where(filter=FieldFilter(field, op, value))
        for field, direction in self.order if ordered else ():
            query = query.order_by(field, direction=direction)
        return query


BY_JOB_ID = Query(JOBS, (("vertexJobIds", "array_contains"),))
ACTIVE = Query(JOBS, (("state", "in"),))
WATCHING = Query(JOBS, (("checkpointPrefix", "=="), ("state", "in")))
ENDED_SINCE = Query(JOBS, (("endedAt", ">="),))
DUE = Query(JOBS, (("nextAttemptAt", "<="),))
WITH_OUTBOX = Query(JOBS, (("outboxPending", "=="),))
WITH_PENDING_CANCELS = Query(JOBS, (("cancelPending", "=="),))
WAITING = Query(JOBS, (("admission.stage", "=="),), (("admission.waitingSince", "ASCENDING"),))
WAITING_IN = Query(
    JOBS,
    (("admission.stage", "=="), ("admission.queue", "==")),
    (("admission.waitingSince", "ASCENDING"),),
)
CHANGED = Query(JOBS, ((TOUCHED_AT, ">="),), ((TOUCHED_AT, "ASCENDING"),))
JOBS_NEWEST = Query(JOBS, (), (("createdAt", "DESCENDING"),))


def call_firestore(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except _TRANSIENT as exc:
        # RetryError included: a conditional write that kept losing to other writers.
        raise StoreUnavailable(f"Firestore {what} failed: {exc}") from exc


def create_document(ref: Any, record: Mapping[str, Any]) -> Any | None:
    """Firestore's conditional put: create ``ref`` from ``record``; its version (update time),
    or None when it exists."""
    try:
        result = call_firestore("create", lambda: ref.create(dict(record)))
    except gexc.Conflict:
        return None  # AlreadyExists is a Conflict
    return result.update_time


#: How long a write may keep losing to concurrent writers of its document before it gives up
#: (StoreUnavailable: the message is redelivered).
CONTENTION_SECONDS = 20.0


def transact_document(
    db: Any,
    ref: Any,
    decide: Callable[[dict[str, Any]], AnyChange | None],
    write: Callable[[Any, dict[str, Any], AnyChange, Any], bool],
    known: tuple[Mapping[str, Any], Any] | None = None,
) -> Written[AnyChange, Stored] | None:
    """Read ``ref``, let ``decide`` compute a change, ``write`` it only if the document is
    still as read: one atomic read-decide-write.

    Optimistic, not a lock: ``write`` adds its writes to a batch (True when it updates the
    document itself), and the document's update carries the precondition
    ``last_update_time`` of the read (the ``option`` it is given). A concurrent writer makes
    the commit fail with FAILED_PRECONDITION, and the whole step runs again on a fresh read
    (api_core's retry, with backoff). Unlike a read-write transaction this holds no lock
    between the read and the commit, so two writers of one record never wait on each other:
    the Firestore emulator resolves such waits only by a lock timeout. A missing document is
    never decided on; ``decide`` must be pure, as it may run again.

    ``known`` (the document and its version, as the caller last read or wrote it) stands in
    for the first read: the precondition is the same, so only the read is saved.
    """
    pending = [known] if known is not None else []

    def attempt() -> Written[AnyChange, Stored] | None:
        if pending:
            raw, version = pending.pop()
            current = dict(raw)
        else:
            snap = ref.get()
            if not snap.exists:
                return None
            current, version = _record(snap), snap.update_time
        change = decide(current)
        if change is None:
            return Written(None, Stored(current, version))
        batch = db.batch()
        updated = write(batch, current, change, db.write_option(last_update_time=version))
        results = batch.commit()
        # The document's own update is the batch's first write; without one it is unchanged.
        after = Stored(change.applied_to(current), results[0].update_time if updated else version)
        return Written(change, after)

    result: Written[AnyChange, Stored] | None = call_firestore(
        "conditional write", _until_unchanged(attempt)
    )
    return result


def _until_unchanged(step: Callable[[], T]) -> Callable[[], T]:
    """``step`` run again, with backoff, while its conditional write finds the document
    changed since its read (FAILED_PRECONDITION), created meanwhile (ALREADY_EXISTS) or
    deleted since (NOT_FOUND)."""
    wrapped: Callable[[], T] = _contention_retry()(step)
    return wrapped


@functools.cache
def _contention_retry() -> Any:
    """:func:`_until_unchanged`'s policy, built once: a Retry is immutable, and building it
    (its predicate too) for every write was measurable CPU on intake's path."""
    from google.api_core.retry import Retry, if_exception_type

    # NotFound: a known version of a document deleted since; the fresh read finds it gone.
    return Retry(
        predicate=if_exception_type(gexc.FailedPrecondition, gexc.Conflict, gexc.NotFound),
        initial=0.01,
        maximum=0.5,
        multiplier=2.0,
        timeout=CONTENTION_SECONDS,
    )


#: Documents per page of the tick's reads: each page is one query, and holds no more than
#: this many partial records in flight.
PAGE_SIZE = 500


def _pages(
    query: Any, fields: tuple[str, ...], most: int | None = None, at: Any = None
) -> list[Any]:
    """Every document ``query`` finds (the first ``most`` when given), of ``fields`` only,
    read :data:`PAGE_SIZE` at a time (each page a query of its own, resumed after the last
    document of the one before), as of ``at`` (a read time; now when None)."""
    found: list[Any] = []
    for doc in _stream(query, fields, PAGE_SIZE, at):
        found.append(doc)
        if most is not None and len(found) >= most:
            break
    return found


def _stream(query: Any, fields: tuple[str, ...], size: int, at: Any = None) -> Iterator[Any]:
    """:func:`_pages` one page at a time: only a page is held in memory. The query's order
    fields must be among ``fields`` (a page resumes after the last document's values)."""
    query = query.select(list(fields)).limit(size)
    last = None
    while True:
        page = query.start_after(last) if last is not None else query
        docs: list[Any] = call_firestore("query", functools.partial(_all, page, at))
        yield from docs
        if len(docs) < size:
            return
        last = docs[-1]


def _all(query: Any, at: Any = None) -> list[Any]:
    return list(query.stream(read_time=at))


def _partial(docs: Iterable[Any]) -> list[Stored]:
    return [Stored(_record(d), d.update_time, partial=True, key=d.id) for d in docs]


#: Documents per page of a build's read of the week's ended records (of a few small fields).
ENDED_PAGE = 2000


def _record(snap: Any) -> dict[str, Any]:
    """A document's fields as the port hands them out: without the write stamp, which is
    storage's own (only :meth:`FirestoreJobStore.changed_since` reads it, to page by it)."""
    fields: dict[str, Any] = snap.to_dict() or {}
    fields.pop(TOUCHED_AT, None)
    return fields


def _to_microseconds(at: datetime) -> datetime:
    """``at`` truncated to the microsecond (a read time may carry nanoseconds; a read *at* a
    time must not), as a plain datetime in UTC."""
    t = at.astimezone(UTC)
    return datetime(t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond, UTC)


def _stamp() -> Any:
    from google.cloud import firestore

    return firestore.SERVER_TIMESTAMP


def _stored(snap: Any) -> Stored:
    return Stored(_record(snap), snap.update_time)


class FirestoreJobStore:
    """Job records in Firestore; the client is built on first use."""

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self._settings = settings
        self._db = client
        self._jobs: Any = None
        self._lock = threading.Lock()

    @property
    def db(self) -> Any:
        db = self._db
        if db is not None:  # built: no lock needed to read it (every write takes this path)
            return db
        with self._lock:
            if self._db is None:
                from google.cloud import firestore

                self._db = firestore.Client(project=self._settings.project)
            return self._db

    def _ref(self, request_id: str) -> Any:
        jobs = self._jobs
        if jobs is None:  # one CollectionReference serves every thread: it holds no state
            jobs = self._jobs = self.db.collection(JOBS)
        return jobs.document(doc_id(request_id))

    def get(self, request_id: str) -> dict[str, Any] | None:
        stored = self.read(request_id)
        return None if stored is None else dict(stored.raw)

    def read(self, request_id: str) -> Stored | None:
        snap = call_firestore("get", lambda: self._ref(request_id).get())
        return _stored(snap) if snap.exists else None

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        ref = self._ref(request_id).collection(ATTEMPTS).document(str(attempt))
        snap = call_firestore("get attempt", ref.get)
        return snap.to_dict() if snap.exists else None

    def create(self, request_id: str, record: Mapping[str, Any]) -> Stored | None:
        version = create_document(self._ref(request_id), {**record, TOUCHED_AT: _stamp()})
        return None if version is None else Stored(dict(record), version)

    def transact(
        self,
        request_id: str,
        decide: Callable[[dict[str, Any]], Change | None],
        known: Stored | None = None,
    ) -> Written[Change, Stored] | None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        def write(batch: Any, current: dict[str, Any], change: Change, unchanged: Any) -> bool:
            deletes = {name: firestore.DELETE_FIELD for name in change.deletes}
            updated = bool(change.record or deletes)
            if updated:  # Firestore refuses an update with no fields
                fields = {**change.record, **deletes, TOUCHED_AT: firestore.SERVER_TIMESTAMP}
                batch.update(ref, fields, option=unchanged)
            # Attempt fields alone (update_attempt) are a merge that no read decided.
            if change.attempt:
                number = change.attempt_no or current.get("attempt", 1)
                attempt_ref = ref.collection(ATTEMPTS).document(str(number))
                batch.set(attempt_ref, change.attempt, merge=True)
            return updated

        seen = None if known is None else (known.raw, known.version)
        return transact_document(self.db, ref, decide, write, seen)

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        ref = self._ref(request_id).collection(ATTEMPTS).document(str(attempt))
        call_firestore("update attempt", lambda: ref.set(dict(fields), merge=True))

    def find_by_job_id(self, job_id: str) -> Stored | None:
        query = BY_JOB_ID.on(self.db, job_id).limit(1)
        docs = call_firestore("query", lambda: list(query.stream()))
        return _stored(docs[0]) if docs else None

    def active(self, at: Any = None) -> list[Stored]:
        query = ACTIVE.on(self.db, ACTIVE_STATES).order_by("__name__")
        return _partial(_pages(query, TICK_FIELDS, at=at))

    def count_active(self, at: Any) -> int:
        query = ACTIVE.on(self.db, ACTIVE_STATES).count(alias="n")
        result = call_firestore("count", lambda: query.get(read_time=at))
        return int(result[0][0].value)

    def with_checkpoint_prefix(self, prefix: str) -> list[dict[str, Any]]:
        # Equality plus "in": the composite index (checkpointPrefix, state) serves it.
        query = WATCHING.on(self.db, prefix, ACTIVE_STATES).limit(MAX_WATCHERS)
        return call_firestore("query", lambda: [_record(d) for d in query.stream()])

    def transact_series(
        self,
        series: str,
        decide: Callable[[dict[str, Any] | None, dict[str, Any] | None], dict[str, Any] | None],
    ) -> None:
        ref = self.db.collection(SERIES).document(doc_id(series))

        def attempt() -> None:
            # Optimistic, like transact_document: the series document is written only if it
            # is still as read (created only if still absent), so two slots never both take
            # the series; the holder's record is read as of the decision.
            snap = ref.get()
            document = snap.to_dict() if snap.exists else None
            current = None
            holder = (document or {}).get("current")
            if isinstance(holder, str) and holder:
                held = self._ref(holder).get()
                current = _record(held) if held.exists else None
            write = decide(document, current)
            if write is None:
                return
            if snap.exists:
                ref.update(write, option=self.db.write_option(last_update_time=snap.update_time))
            else:
                ref.create(write)

        call_firestore("series write", _until_unchanged(attempt))

    def _ledger_ref(self) -> Any:
        return self.db.collection(ADMISSION).document(LEDGER)

    def read_ledger(self) -> Stored | None:
        snap = call_firestore("get ledger", lambda: self._ledger_ref().get())
        return _stored(snap) if snap.exists else None

    def transact_ledger(
        self,
        request_id: str | None,
        decide: Callable[
            [dict[str, Any] | None, dict[str, Any] | None],
            tuple[dict[str, Any] | None, Change | None] | None,
        ],
    ) -> bool:
        from google.cloud import firestore

        ledger_ref = self._ledger_ref()
        record_ref = self._ref(request_id) if request_id is not None else None

        def attempt() -> bool:
            # Optimistic, as transact_document: both documents are written in one batch,
            # each with the precondition of its read (created only if still absent), so an
            # admission racing another for the same GPUs decides again on a fresh read.
            snap = ledger_ref.get()
            ledger = snap.to_dict() if snap.exists else None
            held = record_ref.get() if record_ref is not None else None
            record = _record(held) if held is not None and held.exists else None
            decided = decide(ledger, record)
            if decided is None:
                return False
            write, change = decided
            if write is None and (change is None or record is None):
                return False
            batch = self.db.batch()
            if write is not None:
                if snap.exists:
                    option = self.db.write_option(last_update_time=snap.update_time)
                    batch.update(ledger_ref, write, option=option)
                else:
                    batch.create(ledger_ref, write)
            if change is not None and record is not None and held is not None:
                deletes = {name: firestore.DELETE_FIELD for name in change.deletes}
                option = self.db.write_option(last_update_time=held.update_time)
                fields = {**change.record, **deletes, TOUCHED_AT: firestore.SERVER_TIMESTAMP}
                batch.update(record_ref, fields, option=option)
            batch.commit()
            return True

        done: bool = call_firestore("ledger write", _until_unchanged(attempt))
        return done

    def write_admission_summary(self, document: dict[str, Any]) -> None:
        ref = self.db.collection(ADMISSION).document(SUMMARY)
        call_firestore("summary write", lambda: ref.set(document))

    def waiting_admission(self, queue: str | None = None, most: int = 1) -> list[Stored]:
        if queue is None:
            query = WAITING.on(self.db, "WAITING")
        else:
            query = WAITING_IN.on(self.db, "WAITING", queue)
        pages = _pages(query, TICK_FIELDS, most=most)
        return [Stored(d.to_dict() or {}, d.update_time, partial=True) for d in pages]

    def count_waiting(self, queue: str) -> int:
        # WAITING_IN's filters alone (no order), counted: its composite index serves it.
        query = WAITING_IN.on(self.db, "WAITING", queue, ordered=False).count(alias="n")
        result = call_firestore("count", query.get)
        return int(result[0][0].value)

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        # The range's field orders first; each page resumes after the last one's stamp. The
        # margin re-reads a few seconds before the mark rather than trust two clocks' ties.
        query = CHANGED.on(self.db, mark - MARK_MARGIN).order_by("__name__")
        return _partial(_pages(query, (*WATCH_FIELDS, TOUCHED_AT), most + 1, at))

    def ended_since(self, since: datetime, at: Any = None) -> Iterator[Stored]:
        # A range filter's field orders first; the cursor then takes endedAt from each page.
        # Pages of ENDED_PAGE: a build reads a week of ended records once, and each page is
        # a query of its own.
        query = ENDED_SINCE.on(self.db, since).order_by("endedAt").order_by("__name__")
        for doc in _stream(query, WATCH_FIELDS, ENDED_PAGE, at):
            yield Stored(doc.to_dict() or {}, doc.update_time, partial=True, key=doc.id)

    def newest(self, limit: int, at: Any = None) -> list[dict[str, Any]]:
        from google.cloud.firestore import Query as Order

        query = (
            JOBS_NEWEST.on(self.db)
            .order_by("__name__", direction=Order.DESCENDING)
            .select(["requestId", "createdAt"])
            .limit(limit)
        )
        return call_firestore("query", lambda: [d.to_dict() or {} for d in _all(query, at)])

    def _watch_ref(self, name: str) -> Any:
        return self.db.collection(WATCH).document(name)

    def read_watch(self) -> Saved:
        refs = [self._watch_ref(HEAD), self._watch_ref(TALLY)]
        refs += [self._watch_ref(f"shard-{i}") for i in range(watches.MAX_SHARDS)]

        def read() -> dict[str, Any]:
            # One batch get: every document as of one read time, the mark's.
            return {s.id: s for s in self.db.get_all(refs)}

        found = call_firestore("get watch", read)
        head = found.get(HEAD)
        # Every later read of the sync is as of this one (to the microsecond, as read times
        # must be): what they find is one consistent state of the records.
        at = _to_microseconds(min(s.read_time for s in found.values()))
        if head is None or not head.exists:
            return Saved(None, None, None, None, at)
        raw = head.to_dict() or {}
        overflowed = raw.get("overflowedAt")
        if isinstance(overflowed, datetime):
            return Saved(None, None, overflowed, head.update_time, at)
        count = raw.get("shards")
        shards = []
        for i in range(count if isinstance(count, int) else 0):
            shard = found.get(f"shard-{i}")
            data = (
                (shard.to_dict() or {}).get("data") if shard is not None and shard.exists else None
            )
            if not isinstance(data, bytes):
                return Saved(None, None, None, head.update_time, at)
            shards.append(data)
        tally = found.get(TALLY)
        return Saved(
            watches.decode(shards),
            tallies.decode(tally.to_dict() if tally is not None and tally.exists else None),
            None,
            head.update_time,
            at,
        )

    def save_watch(
        self, watch: Watch | None, tally: Tally | None, version: Any, *, list_too: bool = True
    ) -> bool:
        from google.cloud import firestore

        shards = watches.encode(watch) if watch is not None else []
        head: dict[str, Any] = {"format": watches.FORMAT, "savedAt": firestore.SERVER_TIMESTAMP}
        if list_too:
            head["shards"] = len(shards)
            head["overflowedAt"] = firestore.SERVER_TIMESTAMP if watch is None else None
        batch = self.db.batch()
        head_ref = self._watch_ref(HEAD)
        if version is None:
            batch.create(head_ref, head)
        else:
            batch.update(head_ref, head, option=self.db.write_option(last_update_time=version))
        for i in range(watches.MAX_SHARDS if list_too else 0):
            ref = self._watch_ref(f"shard-{i}")
            if i < len(shards):
                batch.set(ref, {"data": shards[i]})
            else:
                batch.delete(ref)
        if tally is not None:
            batch.set(self._watch_ref(TALLY), tallies.encode(tally))
        else:
            batch.delete(self._watch_ref(TALLY))
        try:
            call_firestore("save watch", batch.commit)
        except (gexc.FailedPrecondition, gexc.Conflict, gexc.NotFound):
            return False  # another tick saved (or created) it since this one read it
        return True

    def due_submissions(self, now: datetime) -> list[str]:
        # One single-field range: Firestore indexes it on its own, no composite index needed.
        query = DUE.on(self.db, now)
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])

    def with_outbox(self) -> list[str]:
        query = WITH_OUTBOX.on(self.db, True)
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])

    def with_pending_cancels(self) -> list[str]:
        query = WITH_PENDING_CANCELS.on(self.db, True)
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])


REJECTIONS = "rejections"


class FirestoreRejectionLog:
    """Refused requests in Firestore ``rejections/{id}``, shared with the job store's client."""

    def __init__(self, store: FirestoreJobStore) -> None:
        self._store = store

    def _ref(self, rejection_id: str) -> Any:
        return self._store.db.collection(REJECTIONS).document(doc_id(rejection_id))

    def get(self, rejection_id: str) -> dict[str, Any] | None:
        snap = call_firestore("get rejection", self._ref(rejection_id).get)
        return snap.to_dict() if snap.exists else None

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        ref = self._ref(rejection_id)
        call_firestore("set rejection", lambda: ref.set(dict(document)))
