"""Settling an observation: the record's next state, accounting, and whether to retry (pure).

:func:`settle` extends :func:`shared.domain.jobs.observe`: when the current attempt ends, it
accounts the attempt (queued vs running time, GPU-seconds, cost), and on failure classifies it
and asks the retry policy whether attempt n+1 may follow, and after how long. Every
notification to send is returned with the change, so the store can keep it in an outbox in the
same transaction (nothing is lost if the publish fails afterwards).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from shared.domain.attempts import usage
from shared.domain.checkpoints import Checkpoint
from shared.domain.failures import FailureClass
from shared.domain.jobs import Change, JobState, VertexJob, observe
from shared.domain.pricing import PriceTable
from shared.domain.records import QUOTA_REASON, notification
from shared.domain.retry import CAPACITY, RetryPolicy
from shared.domain.values import clip


def _options(record: dict[str, Any]) -> dict[str, Any]:
    raw = record.get("options")
    value = json.loads(raw) if isinstance(raw, str) and raw else {}
    return value if isinstance(value, dict) else {}


def settle(
    record: dict[str, Any],
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
    gpus = int(record.get("gpus") or 0)
    spent = usage(job.create_time, job.start_time, job.end_time or now, gpus)
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
    failure = policy.classify(job.state, job.error_code, job.error_message)
    if record.get("cancelRequested") or change.state is JobState.CANCELLED:
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
    retries = dict(record.get("retries") or {})
    decision = policy.for_request(_options(record).get("retryPolicy")).decide(failure, retries)
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
        capacityFailures=int(record.get("capacityFailures") or 0) + (decision.group == CAPACITY),
        nextAttemptAt=now + timedelta(seconds=delay),
        lastFailureClass=failure.value,
    )
    record_fields.pop("endedAt", None)
    return _with(record, JobState.RETRYING, record_fields, attempt_fields, reason)


def _with(
    record: dict[str, Any],
    state: JobState,
    fields: dict[str, Any],
    attempt_fields: dict[str, Any],
    reason: str | None,
) -> Change:
    """A change that also queues its notification in the record's outbox."""
    message = notification(record, state.value, int(record.get("attempt", 1)), reason)
    outbox = [*list(record.get("outbox") or []), message]
    fields = {**fields, "outbox": outbox, "outboxPending": True}
    return Change(state=state, record=fields, attempt=attempt_fields)


def _cost(record: dict[str, Any], gpu_seconds: float, prices: PriceTable | None) -> dict[str, Any]:
    if prices is None or not record.get("acceleratorType"):
        return {"priced": False}
    estimate = prices.estimate(
        str(record["acceleratorType"]), str(record.get("strategy")), gpu_seconds
    )
    return estimate.to_dict()


def _totals(
    record: dict[str, Any], spent: dict[str, float], cost: dict[str, Any]
) -> dict[str, Any]:
    totals = {k: float(record.get(k) or 0.0) + v for k, v in spent.items()}
    previous = record.get("cost") or {}
    summed = {
        key: round(float(previous.get(key) or 0.0) + float(cost.get(key) or 0.0), 2)
        for key in ("costUsd", "onDemandUsd", "savingsUsd")
    }
    return {**totals, "cost": {**summed, "priced": bool(cost.get("priced"))}}


def cancel_requested(record: dict[str, Any], now: datetime) -> Change | None:
    """Mark a cancel as asked for, before Vertex is told (so no attempt can start after it)."""
    state = JobState(record.get("state", JobState.ACCEPTED.value))
    if state.terminal or record.get("cancelRequested"):
        return None
    return Change(state=state, record={"cancelRequested": True, "updatedAt": now})


def finish(
    record: dict[str, Any],
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
    if JobState(record.get("state", JobState.ACCEPTED.value)).terminal:
        return None
    written = {
        "updatedAt": now,
        "endedAt": now,
        "claim": None,
        "nextAttemptAt": None,
        **(fields or {}),
        "state": state.value,
        "reason": clip(reason),
    }
    return _with(record, state, written, attempt_fields or {}, clip(reason))


def cancelled(record: dict[str, Any], now: datetime) -> Change | None:
    """Settle a cancelled request as CANCELLED (once), with its notification."""
    # An attempt that already ended (RETRYING), or never got a job, keeps how it ended.
    running = record.get("state") != JobState.RETRYING.value and bool(record.get("vertexJob"))
    attempt = (
        {"state": JobState.CANCELLED.value, "errorClass": FailureClass.CANCELLED.value}
        if running
        else {}
    )
    return finish(record, JobState.CANCELLED, now, "cancelled", attempt_fields=attempt)


def failed(record: dict[str, Any], now: datetime, reason: str) -> Change | None:
    """Settle a request FAILED for a reason outside Vertex's job state (a refused create)."""
    return finish(record, JobState.FAILED, now, reason)


def parked(
    record: dict[str, Any], now: datetime, attempt: int, delay_seconds: float, detail: str
) -> Change | None:
    """Park the submission of ``attempt`` after Vertex refused it for quota.

    Attempt 1 waits as QUEUED with no Vertex job; a retry stays RETRYING. Either way
    ``reason`` is ``quota`` and the tick submits it again once ``nextAttemptAt`` is due.
    """
    state = JobState(record.get("state", JobState.ACCEPTED.value))
    if state.terminal or record.get("cancelRequested"):
        return None
    fields: dict[str, Any] = {
        "reason": QUOTA_REASON,
        "quotaDetail": detail[:1024],
        "quotaRetries": int(record.get("quotaRetries") or 0) + 1,
        "nextAttemptAt": now + timedelta(seconds=delay_seconds),
        "updatedAt": now,
        "claim": None,
    }
    if state is not JobState.RETRYING:
        fields.update(state=JobState.QUEUED.value, attempt=attempt, vertexJob=None)
    return Change(state=JobState(fields.get("state", state.value)), record=fields)


#: At most this many Vertex jobs wait on one record for their cancel to be confirmed.
MAX_PENDING_CANCELS = 50


def cancels_pending(record: dict[str, Any], names: list[str], now: datetime) -> Change | None:
    """Remember Vertex jobs that must be cancelled, until Vertex confirms each.

    The list is kept on the record (bounded), so a cancel that fails is retried by the next
    tick; :func:`cancels_confirmed` drops the names Vertex confirmed.
    """
    pending = list(record.get("pendingCancels") or [])
    new = [n for n in dict.fromkeys(names) if n not in pending]
    # Never drop a cancel Vertex has not confirmed: past the bound, a name is not kept (its
    # cancel is still asked for now, and a stray is found again by the next tick's listing).
    new = new[: max(0, MAX_PENDING_CANCELS - len(pending))]
    if not new:
        return None
    pending += new
    state = JobState(record.get("state", JobState.ACCEPTED.value))
    fields = {"pendingCancels": pending, "cancelPending": True, "updatedAt": now}
    return Change(state=state, record=fields)


def cancels_confirmed(record: dict[str, Any], names: list[str], now: datetime) -> Change | None:
    """Forget the Vertex jobs whose cancel Vertex confirmed."""
    pending = list(record.get("pendingCancels") or [])
    left = [n for n in pending if n not in names]
    if left == pending:
        return None
    state = JobState(record.get("state", JobState.ACCEPTED.value))
    fields = {"pendingCancels": left, "cancelPending": bool(left), "updatedAt": now}
    return Change(state=state, record=fields)


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
