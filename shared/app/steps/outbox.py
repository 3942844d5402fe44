"""Settling a record and flushing its outbox: the change and the notifications it owes are
written in one transaction, then published, so a failed publish is retried, never lost."""

from __future__ import annotations

from collections.abc import Callable

from shared.app.context import AttemptPorts
from shared.app.ports import Notifier
from shared.app.repository.jobs import JobRecords
from shared.domain.model.changes import Change
from shared.domain.model.records import JobRecord
from shared.kernel.events import Event, logged
from shared.kernel.logs import get_logger

log = get_logger("outbox")


def apply_and_notify(
    ports: AttemptPorts, request_id: str, decide: Callable[[JobRecord], Change | None]
) -> Change | None:
    """Apply one change to a record, then publish the notifications it queued."""
    written = ports.jobs.write(request_id, decide)
    if written is not None and written.change is not None:
        flush_outbox(request_id, ports.jobs, ports.notifier, written.record)
        change, record = written.change, written.record
        if "state" in change.record:
            # A state decided without a Vertex observation (a cancel, a create refused for
            # good): logged as the lifecycle logs the observed ones, so every end is counted.
            event = logged(
                Event.JOB_STATE_CHANGED,
                state=change.state.value,
                attempt=record.attempt,
                strategy=record.strategy,
                reason=change.record.get("reason"),
            )
            log.info(f"job is {change.state.value}", extra=event)
    return None if written is None else written.change


def flush_outbox(
    request_id: str, store: JobRecords, notifier: Notifier, known: JobRecord | None = None
) -> JobRecord | None:
    """Publish a record's pending notifications, then forget them; returns the record as it
    then stands (None: no record). ``known``: the record just written, whose outbox is sent
    as it stands (no read) and whose version guards the write that forgets it."""
    record = known if known is not None else store.get(request_id)
    pending = list(record.outbox) if record is not None else []
    for message in pending:
        notifier.notify(message)
    if not pending:
        return record
    dropped = store.drop_from_outbox(request_id, pending, record.stored if record else None)
    return None if dropped is None else dropped.record
