"""FirestoreSeriesStore: the scheduled series on Cloud Firestore (``series/{id}``), storage
only: which request holds each series, written only if still as read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from shared.adapters.firestore.database import (
    Firestore,
    call_firestore,
    fields_of,
    until_unchanged,
)
from shared.adapters.firestore.job_store import record_ref
from shared.domain.model.changes import Decided
from shared.domain.model.ids import doc_id

R = TypeVar("R")

SERIES = "series"


class FirestoreSeriesStore:
    """The series documents in Firestore, on a shared :class:`Firestore` (a decision reads
    the holding request's job record too)."""

    def __init__(self, firestore: Firestore) -> None:
        self._firestore = firestore

    def transact_series(
        self,
        series: str,
        decide: Callable[[dict[str, Any] | None, dict[str, Any] | None], Decided[Any, R]],
    ) -> R:
        db = self._firestore.db
        ref = db.collection(SERIES).document(doc_id(series))

        def attempt() -> R:
            # Optimistic, like transact_document: the series document is written only if it
            # is still as read (created only if still absent), so two slots never both take
            # the series; the holder's record is read as of the decision.
            snap = ref.get()
            document = snap.to_dict() if snap.exists else None
            current = None
            holder = (document or {}).get("current")
            if isinstance(holder, str) and holder:
                held = record_ref(self._firestore, holder).get()
                current = fields_of(held) if held.exists else None
            decided = decide(document, current)
            write = decided.change
            if write is not None:
                if snap.exists:
                    ref.update(write, option=db.write_option(last_update_time=snap.update_time))
                else:
                    ref.create(write)
            # The last run's result: the decision whose write, if any, took.
            return decided.result

        result: R = call_firestore("series write", until_unchanged(attempt))
        return result
