"""Ending an attempt by choice: giving up a queued attempt at its ``waitUntil`` and leaving
on-demand at one of its own checkpoints (AUTO's switches), each marked before it cancels."""

from __future__ import annotations

from shared.app.context import AttemptPorts, CapacityPorts
from shared.app.steps.attempts import auto_situation
from shared.app.steps.cancels import drive_cancels
from shared.domain.capacity.model import STANDARD
from shared.domain.capacity.situations import switch_from_on_demand
from shared.domain.decisions.recovery import (
    SWITCH,
    yield_requested,
)
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState
from shared.kernel.logs import get_logger

log = get_logger("switches")


def yield_attempt(
    ports: AttemptPorts,
    request_id: str,
    job_name: str,
    *,
    why: str,
    reason: str,
    known: JobRecord | None = None,
) -> bool:
    """End the attempt running ``job_name`` by choice (AUTO's capacity policy): mark it and
    keep the job pending cancel in one write, then cancel it. Its CANCELLED end is settled as
    a switch (:func:`~shared.domain.decisions.recovery.settle`): the next attempt is due at once
    and no retry budget is charged. True when this call marked it.

    The write is decided on a fresh read when ``known`` is stale, so an attempt that moved on
    (a hint saw it start) is not marked. A crash after the write leaves the cancel pending on
    the record, for the tick; a job that starts between the write and the cancel is still
    cancelled, and its retry resumes from its latest checkpoint.
    """
    now = ports.clock()
    written = ports.jobs.write(
        request_id,
        lambda rec: yield_requested(rec, job_name, why, reason, now),
        known.stored if known is not None else None,
    )
    if written is None or written.change is None:
        return False
    log.info(f"attempt ended by choice: {reason}", extra={"fields": {"vertexJob": job_name}})
    drive_cancels(ports, request_id, [job_name])
    return True


def leave_on_demand(ports: CapacityPorts, record: JobRecord) -> bool:
    """At a checkpoint of an AUTO request's running on-demand attempt (``record``, with the
    checkpoint recorded as its latest), ask the capacity policy whether to leave it for
    cheaper capacity; if so, end it by choice (:func:`yield_attempt`). True when it did.
    Only a checkpoint this attempt wrote counts (one it resumed from would not save its run).

    Only attempts AUTO put on on-demand are asked, and not once it said on-demand to the end
    (``capacity.final``): Spot and FLEX_START attempts are never left by choice.
    """
    if record.strategy != STANDARD or record.state is not JobState.RUNNING:
        return False
    if not record.capacity or record.capacity.get("final") or not record.vertex_job:
        return False
    if record.yielding or record.cancel_requested:
        return False
    saved, started = record.latest_checkpoint, record.attempt_started_at
    if saved is None or started is None or saved.at < started:
        return False  # not a checkpoint of this attempt: leaving would lose all it ran
    situation = auto_situation(ports, record, before=record.attempt, running=STANDARD)
    decision = switch_from_on_demand(situation) if situation is not None else None
    if decision is None:
        return False
    return yield_attempt(
        ports,
        record.request_id,
        record.vertex_job,
        why=SWITCH,
        reason=f"left on-demand at a checkpoint: {decision.reason}",
        known=record,
    )
