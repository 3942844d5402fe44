"""Scheduled requests' concurrency: whether a slot runs while its series' last slot is active.

``allow`` needs nothing. ``forbid`` and ``replace`` go through the series document
(``series/{id}``), whose ``current`` field names the request that last took the series. The
decision, on that document and the current request's record, and the take are one
conditional write of the document (:meth:`~shared.app.repository.jobs.JobRecords.take_turn`), so two
slots delivered at once never both run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.app.commands import Outcome
from shared.app.services.cancel import cancel_request
from shared.app.steps.outbox import flush_outbox
from shared.domain.request.message import JobRequest
from shared.domain.request.schedule import Concurrency, Move
from shared.kernel.errors import SubmissionInProgress
from shared.kernel.logs import get_logger

if TYPE_CHECKING:
    from shared.app.context import Intake

log = get_logger("series")


def take_slot(request: JobRequest, intake: Intake) -> Outcome | None:
    """Let a scheduled slot take its series; None when it runs (the caller submits it), else
    what became of it (SKIPPED).

    ``replace`` cancels the series' active request end to end, exactly as a cancel message
    does, and then decides again: the cancelled request has ended, so the slot takes over.

    Raises:
        SubmissionInProgress: the series' current request took it but is not recorded yet,
            or is still being cancelled; the redelivery decides again.
    """
    slot = request.slot
    if slot is None or slot.concurrency is Concurrency.ALLOW:
        return None
    if intake.jobs.get(request.request_id) is not None:
        return None  # delivered before: the submission path sees a duplicate
    ttl = intake.settings.claim_ttl_seconds
    for _ in range(2):
        turn = intake.jobs.take_turn(request, slot, intake.clock(), ttl)
        fields = {"fields": {"series": slot.series, "move": turn.move.value, "other": turn.other}}
        if turn.move is Move.RUN:
            return None
        if turn.move is Move.WAIT:
            raise SubmissionInProgress(f"{turn.other} took the series and is being submitted")
        if turn.move is Move.SKIP:
            assert turn.other is not None
            intake.jobs.record_skipped(request, turn.other, intake.clock())
            flush_outbox(request.request_id, intake.jobs, intake.notifier)
            log.info("slot skipped: the series is busy", extra=fields)
            return Outcome.SKIPPED
        assert turn.other is not None
        log.info("slot replaces the series' active request", extra=fields)
        cancel_request(turn.other, intake)
    raise SubmissionInProgress(f"the series {slot.series} is still being handed over")
