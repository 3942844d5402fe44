"""FirestoreJobStore and FirestoreAttemptStore: the job records (collection ``jobs``) and their
attempts (``jobs/{id}/attempts/{n}``) on Cloud Firestore, storage only.

A record's write is a conditional one (:func:`~shared.adapters.firestore.database.
transact_document`), and it carries the attempt fields of its change in the same batch: the
attempt documents are read and merged by :class:`FirestoreAttemptStore`, but written with their
record by :meth:`FirestoreJobStore.transact`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from shared.adapters.firestore.database import (
    LINE_TOUCHED_AT,
    TOUCHED_AT,
    Firestore,
    call_firestore,
    create_document,
    fields_of,
    stamp,
    stored_of,
    transact_document,
)
from shared.adapters.firestore.queries import Query, pages, partial, read_all, stream
from shared.app.ports import MAX_WATCHERS
from shared.domain.admission.line import touches_line
from shared.domain.model.changes import Change, Decided, Written
from shared.domain.model.ids import doc_id
from shared.domain.model.records import TICK_FIELDS, Stored
from shared.domain.model.states import JobState
from shared.domain.model.watch import WATCH_FIELDS

JOBS = "jobs"
ATTEMPTS = "attempts"
#: How far before its mark a sync reads: a read as of a time sees every commit before it, and
#: a later commit's stamp is later; the margin still re-reads the writes of the second before
#: the mark rather than trust that the stamp and the read time tie exactly (the emulator keeps
#: stamps to the millisecond).
MARK_MARGIN = timedelta(seconds=1)

ACTIVE_STATES = [s.value for s in JobState if not s.terminal]

BY_JOB_ID = Query(JOBS, (("vertexJobIds", "array_contains"),))
ACTIVE = Query(JOBS, (("state", "in"),))
WATCHING = Query(JOBS, (("checkpointPrefix", "=="), ("state", "in")))
ENDED_SINCE = Query(JOBS, (("endedAt", ">="),))
DUE = Query(JOBS, (("nextAttemptAt", "<="),))
WITH_OUTBOX = Query(JOBS, (("outboxPending", "=="),))
WITH_PENDING_CANCELS = Query(JOBS, (("cancelPending", "=="),))
CHANGED = Query(JOBS, ((TOUCHED_AT, ">="),), ((TOUCHED_AT, "ASCENDING"),))
JOBS_NEWEST = Query(JOBS, (), (("createdAt", "DESCENDING"),))

#: Documents per page of a build's read of the week's ended records (of a few small fields).
ENDED_PAGE = 2000


def record_ref(firestore: Firestore, request_id: str) -> Any:
    """The document of ``request_id``'s job record."""
    return firestore.collection(JOBS).document(doc_id(request_id))


def attempt_ref(firestore: Firestore, request_id: str, attempt: int) -> Any:
    """The document of one attempt of ``request_id``."""
    return record_ref(firestore, request_id).collection(ATTEMPTS).document(str(attempt))


def record_fields(change: Change, current: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a record's update writes for ``change`` to the record ``current`` (as its
    write's precondition read it): its fields set, its deletes removed, and the write's
    stamps."""
    from google.cloud import firestore

    deletes = {name: firestore.DELETE_FIELD for name in change.deletes}
    return stamped({**change.record, **deletes}, current)


def stamped(fields: dict[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """``fields`` with the stamps of their write to ``current`` (None: a create): always the
    write's, and the line's when the write may move the record in its admission line."""
    fields[TOUCHED_AT] = stamp()
    if touches_line(current, fields):
        fields[LINE_TOUCHED_AT] = stamp()
    return fields


class FirestoreJobStore:
    """Job records in Firestore, on a shared :class:`Firestore`."""

    def __init__(self, firestore: Firestore) -> None:
        self._firestore = firestore

    def get(self, request_id: str) -> dict[str, Any] | None:
        stored = self.read(request_id)
        return None if stored is None else dict(stored.raw)

    def read(self, request_id: str) -> Stored | None:
        snap = call_firestore("get", lambda: record_ref(self._firestore, request_id).get())
        return stored_of(snap) if snap.exists else None

    def create(self, request_id: str, record: Mapping[str, Any]) -> Stored | None:
        ref = record_ref(self._firestore, request_id)
        version = create_document(ref, stamped(dict(record), None))
        return None if version is None else Stored(dict(record), version)

    def transact(
        self,
        request_id: str,
        decide: Callable[[dict[str, Any]], Change | Decided[Change, Any] | None],
        known: Stored | None = None,
    ) -> Written[Change, Stored] | None:
        ref = record_ref(self._firestore, request_id)

        def write(batch: Any, current: dict[str, Any], change: Change, unchanged: Any) -> bool:
            updated = bool(change.record or change.deletes)
            if updated:  # Firestore refuses an update with no fields
                batch.update(ref, record_fields(change, current), option=unchanged)
            # Attempt fields alone (update_attempt) are a merge that no read decided.
            if change.attempt:
                number = change.attempt_no or current.get("attempt", 1)
                batch.set(
                    ref.collection(ATTEMPTS).document(str(number)), change.attempt, merge=True
                )
            return updated

        seen = None if known is None else (known.raw, known.version)
        return transact_document(self._firestore.db, ref, decide, write, seen)

    def find_by_job_id(self, job_id: str) -> Stored | None:
        query = BY_JOB_ID.on(self._firestore.db, job_id).limit(1)
        docs = call_firestore("query", lambda: list(query.stream()))
        return stored_of(docs[0]) if docs else None

    def active(self, at: Any = None) -> list[Stored]:
        query = ACTIVE.on(self._firestore.db, ACTIVE_STATES).order_by("__name__")
        return partial(pages(query, TICK_FIELDS, at=at))

    def count_active(self, at: Any) -> int:
        query = ACTIVE.on(self._firestore.db, ACTIVE_STATES).count(alias="n")
        result = call_firestore("count", lambda: query.get(read_time=at))
        return int(result[0][0].value)

    def with_checkpoint_prefix(self, prefix: str) -> list[dict[str, Any]]:
        # Equality plus "in": the composite index (checkpointPrefix, state) serves it.
        query = WATCHING.on(self._firestore.db, prefix, ACTIVE_STATES).limit(MAX_WATCHERS)
        return call_firestore("query", lambda: [fields_of(d) for d in query.stream()])

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        # The range's field orders first; each page resumes after the last one's stamp. The
        # margin re-reads a few seconds before the mark rather than trust two clocks' ties.
        query = CHANGED.on(self._firestore.db, mark - MARK_MARGIN).order_by("__name__")
        return partial(pages(query, (*WATCH_FIELDS, TOUCHED_AT), most + 1, at))

    def ended_since(self, since: datetime, at: Any = None) -> Iterator[Stored]:
        # A range filter's field orders first; the cursor then takes endedAt from each page.
        # Pages of ENDED_PAGE: a build reads a week of ended records once, and each page is
        # a query of its own.
        query = ENDED_SINCE.on(self._firestore.db, since).order_by("endedAt").order_by("__name__")
        for doc in stream(query, WATCH_FIELDS, ENDED_PAGE, at):
            yield Stored(doc.to_dict() or {}, doc.update_time, partial=True, key=doc.id)

    def newest(self, limit: int, at: Any = None) -> list[dict[str, Any]]:
        from google.cloud.firestore import Query as Order

        query = (
            JOBS_NEWEST.on(self._firestore.db)
            .order_by("__name__", direction=Order.DESCENDING)
            .select(["requestId", "createdAt"])
            .limit(limit)
        )
        return call_firestore("query", lambda: [d.to_dict() or {} for d in read_all(query, at)])

    def due_submissions(self, now: datetime) -> list[str]:
        # One single-field range: Firestore indexes it on its own, no composite index needed.
        return self._ids(DUE.on(self._firestore.db, now))

    def with_outbox(self) -> list[str]:
        return self._ids(WITH_OUTBOX.on(self._firestore.db, True))

    def with_pending_cancels(self) -> list[str]:
        return self._ids(WITH_PENDING_CANCELS.on(self._firestore.db, True))

    @staticmethod
    def _ids(query: Any) -> list[str]:
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])


class FirestoreAttemptStore:
    """The attempt documents of the job records in Firestore, on a shared :class:`Firestore`."""

    def __init__(self, firestore: Firestore) -> None:
        self._firestore = firestore

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        ref = attempt_ref(self._firestore, request_id, attempt)
        snap = call_firestore("get attempt", ref.get)
        return snap.to_dict() if snap.exists else None

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        ref = attempt_ref(self._firestore, request_id, attempt)
        call_firestore("update attempt", lambda: ref.set(dict(fields), merge=True))
