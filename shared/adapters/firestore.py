"""FirestoreJobStore: the JobStore port on Cloud Firestore (collection ``jobs``).

The claim is Firestore's conditional put: ``create()`` fails when the document exists, and a
transaction decides between "already submitted", "held by a live claim" and "claim expired,
take it over" (the function that held it died, possibly after Vertex created the job).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as gexc

from shared.config import Settings
from shared.domain.ids import doc_id
from shared.domain.jobs import JobState, VertexJob, from_vertex, observe
from shared.domain.request import JobRequest
from shared.errors import StoreUnavailable, SubmissionInProgress
from shared.ports import Claim, Submission

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
    from google.cloud.firestore_v1.base_query import FieldFilter

    return FieldFilter(field, "==", value)


def _in(field: str, values: list[Any]) -> Any:
    from google.cloud.firestore_v1.base_query import FieldFilter

    return FieldFilter(field, "in", values)


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except _TRANSIENT as exc:
        raise StoreUnavailable(f"Firestore {what} failed: {exc}") from exc
    except ValueError as exc:
        # The transactional decorator gives up on contention with a bare ValueError.
        if "Failed to commit transaction" in str(exc):
            raise StoreUnavailable(f"Firestore {what} failed: {exc}") from exc
        raise


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
        snap = _call("get", lambda: self._ref(request_id).get())
        return snap.to_dict() if snap.exists else None

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        ref = self._ref(request.request_id)
        token = uuid.uuid4().hex
        lease = {"token": token, "expiresAt": now + timedelta(seconds=ttl_seconds)}
        record = {
            "requestId": request.request_id,
            "kind": request.kind,
            "state": JobState.ACCEPTED.value,
            "attempt": 1,
            "vertexJob": None,
            "strategy": request.strategy,
            "location": request.location or self._settings.location,
            "displayName": request.display_name,
            "maxWaitSeconds": request.max_wait_seconds,
            # Kept as JSON text: Firestore cannot store arrays of arrays, which REST bodies
            # may hold, and later attempts must resubmit exactly this body.
            "request": json.dumps(request.spec, sort_keys=True),
            "options": json.dumps(request.options, sort_keys=True),
            "createdAt": now,
            "updatedAt": now,
            "claim": lease,
        }
        try:
            _call("create", lambda: ref.create(record))
            return Claim(token=token)
        except gexc.Conflict:
            # AlreadyExists is a Conflict: another delivery got here first.
            return self._claim_existing(ref, token, lease, now)

    def _claim_existing(self, ref: Any, token: str, lease: dict[str, Any], now: datetime) -> Claim:
        from google.cloud import firestore

        @firestore.transactional
        def attempt(txn: Any) -> Claim:
            snap = ref.get(transaction=txn)
            current = snap.to_dict() or {}
            if current.get("vertexJob") or current.get("state") != JobState.ACCEPTED.value:
                return Claim(record=current)
            held = current.get("claim") or {}
            expires = held.get("expiresAt")
            if expires is not None and expires > now:  # no claim at all: released
                raise SubmissionInProgress(
                    f"request {current.get('requestId')!r} is being submitted by another "
                    f"delivery until {expires.isoformat()}"
                )
            txn.update(ref, {"claim": lease, "updatedAt": now})
            return Claim(token=token, taken_over=True)

        claim: Claim = _call("claim transaction", lambda: attempt(self.db.transaction()))
        return claim

    def record_submission(self, token: str, submission: Submission, now: datetime) -> None:
        from google.cloud import firestore

        ref = self._ref(submission.request_id)
        job = submission.vertex_job
        state = from_vertex(job.state) or JobState.QUEUED
        attempt_doc = {
            "attempt": submission.attempt,
            "vertexJob": job.name,
            "state": state.value,
            "strategy": submission.strategy,
            "location": submission.location,
            "submittedAt": now,
            "resumedFrom": submission.resumed_from,
            **submission.extra,
        }

        @firestore.transactional
        def write(txn: Any) -> None:
            snap = ref.get(transaction=txn)
            current = snap.to_dict() or {}
            if current.get("attempt", 0) > submission.attempt or (
                current.get("attempt") == submission.attempt and current.get("vertexJob")
            ):
                # A redelivery already recorded this attempt (it found the same job by label).
                return
            txn.update(
                ref,
                {
                    "state": state.value,
                    "attempt": submission.attempt,
                    "vertexJob": job.name,
                    "vertexJobId": job.job_id,
                    "strategy": submission.strategy,
                    "location": submission.location,
                    "updatedAt": now,
                    "claim": firestore.DELETE_FIELD,
                },
            )
            txn.set(ref.collection(ATTEMPTS).document(str(submission.attempt)), attempt_doc)

        _call("record transaction", lambda: write(self.db.transaction()))

    def release(self, request_id: str, token: str, now: datetime) -> None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def drop(txn: Any) -> None:
            current = ref.get(transaction=txn).to_dict() or {}
            if (current.get("claim") or {}).get("token") == token:
                txn.update(ref, {"claim": firestore.DELETE_FIELD, "updatedAt": now})

        _call("release transaction", lambda: drop(self.db.transaction()))

    def find_by_job_id(self, job_id: str) -> str | None:
        query = self.db.collection(JOBS).where(filter=_eq("vertexJobId", job_id)).limit(1)
        docs = _call("query", lambda: list(query.stream()))
        return str(docs[0].get("requestId")) if docs else None

    def active(self) -> list[dict[str, Any]]:
        states = [s.value for s in JobState if not s.terminal]
        query = self.db.collection(JOBS).where(filter=_in("state", states))
        return _call("query", lambda: [d.to_dict() for d in query.stream()])

    def begin_read(self, request_id: str, now: datetime, interval_seconds: float) -> bool:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def lease(txn: Any) -> bool:
            current = ref.get(transaction=txn).to_dict() or {}
            last = current.get("lastReadAt")
            if last is not None and (now - last).total_seconds() < interval_seconds:
                return False
            txn.update(ref, {"lastReadAt": now})
            return True

        granted: bool = _call("read lease", lambda: lease(self.db.transaction()))
        return granted

    def apply_observation(self, request_id: str, job: VertexJob, now: datetime) -> str | None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def apply(txn: Any) -> str | None:
            current = ref.get(transaction=txn).to_dict() or {}
            change = observe(current, job, now)
            if change is None:
                return None
            txn.update(ref, change.record)
            attempt_ref = ref.collection(ATTEMPTS).document(str(current["attempt"]))
            txn.set(attempt_ref, change.attempt, merge=True)
            return change.state.value

        changed: str | None = _call("observe transaction", lambda: apply(self.db.transaction()))
        return changed

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        """Mark a request that Vertex refused for good as FAILED, keeping the reason."""
        ref = self._ref(request_id)
        _call(
            "update",
            lambda: ref.update(
                {
                    "state": JobState.FAILED.value,
                    "reason": reason,
                    "updatedAt": now,
                    "endedAt": now,
                }
            ),
        )


REJECTIONS = "rejections"


class FirestoreRejectionLog:
    """Refused requests in Firestore ``rejections/{id}``, shared with the job store's client."""

    def __init__(self, store: FirestoreJobStore) -> None:
        self._store = store

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        ref = self._store.db.collection(REJECTIONS).document(doc_id(rejection_id))
        _call("set rejection", lambda: ref.set(dict(document)))
