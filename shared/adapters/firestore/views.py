"""FirestoreJobViews: the JobViews port on Cloud Firestore, for the status page (read-only).

Every read is bounded and narrow: a page is ``size`` + 1 documents (the extra one only says a
next page exists) of the fields the page shows (``select()``); a job page reads one record and
then at most ``MAX_ATTEMPTS`` attempts by key (one batch get, no query: its cost is the
documents it names, however many records the database holds); the active counts are
``count()`` aggregations; the totals read at most ``limit`` records of three fields. No read
depends on a row of another (no query per row).

Pages are ordered by ``createdAt`` then document id (``__name__``), both descending, so a
cursor (the last row's time and document id) resumes exactly after it. Filtering on states
and ordering on ``createdAt`` is the one composite index these queries need
(``jobs (state ASC, createdAt DESC)``, declared below and created by infra/firestore.tf).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc

from shared.adapters.firestore.admission_store import ADMISSION, SUMMARY
from shared.adapters.firestore.database import Firestore
from shared.adapters.firestore.deployment_store import DEPLOYMENTS
from shared.adapters.firestore.job_store import ATTEMPTS, JOBS, JOBS_NEWEST
from shared.adapters.firestore.queries import Query
from shared.adapters.firestore.watch_store import TALLY, WATCH
from shared.domain.model import tally as tallies
from shared.domain.model.ids import doc_id
from shared.domain.model.tally import Tally
from shared.kernel.errors import StoreUnavailable
from shared.status.listing import (
    ATTEMPT_FIELDS,
    DEPLOYMENT_FIELDS,
    DEPLOYMENT_LIST_FIELDS,
    JOB_FIELDS,
    LIST_FIELDS,
    MAX_ATTEMPTS,
    TOTAL_FIELDS,
    Listing,
    Page,
    next_cursor,
)

T = TypeVar("T")

NEWEST = JOBS_NEWEST.order
JOBS_NEWEST_SINCE = Query(JOBS, (("createdAt", ">="),), NEWEST)
JOBS_IN_STATES = Query(JOBS, (("state", "in"),), NEWEST)
JOBS_IN_STATES_SINCE = Query(JOBS, (("state", "in"), ("createdAt", ">=")), NEWEST)
IN_STATE = Query(JOBS, (("state", "=="),))
ENDED_NEWEST = Query(JOBS, (("endedAt", ">="),), (("endedAt", "DESCENDING"),))
DEPLOYMENTS_NEWEST = Query(DEPLOYMENTS, (), NEWEST)


def read_firestore(what: str, fn: Callable[[], T]) -> T:
    """``fn()``, with any Firestore fault as StoreUnavailable: a page that cannot be read
    answers 503, whatever the cause (a transient fault, a missing index, a permission)."""
    try:
        return fn()
    except gexc.GoogleAPIError as exc:
        raise StoreUnavailable(f"Firestore {what} failed: {exc}") from exc


class FirestoreJobViews:
    """The status page's reads, on a shared :class:`Firestore`."""

    def __init__(self, firestore: Firestore, timeout: float = 30.0) -> None:
        self._firestore = firestore
        self._timeout = timeout

    def _page(self, query: Any, listing: Listing, fields: tuple[str, ...]) -> Page:
        from google.cloud.firestore import Query as Order

        query = query.order_by("__name__", direction=Order.DESCENDING).select(list(fields))
        if listing.after is not None:
            # The cursor's requestId names its document; "__name__" takes the document id.
            after = listing.after
            query = query.start_after(
                {"createdAt": after.created_at, "__name__": doc_id(after.request_id)}
            )
        query = query.limit(listing.size + 1)
        rows = read_firestore(
            "page", lambda: [d.to_dict() or {} for d in query.stream(timeout=self._timeout)]
        )
        return Page(rows[: listing.size], next_cursor(rows, listing.size))

    def jobs(self, listing: Listing) -> Page:
        db = self._firestore.db
        states, since = list(listing.states), listing.since
        if states and since is not None:
            query = JOBS_IN_STATES_SINCE.on(db, states, since)
        elif states:
            query = JOBS_IN_STATES.on(db, states)
        elif since is not None:
            query = JOBS_NEWEST_SINCE.on(db, since)
        else:
            query = JOBS_NEWEST.on(db)
        return self._page(query, listing, LIST_FIELDS)

    def _one(self, collection: str, request_id: str, fields: tuple[str, ...]) -> Any:
        ref = self._firestore.db.collection(collection).document(doc_id(request_id))
        snap = read_firestore(
            "get", lambda: ref.get(field_paths=list(fields), timeout=self._timeout)
        )
        return (snap.to_dict() or {}) if snap.exists else None

    def job(self, request_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._one(JOBS, request_id, JOB_FIELDS)
        return found

    def attempts(self, request_id: str, numbers: Sequence[int]) -> list[dict[str, Any]]:
        if not numbers:
            return []
        ref = self._firestore.db.collection(JOBS).document(doc_id(request_id))
        refs = [ref.collection(ATTEMPTS).document(str(n)) for n in numbers[:MAX_ATTEMPTS]]
        fields = list(ATTEMPT_FIELDS)

        def read() -> dict[str, dict[str, Any]]:
            # One batch get by key; its answers come in any order.
            found = self._firestore.db.get_all(refs, field_paths=fields, timeout=self._timeout)
            return {s.id: s.to_dict() or {} for s in found if s.exists}

        by_id = read_firestore("attempts", read)
        return [by_id[str(n)] for n in numbers[:MAX_ATTEMPTS] if str(n) in by_id]

    def count(self, state: str) -> int:
        query = IN_STATE.on(self._firestore.db, state).count(alias="n")
        result = read_firestore("count", lambda: query.get(timeout=self._timeout))
        return int(result[0][0].value)

    def ended_since(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        query = ENDED_NEWEST.on(self._firestore.db, since).select(list(TOTAL_FIELDS)).limit(limit)
        return read_firestore(
            "totals", lambda: [d.to_dict() or {} for d in query.stream(timeout=self._timeout)]
        )

    def rows(self, request_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not request_ids:
            return []
        jobs = self._firestore.db.collection(JOBS)
        refs = [jobs.document(doc_id(rid)) for rid in request_ids]

        def read() -> dict[str, dict[str, Any]]:
            # One batch get by key; its answers come in any order.
            found = self._firestore.db.get_all(
                refs, field_paths=list(LIST_FIELDS), timeout=self._timeout
            )
            return {s.id: s.to_dict() or {} for s in found if s.exists}

        by_id = read_firestore("rows", read)
        return [by_id[doc_id(rid)] for rid in request_ids if doc_id(rid) in by_id]

    def tally(self) -> Tally | None:
        ref = self._firestore.db.collection(WATCH).document(TALLY)
        snap = read_firestore("tally", lambda: ref.get(timeout=self._timeout))
        return tallies.decode(snap.to_dict() if snap.exists else None)

    def deployments(self, listing: Listing) -> Page:
        return self._page(
            DEPLOYMENTS_NEWEST.on(self._firestore.db), listing, DEPLOYMENT_LIST_FIELDS
        )

    def deployment(self, request_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._one(DEPLOYMENTS, request_id, DEPLOYMENT_FIELDS)
        return found

    def admission_summary(self) -> dict[str, Any] | None:
        ref = self._firestore.db.collection(ADMISSION).document(SUMMARY)
        snap = read_firestore("admission summary", lambda: ref.get(timeout=self._timeout))
        return (snap.to_dict() or {}) if snap.exists else None
