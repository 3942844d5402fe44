"""The Firestore database the adapters share: one client, and the two writes every store is
made of.

``create_document`` is Firestore's conditional put (it fails when the document exists);
``transact_document`` reads a document, lets a pure decision compute the change and writes it
if the document is unchanged since the read. What the writes mean lives in
:mod:`shared.app.repository` and the domain.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from google.api_core import exceptions as gexc

from shared.domain.model.changes import AnyChange, Decided, Written
from shared.domain.model.records import Stored
from shared.kernel.config import Settings
from shared.kernel.errors import StoreUnavailable

T = TypeVar("T")

#: Every write of a job record stamps it with its commit time (a server timestamp), so the tick
#: reads only the records written since its watch list's mark.
TOUCHED_AT = "touchedAt"
#: A write that may move a record into, within or out of the admission line
#: (:func:`~shared.domain.admission.line.touches_line`) stamps this too, so a pass reads only
#: the records its line's mark has not seen, and a busy control plane's other writes none.
LINE_TOUCHED_AT = "lineTouchedAt"

_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.Aborted,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Unknown,
    gexc.RetryError,
)


class Firestore:
    """The database of every Firestore adapter of one wiring (jobs, attempts, admission, the
    watch list, series, deployments, rejections, the status page's views): one client, built
    on first use, so an instance that never reads Firestore never builds one."""

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self._settings = settings
        self._db = client
        self._collections: dict[str, Any] = {}
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

    def collection(self, name: str) -> Any:
        """The collection ``name``, its reference made once: one CollectionReference serves
        every thread (it holds no state), and intake's path makes one per write otherwise."""
        found = self._collections.get(name)
        if found is None:
            found = self._collections[name] = self.db.collection(name)
        return found


def fields_of(snap: Any) -> dict[str, Any]:
    """A document's fields as the stores hand them out: without the write stamp, which is
    storage's own (only :meth:`~shared.adapters.firestore.job_store.FirestoreJobStore.changed_since`
    reads it, to page by it)."""
    fields: dict[str, Any] = snap.to_dict() or {}
    fields.pop(TOUCHED_AT, None)
    fields.pop(LINE_TOUCHED_AT, None)
    return fields


def stored_of(snap: Any) -> Stored:
    return Stored(fields_of(snap), snap.update_time)


def stamp() -> Any:
    """The value of a write's :data:`TOUCHED_AT`: its commit time."""
    from google.cloud import firestore

    return firestore.SERVER_TIMESTAMP


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
    decide: Callable[[dict[str, Any]], AnyChange | Decided[AnyChange, Any] | None],
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
    never decided on; ``decide`` must be pure, as it may run again. A decision that gives a
    result (:class:`~shared.domain.model.changes.Decided`) has it handed back with the record.

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
            current, version = fields_of(snap), snap.update_time
        made = decide(current)
        change = made.change if isinstance(made, Decided) else made
        result = made.result if isinstance(made, Decided) else None
        if change is None:
            return Written(None, Stored(current, version), result)
        batch = db.batch()
        updated = write(batch, current, change, db.write_option(last_update_time=version))
        results = batch.commit()
        # The document's own update is the batch's first write; without one it is unchanged.
        after = Stored(change.applied_to(current), results[0].update_time if updated else version)
        return Written(change, after, result)

    result: Written[AnyChange, Stored] | None = call_firestore(
        "conditional write", until_unchanged(attempt)
    )
    return result


def until_unchanged(step: Callable[[], T]) -> Callable[[], T]:
    """``step`` run again, with backoff, while its conditional write finds the document
    changed since its read (FAILED_PRECONDITION), created meanwhile (ALREADY_EXISTS) or
    deleted since (NOT_FOUND)."""
    wrapped: Callable[[], T] = _contention_retry()(step)
    return wrapped


@functools.cache
def _contention_retry() -> Any:
    """:func:`until_unchanged`'s policy, built once: a Retry is immutable, and building it
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
