"""FirestoreJobStore: the JobStore port on Cloud Firestore (collection ``jobs``).

The claim is Firestore's conditional put: ``create()`` fails when the document exists, and a
transaction decides between "already submitted", "held by a live claim" and "claim expired,
take it over" (the function that held it died, possibly after Vertex created the job).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.config import Settings
from shared.domain.hints import HintAction, take_hint
from shared.domain.ids import doc_id
from shared.domain.jobs import Change, JobState
from shared.domain.records import (
    Claim,
    ClaimSeen,
    Submission,
    existing_claim,
    job_settled,
    new_record,
    submission_claimable,
    submission_write,
)
from shared.domain.request import JobRequest
from shared.errors import StoreUnavailable, SubmissionInProgress

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


def _in(field: str, values: list[Any]) -> Any:
    return FieldFilter(field, "in", values)


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


def claim_document(
    db: Any,
    ref: Any,
    record: dict[str, Any],
    *,
    now: datetime,
    ttl_seconds: float,
    settled: Callable[[dict[str, Any]], bool],
) -> Claim:
    """Claim ``ref`` for one delivery: create it from ``record`` with a fresh lease, or decide.

    This is the conditional put of every collection whose records carry a ``claim`` lease.
    ``settled(current)`` says whether an existing document is past its claim: then it is a
    duplicate and :class:`Claim` carries the record. An unsettled document with a live lease
    raises; one whose lease expired (its holder died) or was released is taken over.

    Raises:
        SubmissionInProgress: another live delivery holds the claim.
        StoreUnavailable: Firestore could not be reached.
    """
    from google.cloud import firestore

    token = uuid.uuid4().hex
    lease = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}

    @firestore.transactional
    def take(txn: Any) -> Claim:
        current = ref.get(transaction=txn).to_dict() or {}
        seen = existing_claim(current, now, settled(current))
        if seen is ClaimSeen.SUBMITTED:
            return Claim(record=current)
        if seen is ClaimSeen.HELD:
            raise SubmissionInProgress(
                f"request {current.get('requestId')!r} is being submitted by another "
                f"delivery until {current['claim']['expiresAt'].isoformat()}"
            )
        txn.update(ref, {"claim": lease, "updatedAt": now})
        return Claim(token=token, taken_over=True)

    try:
        call_firestore("create", lambda: ref.create({**record, "claim": lease}))
    except gexc.Conflict:
        # AlreadyExists is a Conflict: another delivery got here first; decide in a transaction.
        claim: Claim = call_firestore("claim transaction", lambda: take(db.transaction()))
        return claim
    return Claim(token=token)


def release_claim(db: Any, ref: Any, token: str, now: datetime) -> None:
    """Drop the claim ``token`` holds on ``ref``, if it still holds it."""
    from google.cloud import firestore

    @firestore.transactional
    def drop(txn: Any) -> None:
        current = ref.get(transaction=txn).to_dict() or {}
        if (current.get("claim") or {}).get("token") == token:
            txn.update(ref, {"claim": firestore.DELETE_FIELD, "updatedAt": now})

    call_firestore("release transaction", lambda: drop(db.transaction()))


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

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        record = new_record(request, self._settings.location, now)
        ref = self._ref(request.request_id)
        return claim_document(
            self.db, ref, record, now=now, ttl_seconds=ttl_seconds, settled=job_settled
        )

    def record_submission(self, token: str, submission: Submission, now: datetime) -> bool:
        from google.cloud import firestore

        ref = self._ref(submission.request_id)

        @firestore.transactional
        def write(txn: Any) -> bool:
            current = ref.get(transaction=txn).to_dict() or {}
            plan = submission_write(current, submission, now)
            if plan.record:
                deletes = {name: firestore.DELETE_FIELD for name in plan.deletes}
                txn.update(ref, {**plan.record, **deletes})
                attempt_ref = ref.collection(ATTEMPTS).document(str(submission.attempt))
                txn.set(attempt_ref, plan.attempt)
            return plan.recorded

        recorded: bool = call_firestore("record transaction", lambda: write(self.db.transaction()))
        return recorded

    def release(self, request_id: str, token: str, now: datetime) -> None:
        release_claim(self.db, self._ref(request_id), token, now)

    def create_tombstone(self, request_id: str, record: Mapping[str, Any]) -> bool:
        ref = self._ref(request_id)
        try:
            call_firestore("create", lambda: ref.create(dict(record)))
        except gexc.Conflict:
            return False  # AlreadyExists: the request's own record is there
        return True

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        ref = self._ref(request_id).collection(ATTEMPTS).document(str(attempt))
        snap = call_firestore("get attempt", ref.get)
        return snap.to_dict() if snap.exists else None

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        ref = self._ref(request_id).collection(ATTEMPTS).document(str(attempt))
        call_firestore("update attempt", lambda: ref.set(dict(fields), merge=True))

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
        query = self.db.collection(JOBS).where(filter=_in("state", states))
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def ended_since(self, since: datetime) -> list[dict[str, Any]]:
        query = self.db.collection(JOBS).where(filter=FieldFilter("endedAt", ">=", since))
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def begin_read(
        self, request_id: str, now: datetime, interval_seconds: float, published: datetime
    ) -> tuple[HintAction, datetime | None]:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def lease(txn: Any) -> tuple[HintAction, datetime | None]:
            current = ref.get(transaction=txn).to_dict() or {}
            action, fields = take_hint(current, published, now, interval_seconds)
            if fields:
                txn.update(ref, fields)
            return action, current.get("lastReadAt")

        taken: tuple[HintAction, datetime | None] = call_firestore(
            "read lease", lambda: lease(self.db.transaction())
        )
        return taken

    def renew_read(self, request_id: str, now: datetime) -> None:
        ref = self._ref(request_id)
        call_firestore("read lease", lambda: ref.update({"lastReadAt": now, "hintPending": False}))

    def release_reader(self, request_id: str) -> None:
        ref = self._ref(request_id)
        call_firestore("read lease", lambda: ref.update({"lastReadAt": None, "hintPending": False}))

    def transact(
        self, request_id: str, decide: Callable[[dict[str, Any]], Change | None]
    ) -> Change | None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def apply(txn: Any) -> Change | None:
            current = ref.get(transaction=txn).to_dict() or {}
            change = decide(current) if current else None
            if change is None:
                return None
            if change.record:  # Firestore refuses an update with no fields
                txn.update(ref, change.record)
            if change.attempt:
                attempt_ref = ref.collection(ATTEMPTS).document(str(current.get("attempt", 1)))
                txn.set(attempt_ref, change.attempt, merge=True)
            return change

        result: Change | None = call_firestore("transaction", lambda: apply(self.db.transaction()))
        return result

    def due_submissions(self, now: datetime) -> list[str]:
        # One single-field range: Firestore indexes it on its own, no composite index needed.
        query = self.db.collection(JOBS).where(filter=FieldFilter("nextAttemptAt", "<=", now))
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])

    def claim_retry(
        self, request_id: str, attempt: int, now: datetime, ttl_seconds: float
    ) -> str | None:
        from google.cloud import firestore

        ref = self._ref(request_id)
        token = uuid.uuid4().hex

        @firestore.transactional
        def take(txn: Any) -> str | None:
            current = ref.get(transaction=txn).to_dict() or {}
            if not submission_claimable(current, attempt, now):
                return None
            lease = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
            txn.update(ref, {"claim": lease, "updatedAt": now})
            return token

        claimed: str | None = call_firestore("retry claim", lambda: take(self.db.transaction()))
        return claimed

    def with_outbox(self) -> list[str]:
        query = self.db.collection(JOBS).where(filter=_eq("outboxPending", True))
        return call_firestore("query", lambda: [str(d.get("requestId")) for d in query.stream()])

    def drop_from_outbox(self, request_id: str, sent: list[dict[str, Any]]) -> None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def drop(txn: Any) -> None:
            current = ref.get(transaction=txn).to_dict() or {}
            left = [m for m in current.get("outbox") or [] if m not in sent]
            txn.update(ref, {"outbox": left, "outboxPending": bool(left)})

        call_firestore("outbox transaction", lambda: drop(self.db.transaction()))

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
