"""Settling an observation: the record's next state, accounting, and whether to retry (pure).

:func:`settle` extends :func:`shared.domain.decisions.jobs.observe`: when the current attempt ends,
it accounts the attempt (queued vs running time, GPU-seconds, cost), and on failure classifies it
and asks the retry policy whether attempt n+1 may follow, and after how long. Every
notification to send is returned with the change, so the store can keep it in an outbox in the
same transaction (nothing is lost if the publish fails afterwards).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from shared.domain.admission.ledger import MAX_ENDED_JOBS, Stage, one_attempt
from shared.domain.decisions.jobs import observe
from shared.domain.decisions.submissions import QUOTA_REASON, notification
from shared.domain.model.changes import Change
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState
from shared.domain.model.values import clip
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.policy.failures import FailureClass
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import CAPACITY, GROUP_OF, PREEMPTION, RetryPolicy
from shared.domain.request.attempts import usage


def settle(
    record: JobRecord,
    job: VertexJob,
    now: datetime,
    policy: RetryPolicy,
    prices: PriceTable | None = None,
) -> Change | None:
    """Reconcile ``record`` to ``job``; when the attempt ends, account it (priced with
    ``prices``) and decide what next under ``policy`` and the request's own budgets.

    Returns None when nothing changes (see :func:`observe`).
    """
    change = observe(record, job, now)
    if change is None or not change.state.terminal:
        return change
    spent = usage(job.create_time, job.start_time, job.end_time or now, record.gpus)
    cost = _cost(record, spent["gpuSeconds"], prices)
    attempt_fields = {**change.attempt, **spent, "cost": cost}
    record_fields = {**change.record, **_totals(record, spent, cost)}
    if change.state is JobState.SUCCEEDED:
        # reason None: the reason of an earlier retry no longer applies.
        return finish(
            record,
            JobState.SUCCEEDED,
            now,
            None,
            attempt_fields=attempt_fields,
            fields=record_fields,
        )
    # Admission is ending this job for a higher priority (a user's cancel overrides it).
    preempting = yielded(record, job.name) and record.yielding.get("why") == PREEMPTED
    if change.state is JobState.CANCELLED and yielded(record, job.name):
        if preempting:
            return _requeued(record, now, attempt_fields, record_fields)
        return _switched(record, now, attempt_fields, record_fields)
    failure = policy.classify(job.state, job.error_code, job.error_message)
    if preempting and GROUP_OF.get(failure) in (PREEMPTION, CAPACITY):
        # Reclaimed by Vertex before admission's cancel landed: the same end, by another
        # hand. It waits again (so its GPUs go to the head it was ended for, not to a
        # second victim), with no budget charged.
        return _requeued(record, now, attempt_fields, record_fields)
    if record.cancel_requested or change.state is JobState.CANCELLED:
        failure = FailureClass.CANCELLED
    attempt_fields["errorClass"] = failure.value
    if failure is FailureClass.CANCELLED:
        return finish(
            record,
            JobState.CANCELLED,
            now,
            "cancelled",
            attempt_fields=attempt_fields,
            fields=record_fields,
        )
    retries = dict(record.retries)
    decision = policy.for_request(record.options.get("retryPolicy")).decide(failure, retries)
    reason = clip(f"{decision.reason}: {job.error_message or job.state}") or ""
    if not decision.retry:
        return finish(
            record,
            JobState.FAILED,
            now,
            reason,
            attempt_fields=attempt_fields,
            fields=record_fields,
        )
    assert decision.group is not None
    retries[decision.group] = decision.used_after
    delay = policy.backoff.seconds(decision.used_after)
    record_fields.update(
        state=JobState.RETRYING.value,
        reason=reason,
        retries=retries,
        capacityFailures=record.capacity_failures + (decision.group == CAPACITY),
        nextAttemptAt=now + timedelta(seconds=delay),
        lastFailureClass=failure.value,
    )
    record_fields.pop("endedAt", None)
    deletes: tuple[str, ...] = ("yielding",) if record.yielding else ()
    if record.admission.get("stage") == Stage.ADMITTED.value and one_attempt(record.admission):
        # Its admission declared how long it holds its GPUs, for one attempt: backfill
        # counted on their return by then. It waits in its queue's line again, its arrival
        # kept, held until its backoff is over (``notBefore``: not ``nextAttemptAt``, which
        # the tick's due sweep would list on every tick while it waits); only its next
        # admission makes the retry due. Its caller gives its entry back.
        record_fields["admission"] = {
            **record.admission,
            "stage": Stage.WAITING.value,
            "admittedAt": None,
            "heldBy": None,
            "notBefore": record_fields.pop("nextAttemptAt"),
        }
        deletes = (*deletes, *(("nextAttemptAt",) if record.next_attempt_at else ()))
    # A switch asked for before this failure came first is moot: the attempt ended anyway.
    return replace(
        _with(record, JobState.RETRYING, record_fields, attempt_fields, reason),
        deletes=deletes,
    )


def yielded(record: JobRecord, job_name: str) -> bool:
    """Did flexjobs itself end ``job_name`` by choice (:func:`yield_requested`), so that
    its CANCELLED end is a switch rather than a user's cancel?"""
    return (
        not record.cancel_requested
        and bool(record.yielding)
        and record.yielding.get("vertexJob") == job_name
    )


def _switched(
    record: JobRecord,
    now: datetime,
    attempt_fields: dict[str, Any],
    record_fields: dict[str, Any],
) -> Change:
    """The end of an attempt flexjobs ended by choice: the next attempt is due at once, no
    retry budget is charged and no failure is recorded; the capacity policy decides again."""
    why = str(record.yielding.get("why") or SWITCH)
    reason = clip(str(record.yielding.get("reason") or why)) or why
    attempt_fields = {**attempt_fields, "endedBy": why}
    record_fields = {
        **record_fields,
        "state": JobState.RETRYING.value,
        "reason": reason,
        "nextAttemptAt": now,
        "updatedAt": now,
        # Counted, so that the policy stops switching at its bound (capacity.MAX_SWITCHES).
        "switches": record.switches + 1,
    }
    record_fields.pop("endedAt", None)
    change = _with(record, JobState.RETRYING, record_fields, attempt_fields, reason)
    return replace(change, deletes=("yielding",))


def _requeued(
    record: JobRecord,
    now: datetime,
    attempt_fields: dict[str, Any],
    record_fields: dict[str, Any],
) -> Change:
    """The end of an attempt admission preempted for a higher priority: it waits in its queue
    again (``admission.stage`` WAITING, its arrival kept, so it goes first among its equals),
    with no retry budget charged, no switch counted (it was not the job's choice) and nothing
    due: only its next admission makes attempt n+1 due, from its latest checkpoint. The
    ledger entry is given back by the caller once this is written (a crash in between leaves
    an entry the tick drops). Notified as PREEMPTED."""
    reason = clip(str(record.yielding.get("reason") or PREEMPTED)) or PREEMPTED
    attempt_fields = {**attempt_fields, "endedBy": PREEMPTED}
    admission = {**record.admission, "stage": Stage.WAITING.value}
    admission.update(admittedAt=None, heldBy=None)
    message = notification(record.request_id, "PREEMPTED", record.attempt or 1, reason)
    record_fields = {
        **record_fields,
        "state": JobState.RETRYING.value,
        "reason": reason,
        "admission": admission,
        "updatedAt": now,
        "outbox": [*record.outbox, message],
        "outboxPending": True,
    }
    record_fields.pop("endedAt", None)
    record_fields.pop("nextAttemptAt", None)
    deletes = ("yielding", *(("nextAttemptAt",) if record.next_attempt_at else ()))
    return Change(
        state=JobState.RETRYING, record=record_fields, attempt=attempt_fields, deletes=deletes
    )


#: Why an attempt is ended by choice, and the state it must still be in for that: a wait
#: given up at its ``waitUntil`` (AUTO) ends a queued attempt; leaving on-demand at a
#: checkpoint (AUTO) and a preemption by admission for a higher priority end a running one.
#: An attempt found otherwise on the write's fresh read (a hint recorded it running
#: meanwhile) is left alone.
GAVE_UP: Final = "gave-up"
SWITCH: Final = "switch"
PREEMPTED: Final = "preempted"
YIELDS_FROM: Final = {
    GAVE_UP: JobState.QUEUED,
    SWITCH: JobState.RUNNING,
    PREEMPTED: JobState.RUNNING,
}


def yield_requested(
    record: JobRecord, job_name: str, why: str, reason: str, now: datetime
) -> Change | None:
    """End the current attempt by choice (AUTO: ``why`` is :data:`GAVE_UP` or :data:`SWITCH`):
    mark it, and keep its job pending cancel until Vertex confirms, in one write. None when
    there is nothing to end: the record moved on, is no longer in the state ``why`` ends
    (:data:`YIELDS_FROM`), is being cancelled, already yields this job, or cannot keep one
    more pending cancel (then nothing would retry the cancel)."""
    if record.state is not YIELDS_FROM.get(why) or record.cancel_requested:
        return None
    if record.vertex_job != job_name or record.yielding.get("vertexJob") == job_name:
        return None
    pending = cancels_pending(record, [job_name], now)
    if pending is None and job_name not in record.pending_cancels:
        return None
    marked = {"attempt": record.attempt, "vertexJob": job_name, "why": why}
    fields = {
        **(pending.record if pending else {}),
        "yielding": {**marked, "reason": clip(reason), "at": now},
        "updatedAt": now,
    }
    return Change(state=record.state, record=fields)


def _with(
    record: JobRecord,
    state: JobState,
    fields: dict[str, Any],
    attempt_fields: dict[str, Any],
    reason: str | None,
) -> Change:
    """A change that also queues its notification in the record's outbox."""
    message = notification(record.request_id, state.value, record.attempt or 1, reason)
    outbox = [*record.outbox, message]
    fields = {**fields, "outbox": outbox, "outboxPending": True}
    return Change(state=state, record=fields, attempt=attempt_fields)


def _cost(record: JobRecord, gpu_seconds: float, prices: PriceTable | None) -> dict[str, Any]:
    if prices is None or not record.accelerator_type:
        return {"priced": False}
    estimate = prices.estimate(record.accelerator_type, str(record.strategy), gpu_seconds)
    return estimate.to_dict()


def _totals(record: JobRecord, spent: dict[str, float], cost: dict[str, Any]) -> dict[str, Any]:
    totals = {k: record.totals.get(k, 0.0) + v for k, v in spent.items()}
    previous = record.cost
    summed = {
        key: round(float(previous.get(key) or 0.0) + float(cost.get(key) or 0.0), 2)
        for key in ("costUsd", "onDemandUsd", "savingsUsd")
    }
    return {**totals, "cost": {**summed, "priced": bool(cost.get("priced"))}}


def cancel_requested(record: JobRecord, now: datetime) -> Change | None:
    """Mark a cancel as asked for, before Vertex is told (so no attempt can start after it)."""
    if record.state.terminal or record.cancel_requested:
        return None
    return Change(state=record.state, record={"cancelRequested": True, "updatedAt": now})


def finish(
    record: JobRecord,
    state: JobState,
    now: datetime,
    reason: str | None,
    *,
    attempt_fields: dict[str, Any] | None = None,
    fields: dict[str, Any] | None = None,
) -> Change | None:
    """Move a record to a terminal state: the one way, whatever ended it.

    A Vertex job's own end (:func:`settle`), a create Vertex refused for good, and a cancel
    all come here. It writes the notification into the outbox in the same change, clears the
    claim and retry schedule, and never overwrites a terminal state (None then): a request
    refused by Vertex after a cancel stays CANCELLED, and one CANCELLED stays so. ``fields``
    adds to what is written (the attempt's accounting; ``endedAt`` as Vertex reports it).
    """
    if not state.terminal:
        raise ValueError(f"{state} is not a terminal state")
    if record.state.terminal:
        return None
    written = {
        "updatedAt": now,
        "endedAt": now,
        **(fields or {}),
        "state": state.value,
        "reason": clip(reason),
    }
    if record.admission.get("stage") in (Stage.WAITING.value, Stage.ADMITTED.value):
        # Out of its queue's line and, once Vertex has ended its jobs, out of the ledger.
        written["admission"] = {**record.admission, "stage": Stage.ENDED.value, "heldBy": None}
    change = _with(record, state, written, attempt_fields or {}, clip(reason))
    # Nothing is submitted after an end: no claim, no retry schedule, no switch.
    gone = ("claim", "nextAttemptAt", *(("yielding",) if record.yielding else ()))
    return replace(change, deletes=gone)


def cancelled(record: JobRecord, now: datetime) -> Change | None:
    """Settle a cancelled request as CANCELLED (once), with its notification."""
    # An attempt that already ended (RETRYING), or never got a job, keeps how it ended.
    running = record.state is not JobState.RETRYING and bool(record.vertex_job)
    attempt = (
        {"state": JobState.CANCELLED.value, "errorClass": FailureClass.CANCELLED.value}
        if running
        else {}
    )
    return finish(record, JobState.CANCELLED, now, "cancelled", attempt_fields=attempt)


def cancel_now(record: JobRecord, names: list[str], now: datetime) -> Change | None:
    """Settle a cancel in one write: the jobs still to cancel (``names``) kept pending until
    Vertex confirms, and the record CANCELLED with its notification. None when nothing is
    left to write."""
    pending = cancels_pending(record, names, now)
    done = cancelled(record, now)
    if pending is None and done is None:
        return None
    fields = {**(pending.record if pending else {}), **(done.record if done else {})}
    if names and record.admission.get("stage"):
        # The jobs its admission entry waits on until Vertex has ended them (jobs_of).
        admission = fields.get("admission") or record.admission
        fields["admission"] = {**admission, "jobs": list(dict.fromkeys(names))[:MAX_ENDED_JOBS]}
    return Change(
        JobState.CANCELLED,
        fields,
        done.attempt if done else {},
        deletes=done.deletes if done else (),
    )


def failed(record: JobRecord, now: datetime, reason: str) -> Change | None:
    """Settle a request FAILED for a reason outside Vertex's job state (a refused create)."""
    return finish(record, JobState.FAILED, now, reason)


def parked(
    record: JobRecord, now: datetime, attempt: int, delay_seconds: float, detail: str
) -> Change | None:
    """Park the submission of ``attempt`` after Vertex refused it for quota.

    Attempt 1 waits as QUEUED with no Vertex job; a retry stays RETRYING. Either way
    ``reason`` is ``quota`` and the tick submits it again once ``nextAttemptAt`` is due.
    """
    state = record.state
    if state.terminal or record.cancel_requested:
        return None
    fields: dict[str, Any] = {
        "reason": QUOTA_REASON,
        "quotaDetail": clip(detail),
        "quotaRetries": record.quota_retries + 1,
        "nextAttemptAt": now + timedelta(seconds=delay_seconds),
        "updatedAt": now,
    }
    if state is not JobState.RETRYING:
        fields.update(state=JobState.QUEUED.value, attempt=attempt, vertexJob=None)
    # The claim is expired, not deleted: an earlier delivery of this attempt may have made a
    # job whose create's outcome was unknown, so the next claim of it must look that up.
    held = record.claim
    fields["claim"] = {"token": held.token if held else None, "expiresAt": now, "attempt": attempt}
    new_state = JobState(fields.get("state", state.value))
    return Change(state=new_state, record=fields)


#: At most this many Vertex jobs wait on one record for their cancel to be confirmed.
MAX_PENDING_CANCELS = 50


def cancels_pending(record: JobRecord, names: list[str], now: datetime) -> Change | None:
    """Remember Vertex jobs that must be cancelled, until Vertex confirms each.

    The list is kept on the record (bounded), so a cancel that fails is retried by the next
    tick; :func:`cancels_confirmed` drops the names Vertex confirmed.
    """
    pending = list(record.pending_cancels)
    new = [n for n in dict.fromkeys(names) if n not in pending]
    # Never drop a cancel Vertex has not confirmed: past the bound, a name is not kept (its
    # cancel is still asked for now, and a stray is found again by the next tick's listing).
    new = new[: max(0, MAX_PENDING_CANCELS - len(pending))]
    if not new:
        return None
    pending += new
    fields = {"pendingCancels": pending, "cancelPending": True, "updatedAt": now}
    return Change(state=record.state, record=fields)


def cancels_confirmed(record: JobRecord, names: list[str], now: datetime) -> Change | None:
    """Forget the Vertex jobs whose cancel Vertex confirmed."""
    pending = list(record.pending_cancels)
    left = [n for n in pending if n not in names]
    if left == pending:
        return None
    fields = {"pendingCancels": left, "cancelPending": bool(left), "updatedAt": now}
    return Change(state=record.state, record=fields)


def work_lost_seconds(
    attempt: dict[str, Any], latest: Checkpoint | None, resumed_from: str | None
) -> float:
    """Running time of an ended attempt that no newer checkpoint saved.

    All of it when the attempt wrote no complete checkpoint beyond the one it resumed from;
    otherwise the running time after that newer checkpoint.
    """
    running = float(attempt.get("runningSeconds") or 0.0)
    ended: datetime | None = attempt.get("endedAt")
    if latest is None or latest.uri == resumed_from or ended is None:
        return running
    return min(running, max(0.0, (ended - latest.at).total_seconds()))
