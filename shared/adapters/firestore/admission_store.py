"""FirestoreAdmissionStore: admission's storage on Cloud Firestore, storage only: the ledger and
the summary (``admission/ledger``, ``admission/summary``) and the waiting line (the job records
whose ``admission.stage`` is WAITING). A ledger write carries the change of the record it
admits in the same batch, so an admission and its record's are written together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.adapters.firestore.database import (
    LINE_TOUCHED_AT,
    Firestore,
    call_firestore,
    fields_of,
    stored_of,
    until_unchanged,
)
from shared.adapters.firestore.job_store import JOBS, MARK_MARGIN, record_fields, record_ref
from shared.adapters.firestore.queries import Query, pages, partial
from shared.adapters.firestore.watch_store import FirestoreWatchStore
from shared.domain.admission.line import LINE_FIELDS
from shared.domain.model.changes import Change
from shared.domain.model.records import TICK_FIELDS, Stored
from shared.domain.model.watch import Saved, Watch

ADMISSION = "admission"
#: The admission line's documents (``line/head``, ``line/shard-N``), kept as the watch list is.
LINE = "line"
LEDGER = "ledger"
SUMMARY = "summary"

WAITING = Query(JOBS, (("admission.stage", "=="),), (("admission.waitingSince", "ASCENDING"),))
WAITING_IN = Query(
    JOBS,
    (("admission.stage", "=="), ("admission.queue", "==")),
    (("admission.waitingSince", "ASCENDING"),),
)
LINE_CHANGED = Query(JOBS, ((LINE_TOUCHED_AT, ">="),), ((LINE_TOUCHED_AT, "ASCENDING"),))


class FirestoreAdmissionStore:
    """The admission ledger, its summary and the waiting line in Firestore, on a shared
    :class:`Firestore` (the ledger's writes update the job records they admit)."""

    def __init__(self, firestore: Firestore) -> None:
        self._firestore = firestore
        self._line = FirestoreWatchStore(firestore, LINE, tally=False)

    def _ledger_ref(self) -> Any:
        return self._firestore.db.collection(ADMISSION).document(LEDGER)

    def read_ledger(self) -> Stored | None:
        snap = call_firestore("get ledger", lambda: self._ledger_ref().get())
        return stored_of(snap) if snap.exists else None

    def transact_ledger(
        self,
        request_id: str | None,
        decide: Callable[
            [dict[str, Any] | None, dict[str, Any] | None],
            tuple[dict[str, Any] | None, Change | None] | None,
        ],
    ) -> bool:
        db = self._firestore.db
        ledger_ref = self._ledger_ref()
        record_doc = record_ref(self._firestore, request_id) if request_id is not None else None

        def attempt() -> bool:
            # Optimistic, as transact_document: both documents are written in one batch,
            # each with the precondition of its read (created only if still absent), so an
            # admission racing another for the same GPUs decides again on a fresh read.
            snap = ledger_ref.get()
            ledger = snap.to_dict() if snap.exists else None
            held = record_doc.get() if record_doc is not None else None
            record = fields_of(held) if held is not None and held.exists else None
            decided = decide(ledger, record)
            if decided is None:
                return False
            write, change = decided
            if write is None and (change is None or record is None):
                return False
            batch = db.batch()
            if write is not None:
                if snap.exists:
                    option = db.write_option(last_update_time=snap.update_time)
                    batch.update(ledger_ref, write, option=option)
                else:
                    batch.create(ledger_ref, write)
            if change is not None and record is not None and held is not None:
                option = db.write_option(last_update_time=held.update_time)
                batch.update(record_doc, record_fields(change, record), option=option)
            batch.commit()
            return True

        done: bool = call_firestore("ledger write", until_unchanged(attempt))
        return done

    def write_admission_summary(self, document: dict[str, Any]) -> None:
        ref = self._firestore.db.collection(ADMISSION).document(SUMMARY)
        call_firestore("summary write", lambda: ref.set(document))

    def waiting_admission(self, queue: str | None = None, most: int = 1) -> list[Stored]:
        db = self._firestore.db
        query = WAITING.on(db, "WAITING") if queue is None else WAITING_IN.on(db, "WAITING", queue)
        found = pages(query, TICK_FIELDS, most=most)
        return [Stored(d.to_dict() or {}, d.update_time, partial=True) for d in found]

    def count_waiting(self, queue: str) -> int:
        # WAITING_IN's filters alone (no order), counted: its composite index serves it.
        query = WAITING_IN.on(self._firestore.db, "WAITING", queue, ordered=False)
        result = call_firestore("count", query.count(alias="n").get)
        return int(result[0][0].value)

    def read_line(self) -> Saved:
        return self._line.read_watch()

    def save_line(self, line: Watch, version: Any) -> bool:
        return self._line.save_watch(line, None, version)

    def line_changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        # As the watch list's sync: the range's field orders first, a page resumes after the
        # last one's stamp, and the margin re-reads the second before the mark.
        query = LINE_CHANGED.on(self._firestore.db, mark - MARK_MARGIN).order_by("__name__")
        return partial(pages(query, (*LINE_FIELDS, LINE_TOUCHED_AT), most + 1, at))
