"""FirestoreJobStore: the JobStore port on Cloud Firestore (collection ``jobs``), storage only.

``create()`` is Firestore's conditional put (it fails when the document exists); every other
write is one transaction that reads the record, lets a pure decision compute the change and
writes it (:meth:`FirestoreJobStore.transact`). What the writes mean lives in
:mod:`shared.repository` and the domain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.config import Settings
from shared.domain.ids import doc_id
from shared.domain.jobs import Change, JobState
from shared.errors import StoreUnavailable

T = TypeVar("T")

JOBS = "jobs"
ATTEMPTS = "attempts"

_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.Aborted,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Unknown,
    gexc.RetryError,
)


def _eq(field: str, value: Any) -> Any:
    return FieldFilter(field, "==", value)


def call_firestore(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except _TRANSIENT as exc:
        raise StoreUnavailable(f"Firestore {what} failed: {exc}") from exc
    except ValueError as exc:
        # The transactional decorator gives up on contention with a bare ValueError.
        if "Failed to commit transaction" in str(exc):
            raise StoreUnavailable(f"Firestore {what} failed: {exc}") from exc
        raise


def create_document(ref: Any, record: Mapping[str, Any]) -> bool:
    """Firestore's conditional put: create ``ref`` from ``record``; False when it exists."""
    try:
        call_firestore("create", lambda: ref.create(dict(record)))
    except gexc.Conflict:
        return False  # AlreadyExists is a Conflict
    return True


def transact_document(
    db: Any,
    ref: Any,
    decide: Callable[[dict[str, Any]], T | None],
    write: Callable[[Any, dict[str, Any], T], None],
) -> T | None:
    """Read ``ref``, let ``decide`` compute a change, ``write`` it: one transaction.

    A missing document is never decided on; a transaction that loses a race is retried by the
    client with a fresh read, so ``decide`` must be pure.
    """
    from google.cloud import firestore

    @firestore.transactional
    def apply(txn: Any) -> T | None:
        snap = ref.get(transaction=txn)
        if not snap.exists:
            return None
        current = snap.to_dict() or {}
        change = decide(current)
        if change is not None:
            write(txn, current, change)
        return change

    result: T | None = call_firestore("transaction", lambda: apply(db.transaction()))
    return result


class FirestoreJobStore:
    """Job records in Firestore; the client is built on first use."""

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self._settings = settings
        self._db = client
        self._lock = threading.Lock()

    @property
    def db(self) -> Any:
        with self._lock:
            if self._db is None:
                from google.cloud import firestore

                self._db = firestore.Client(project=self._settings.project)
            return self._db

    def _ref(self, request_id: str) -> Any:
        return self.db.collection(JOBS).document(doc_id(request_id))

    def get(self, request_id: str) -> dict[str, Any] | None:
        snap = call_firestore("get", lambda: self._ref(request_id).get())
        return snap.to_dict() if snap.exists else None

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        ref = self._ref(request_id).collection(ATTEMPTS).document(str(attempt))
        snap = call_firestore("get attempt", ref.get)
        return snap.to_dict() if snap.exists else None

    def create(self, request_id: str, record: Mapping[str, Any]) -> bool:
        return create_document(self._ref(request_id), record)

    def transact(
        self, request_id: str, decide: Callable[[dict[str, Any]], Change | None]
    ) -> Change | None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        def write(txn: Any, current: dict[str, Any], change: Change) -> None:
            deletes = {name: firestore.DELETE_FIELD for name in change.deletes}
            if change.record or deletes:  # Firestore refuses an update with no fields
                txn.update(ref, {**change.record, **deletes})
            if change.attempt:
                number = change.attempt_no or current.get("attempt", 1)
                attempt_ref = ref.collection(ATTEMPTS).document(str(number))
                txn.set(attempt_ref, change.attempt, merge=True)

        return transact_document(self.db, ref, decide, write)

    def find_by_job_id(self, job_id: str) -> str | None:
        query = (
            self.db.collection(JOBS)
            .where(filter=FieldFilter("vertexJobIds", "array_contains", job_id))
            .limit(1)
        )
        docs = call_firestore("query", lambda: list(query.stream()))
        return str(docs[0].get("requestId")) if docs else None

    def active(self) -> list[dict[str, Any]]:
        states = [s.value for s in JobState if not s.terminal]
        query = self.db.collection(JOBS).where(filter=FieldFilter("state", "in", states))
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def ended_since(self, since: datetime) -> list[dict[str, Any]]:
        query = self.db.collection(JOBS).where(filter=FieldFilter("endedAt", ">=", since))
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def due_submissions(self, now: datetime) -> list[str]:
        # One single-field range: Firestore indexes it on its own, no composite index needed.
        query = self.db.collection(JOBS).where(filter=FieldFilter("nextAttemptAt", "<=", now))
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])

    def with_outbox(self) -> list[str]:
        query = self.db.collection(JOBS).where(filter=_eq("outboxPending", True))
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])

    def with_pending_cancels(self) -> list[str]:
        query = self.db.collection(JOBS).where(filter=_eq("cancelPending", True))
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])


REJECTIONS = "rejections"


class FirestoreRejectionLog:
    """Refused requests in Firestore ``rejections/{id}``, shared with the job store's client."""

    def __init__(self, store: FirestoreJobStore) -> None:
        self._store = store

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        ref = self._store.db.collection(REJECTIONS).document(doc_id(rejection_id))
        call_firestore("set rejection", lambda: ref.set(dict(document)))
