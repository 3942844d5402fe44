"""Settling observations (pure): accounting, failure classes, budgets, cancel and the outbox."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.domain.decisions.recovery import (
    cancel_requested,
    cancelled,
    failed,
    settle,
    work_lost_seconds,
    yield_requested,
)
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.states import JobState
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import Backoff, RetryPolicy
from tests.records_support import decoded

# The decisions read records decoded; these tests write them as stored documents.
cancel_requested = decoded(cancel_requested)
cancelled = decoded(cancelled)
failed = decoded(failed)
settle = decoded(settle)
yield_requested = decoded(yield_requested)

NAME = "projects/p/locations/us-central1/customJobs/1001"
CREATED = datetime(2026, 11, 30, 12, tzinfo=UTC)
STARTED = CREATED + timedelta(minutes=10)
ENDED = STARTED + timedelta(hours=1)
NOW = ENDED + timedelta(seconds=30)

PRICES = PriceTable.load(
    "accelerators: {NVIDIA_L4: {STANDARD: 1.00, SPOT: 0.40, FLEX_START: 0.50}}"
)
# rand 0.25: the first retry waits a quarter of the base window.
POLICY = RetryPolicy(backoff=Backoff(base_seconds=60, cap_seconds=1800, jitter=lambda: 0.25))

PREEMPTED = "The replica workerpool0-0 was preempted"
STOCKOUT = "ZONE_RESOURCE_POOL_EXHAUSTED: us-central1-a"
USER_ERROR = "The replica workerpool0-0 exited with a non-zero status of 1."


def record(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "requestId": "r-1",
        "kind": "customJob",
        "state": "RUNNING",
        "attempt": 1,
        "vertexJob": NAME,
        "vertexJobId": "1001",
        "strategy": "FLEX_START",
        "acceleratorType": "NVIDIA_L4",
        "gpus": 4,
        "options": "{}",
    }
    return {**base, **fields}


def job(state: str, message: str | None = None, code: int | None = None, **kw: Any) -> VertexJob:
    times = {"create_time": CREATED, "start_time": STARTED, "end_time": ENDED, **kw}
    return VertexJob(
        name=NAME,
        state=state,
        labels={"flexjobs-request": "r-1", "flexjobs-attempt": "1"},
        error_code=code,
        error_message=message,
        **times,
    )


def options(**raw: Any) -> str:
    return json.dumps(raw)


# --- success and accounting -------------------------------------------------------------


def test_success_accounts_queued_running_gpu_seconds_and_cost():
    change = settle(record(), job("JOB_STATE_SUCCEEDED"), NOW, RetryPolicy(), PRICES)

    assert change.state is JobState.SUCCEEDED
    # 1 h running on 4 GPUs under FLEX_START: 4 GPU-hours at 0.50 vs 1.00 on demand.
    cost = {"costUsd": 2.0, "onDemandUsd": 4.0, "savingsUsd": 2.0, "priced": True}
    assert change.attempt == {
        "state": "SUCCEEDED",
        "vertexState": "JOB_STATE_SUCCEEDED",
        "startedAt": STARTED,
        "endedAt": ENDED,
        "queuedSeconds": 600.0,
        "runningSeconds": 3600.0,
        "gpuSeconds": 14400.0,
        "cost": cost,
    }
    assert change.record["state"] == "SUCCEEDED"
    assert change.record["endedAt"] == ENDED
    assert change.record["updatedAt"] == NOW
    assert change.record["queuedSeconds"] == 600.0
    assert change.record["runningSeconds"] == 3600.0
    assert change.record["gpuSeconds"] == 14400.0
    assert change.record["cost"] == cost
    assert change.record["outbox"] == [
        {"requestId": "r-1", "state": "SUCCEEDED", "attempt": 1, "reason": None}
    ]
    assert change.record["outboxPending"] is True


def test_totals_add_this_attempt_to_the_earlier_ones():
    earlier = record(
        attempt=3,
        reason=f"preempted: retry 2 of 6: {PREEMPTED}",
        queuedSeconds=100.0,
        runningSeconds=200.0,
        gpuSeconds=800.0,
        cost={"costUsd": 1.25, "onDemandUsd": 2.5, "savingsUsd": 1.25, "priced": True},
    )
    change = settle(earlier, job("JOB_STATE_SUCCEEDED"), NOW, RetryPolicy(), PRICES)
    assert change.record["queuedSeconds"] == 700.0
    assert change.record["runningSeconds"] == 3800.0
    assert change.record["gpuSeconds"] == 15200.0
    assert change.record["cost"] == {
        "costUsd": 3.25,
        "onDemandUsd": 6.5,
        "savingsUsd": 3.25,
        "priced": True,
    }
    assert change.record["reason"] is None  # the earlier retry's reason no longer applies
    # The attempt's own figures are this attempt's only.
    assert change.attempt["gpuSeconds"] == 14400.0
    assert change.record["outbox"][0]["attempt"] == 3


def test_cost_follows_the_attempts_strategy():
    change = settle(record(strategy="SPOT"), job("JOB_STATE_SUCCEEDED"), NOW, RetryPolicy(), PRICES)
    assert change.attempt["cost"] == {
        "costUsd": 1.6,
        "onDemandUsd": 4.0,
        "savingsUsd": 2.4,
        "priced": True,
    }


def test_gpu_seconds_scale_with_the_records_gpus():
    change = settle(record(gpus=16), job("JOB_STATE_SUCCEEDED"), NOW, RetryPolicy())
    assert change.attempt["gpuSeconds"] == 16 * 3600.0


@pytest.mark.parametrize(
    ("prices", "fields"),
    [
        (None, {}),
        (PRICES, {"acceleratorType": None}),
        (PRICES, {"acceleratorType": "TPU_V5_LITEPOD"}),
    ],
)
def test_unpriced_attempts_are_flagged_not_guessed(prices, fields):
    change = settle(record(**fields), job("JOB_STATE_SUCCEEDED"), NOW, RetryPolicy(), prices)
    assert change.attempt["cost"]["priced"] is False
    assert change.record["cost"]["priced"] is False
    assert change.record["cost"]["costUsd"] == 0.0


def test_a_job_ended_without_times_is_accounted_up_to_now():
    seen = job("JOB_STATE_SUCCEEDED", start_time=None, end_time=None)
    change = settle(record(), seen, NOW, RetryPolicy())
    # Never started: the whole time since creation was spent queued, none running.
    assert change.attempt["queuedSeconds"] == (NOW - CREATED).total_seconds()
    assert change.attempt["runningSeconds"] == 0.0
    assert change.record["endedAt"] == NOW


def test_progress_that_ends_nothing_is_not_accounted_or_notified():
    change = settle(record(state="QUEUED"), job("JOB_STATE_RUNNING", end_time=None), NOW, POLICY)
    assert change.state is JobState.RUNNING
    assert "outbox" not in change.record
    assert "runningSeconds" not in change.record
    assert "endedAt" not in change.record


# --- failures that retry ----------------------------------------------------------------


def test_preemption_schedules_a_retry_with_backoff():
    change = settle(record(), job("JOB_STATE_FAILED", PREEMPTED, code=14), NOW, POLICY)

    assert change.state is JobState.RETRYING
    assert change.record["state"] == "RETRYING"
    assert change.record["retries"] == {"preemption": 1}
    assert change.record["nextAttemptAt"] == NOW + timedelta(seconds=15)  # 0.25 x 60 s
    assert change.record["capacityFailures"] == 0
    assert change.record["lastFailureClass"] == "preempted"
    assert change.record["reason"] == f"preempted: retry 1 of 6: {PREEMPTED}"
    # The request goes on, so it has not ended.
    assert "endedAt" not in change.record
    assert change.attempt["state"] == "FAILED"
    assert change.attempt["errorClass"] == "preempted"
    assert change.attempt["errorCode"] == 14
    assert change.attempt["endedAt"] == ENDED
    assert change.attempt["runningSeconds"] == 3600.0
    assert change.record["outbox"] == [
        {"requestId": "r-1", "state": "RETRYING", "attempt": 1, "reason": change.record["reason"]}
    ]


def admitted(limit: float | None) -> dict[str, Any]:
    return {
        "queue": "a",
        "priority": 0,
        "demand": [],
        "limitSeconds": limit,
        "stage": "ADMITTED",
        "waitingSince": CREATED,
        "admittedAt": CREATED,
        "heldBy": None,
    }


def test_a_retry_of_an_admission_with_a_limit_waits_in_its_queue_again_after_its_backoff():
    """Backfill counted on its GPUs' return within the limit, which a retry would outlive."""
    change = settle(
        record(admission=admitted(5400.0), nextAttemptAt=CREATED),
        job("JOB_STATE_FAILED", PREEMPTED, code=14),
        NOW,
        POLICY,
    )
    assert change.state is JobState.RETRYING
    admission = change.record["admission"]
    assert (admission["stage"], admission["admittedAt"]) == ("WAITING", None)
    assert admission["waitingSince"] == CREATED  # its arrival kept: first among its equals
    assert admission["notBefore"] == NOW + timedelta(seconds=15)  # the backoff, out of line
    # Nothing due: only its next admission makes the retry due (no tick lists it meanwhile).
    assert "nextAttemptAt" not in change.record and "nextAttemptAt" in change.deletes
    # One without a limit keeps its entry, and its retry is due after the backoff.
    kept = settle(
        record(admission=admitted(None)), job("JOB_STATE_FAILED", PREEMPTED, code=14), NOW, POLICY
    )
    assert "admission" not in kept.record
    assert kept.record["nextAttemptAt"] == NOW + timedelta(seconds=15)


def test_backoff_window_doubles_with_each_retry_of_the_group():
    seen = job("JOB_STATE_FAILED", PREEMPTED)
    change = settle(record(attempt=3, retries={"preemption": 2}), seen, NOW, POLICY)
    assert change.record["retries"] == {"preemption": 3}
    # Third retry: window min(1800, 60 x 2^2) = 240 s; rand 0.25 -> 60 s.
    assert change.record["nextAttemptAt"] == NOW + timedelta(seconds=60)


def test_backoff_is_capped():
    seen = job("JOB_STATE_FAILED", PREEMPTED)
    used = record(retries={"preemption": 20}, options=options(retryPolicy={"preemption": 30}))
    change = settle(
        used, seen, NOW, RetryPolicy(backoff=Backoff(cap_seconds=100, jitter=lambda: 1.0))
    )
    assert change.record["nextAttemptAt"] == NOW + timedelta(seconds=100)


def test_zero_backoff_makes_the_retry_due_now():
    change = settle(
        record(),
        job("JOB_STATE_FAILED", PREEMPTED),
        NOW,
        RetryPolicy(backoff=Backoff(base_seconds=0)),
    )
    assert change.record["nextAttemptAt"] == NOW


@pytest.mark.parametrize(
    ("seen", "failure"),
    [
        (job("JOB_STATE_FAILED", STOCKOUT, code=8), "stockout"),
        (job("JOB_STATE_EXPIRED", start_time=None), "max-wait-expired"),
    ],
)
def test_capacity_failures_charge_the_capacity_budget(seen, failure):
    change = settle(record(state="QUEUED"), seen, NOW, POLICY)
    assert change.state is JobState.RETRYING
    assert change.record["retries"] == {"capacity": 1}
    assert change.record["capacityFailures"] == 1
    assert change.record["lastFailureClass"] == failure
    assert change.attempt["errorClass"] == failure


def test_stockout_and_max_wait_share_one_capacity_budget():
    current = record(state="QUEUED", options=options(retryPolicy={"capacity": 2}))
    failures = [
        job("JOB_STATE_FAILED", STOCKOUT, code=8),
        job("JOB_STATE_EXPIRED", start_time=None),
        job("JOB_STATE_FAILED", STOCKOUT, code=8),
    ]
    states = []
    for n, seen in enumerate(failures, start=1):
        change = settle(current, seen, NOW, POLICY)
        states.append(change.state)
        current = {**current, **change.record, "state": "QUEUED", "attempt": n + 1}
    assert states == [JobState.RETRYING, JobState.RETRYING, JobState.FAILED]
    assert current["retries"] == {"capacity": 2}
    assert current["capacityFailures"] == 2
    assert current["reason"] == (
        f"stockout: capacity budget exhausted (2 of 2 retries used): {STOCKOUT}"
    )


def test_preemptions_do_not_use_up_the_capacity_budget():
    used = record(state="QUEUED", retries={"preemption": 6})
    change = settle(used, job("JOB_STATE_FAILED", STOCKOUT, code=8), NOW, POLICY)
    assert change.state is JobState.RETRYING
    assert change.record["retries"] == {"preemption": 6, "capacity": 1}


def test_infrastructure_failures_retry_on_their_own_budget():
    change = settle(record(), job("JOB_STATE_FAILED", "Internal error", code=13), NOW, POLICY)
    assert change.state is JobState.RETRYING
    assert change.record["retries"] == {"infrastructure": 1}
    assert change.record["capacityFailures"] == 0


# --- failures that end the request ------------------------------------------------------


def test_user_error_fails_at_once_with_its_reason():
    change = settle(record(), job("JOB_STATE_FAILED", USER_ERROR, code=3), NOW, POLICY)
    assert change.state is JobState.FAILED
    reason = f"user-error: not retried (user budget is 0): {USER_ERROR}"
    assert change.record["reason"] == reason
    assert change.record["endedAt"] == ENDED
    assert "nextAttemptAt" not in change.record and "nextAttemptAt" in change.deletes
    assert "retries" not in change.record
    assert change.attempt["errorClass"] == "user-error"
    assert change.record["outbox"] == [
        {"requestId": "r-1", "state": "FAILED", "attempt": 1, "reason": reason}
    ]


def test_unknown_failure_is_never_retried():
    change = settle(record(), job("JOB_STATE_FAILED", "bad flag --lr", code=3), NOW, POLICY)
    assert change.state is JobState.FAILED
    assert change.record["reason"].startswith("unknown failure: never retried")
    assert change.attempt["errorClass"] == "unknown"


def test_seventh_preemption_exhausts_a_budget_of_six():
    current = record(options=options(retryPolicy={"preemption": 6}))
    outcomes = []
    for _ in range(7):
        change = settle(current, job("JOB_STATE_FAILED", PREEMPTED), NOW, POLICY)
        outcomes.append(change.state)
        (message,) = change.record["outbox"][len(current.get("outbox") or []) :]
        assert message["attempt"] == current["attempt"]
        assert message["state"] == change.state.value
        current = {**current, **change.record}
        if change.state is JobState.RETRYING:
            current.update(state="RUNNING", attempt=current["attempt"] + 1)

    assert outcomes == [JobState.RETRYING] * 6 + [JobState.FAILED]
    assert current["attempt"] == 7
    assert current["state"] == "FAILED"
    assert current["retries"] == {"preemption": 6}
    assert current["reason"] == (
        f"preempted: preemption budget exhausted (6 of 6 retries used): {PREEMPTED}"
    )
    assert [m["state"] for m in current["outbox"]] == ["RETRYING"] * 6 + ["FAILED"]
    assert [m["attempt"] for m in current["outbox"]] == [1, 2, 3, 4, 5, 6, 7]
    assert current["gpuSeconds"] == 7 * 4 * 3600.0


def test_exhausted_budget_fails_directly():
    used = record(
        attempt=7, retries={"preemption": 6}, options=options(retryPolicy={"preemption": 6})
    )
    change = settle(used, job("JOB_STATE_FAILED", PREEMPTED), NOW, POLICY)
    assert change.state is JobState.FAILED
    assert "preemption budget exhausted (6 of 6" in change.record["reason"]
    assert "retries" not in change.record  # the spent budget stays as it was
    assert change.record["outbox"] == [
        {"requestId": "r-1", "state": "FAILED", "attempt": 7, "reason": change.record["reason"]}
    ]


# --- cancel -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seen",
    [
        job("JOB_STATE_FAILED", PREEMPTED),  # preempted while the cancel was on its way
        job("JOB_STATE_CANCELLED"),
    ],
)
def test_a_requested_cancel_ends_cancelled_and_never_retries(seen):
    change = settle(record(cancelRequested=True), seen, NOW, POLICY)
    assert change.state is JobState.CANCELLED
    assert change.record["state"] == "CANCELLED"
    assert change.record["reason"] == "cancelled"
    assert "nextAttemptAt" not in change.record and "nextAttemptAt" in change.deletes
    assert "retries" not in change.record
    assert change.attempt["errorClass"] == "cancelled"
    assert change.record["outbox"] == [
        {"requestId": "r-1", "state": "CANCELLED", "attempt": 1, "reason": "cancelled"}
    ]


def test_a_job_cancelled_outside_flexjobs_is_cancelled_too():
    change = settle(record(), job("JOB_STATE_CANCELLED"), NOW, POLICY)
    assert change.state is JobState.CANCELLED
    assert change.attempt["errorClass"] == "cancelled"


def test_a_success_racing_a_cancel_stays_a_success():
    change = settle(record(cancelRequested=True), job("JOB_STATE_SUCCEEDED"), NOW, POLICY)
    assert change.state is JobState.SUCCEEDED


# --- what is ignored --------------------------------------------------------------------


@pytest.mark.parametrize(
    "seen",
    [
        job("JOB_STATE_SUCCEEDED"),
        job("JOB_STATE_FAILED", PREEMPTED),
        job("JOB_STATE_RUNNING", end_time=None),
        job("JOB_STATE_CANCELLED"),
    ],
)
def test_a_retrying_record_ignores_further_observations_of_its_ended_job(seen):
    retrying = record(state="RETRYING", retries={"preemption": 1}, nextAttemptAt=NOW)
    assert settle(retrying, seen, NOW, POLICY) is None


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_a_terminal_record_ignores_everything(state):
    assert settle(record(state=state), job("JOB_STATE_FAILED", PREEMPTED), NOW, POLICY) is None


def test_a_replayed_failure_notifies_once():
    first = settle(record(), job("JOB_STATE_FAILED", USER_ERROR), NOW, POLICY)
    after = {**record(), **first.record}
    assert settle(after, job("JOB_STATE_FAILED", USER_ERROR), NOW, POLICY) is None
    assert len(after["outbox"]) == 1


def test_an_earlier_attempts_job_is_ignored():
    current = record(vertexJob=NAME.replace("1001", "1002"), attempt=2)
    assert settle(current, job("JOB_STATE_FAILED", PREEMPTED), NOW, POLICY) is None


def test_pending_notifications_are_kept_and_one_is_added():
    waiting = {"requestId": "r-1", "state": "RETRYING", "attempt": 1, "reason": "x"}
    change = settle(record(attempt=2, outbox=[waiting]), job("JOB_STATE_SUCCEEDED"), NOW, POLICY)
    assert change.record["outbox"] == [
        waiting,
        {"requestId": "r-1", "state": "SUCCEEDED", "attempt": 2, "reason": None},
    ]


# --- cancel_requested, cancelled, failed ------------------------------------------------


@pytest.mark.parametrize("state", ["ACCEPTED", "QUEUED", "RUNNING", "RETRYING"])
def test_cancel_requested_marks_a_live_record_and_keeps_its_state(state):
    change = cancel_requested(record(state=state), NOW)
    assert change.state == state
    assert change.record == {"cancelRequested": True, "updatedAt": NOW}
    assert change.attempt == {}


@pytest.mark.parametrize(
    "current", [record(state="SUCCEEDED"), record(state="CANCELLED"), record(cancelRequested=True)]
)
def test_cancel_requested_once_and_never_after_the_end(current):
    assert cancel_requested(current, NOW) is None


@pytest.mark.parametrize(
    ("state", "attempt_fields"),
    [
        ("QUEUED", {"state": "CANCELLED", "errorClass": "cancelled"}),
        ("RUNNING", {"state": "CANCELLED", "errorClass": "cancelled"}),
        # The attempt already ended (preempted, say): it keeps how it ended.
        ("RETRYING", {}),
    ],
)
def test_cancelled_ends_the_request_with_one_notification(state, attempt_fields):
    change = cancelled(record(state=state, attempt=2), NOW)
    assert change.state is JobState.CANCELLED
    assert change.record["state"] == "CANCELLED"
    assert change.record["reason"] == "cancelled"
    assert change.record["endedAt"] == NOW
    assert change.attempt == attempt_fields
    assert change.record["outbox"] == [
        {"requestId": "r-1", "state": "CANCELLED", "attempt": 2, "reason": "cancelled"}
    ]


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_cancelled_and_failed_leave_an_ended_request_alone(state):
    assert cancelled(record(state=state), NOW) is None
    assert failed(record(state=state), NOW, "refused") is None


def test_failed_records_the_reason_and_notifies():
    change = failed(record(state="RETRYING", attempt=3), NOW, "attempt 4 refused by Vertex AI: x")
    assert change.state is JobState.FAILED
    assert change.record["reason"] == "attempt 4 refused by Vertex AI: x"
    assert change.record["endedAt"] == NOW
    assert change.attempt == {}
    assert change.record["outbox"] == [
        {
            "requestId": "r-1",
            "state": "FAILED",
            "attempt": 3,
            "reason": "attempt 4 refused by Vertex AI: x",
        }
    ]


# --- work_lost_seconds ------------------------------------------------------------------

ATTEMPT = {"runningSeconds": 3600.0, "endedAt": ENDED}
RESUMED = "gs://b/ck/step-00000100/"


def checkpoint(uri: str, at: datetime) -> Checkpoint:
    return Checkpoint(uri, 0, at)


@pytest.mark.parametrize(
    ("attempt", "latest", "resumed_from", "lost"),
    [
        # No checkpoint at all, or none newer than the one it began from: all of it is lost.
        (ATTEMPT, None, None, 3600.0),
        (ATTEMPT, checkpoint(RESUMED, ENDED - timedelta(seconds=10)), RESUMED, 3600.0),
        # A newer checkpoint saved everything before it.
        (ATTEMPT, checkpoint("gs://b/ck/step-2/", ENDED - timedelta(seconds=300)), None, 300.0),
        (ATTEMPT, checkpoint("gs://b/ck/step-2/", ENDED - timedelta(seconds=300)), RESUMED, 300.0),
        # Never more than the attempt ran, never less than nothing.
        (ATTEMPT, checkpoint("gs://b/ck/step-2/", ENDED - timedelta(hours=5)), None, 3600.0),
        (ATTEMPT, checkpoint("gs://b/ck/step-2/", ENDED + timedelta(seconds=5)), None, 0.0),
        # Unknown end: nothing to measure from.
        ({"runningSeconds": 60.0}, checkpoint("gs://b/ck/step-2/", ENDED), None, 60.0),
        ({}, None, None, 0.0),
    ],
)
def test_work_lost_seconds(attempt, latest, resumed_from, lost):
    assert work_lost_seconds(attempt, latest, resumed_from) == lost


# --- attempts ended by choice (AUTO) ------------------------------------------------------

YIELDING = {"attempt": 1, "vertexJob": NAME, "why": "gave-up", "reason": "no SPOT capacity"}


def test_a_yield_marks_the_attempt_and_keeps_its_job_pending_cancel_in_one_write():
    change = yield_requested(record(state="QUEUED"), NAME, "gave-up", "no SPOT capacity", NOW)
    assert change.state is JobState.QUEUED  # the state is Vertex's to move
    assert change.record["yielding"] == {**YIELDING, "at": NOW}
    assert change.record["pendingCancels"] == [NAME] and change.record["cancelPending"]


@pytest.mark.parametrize(
    "fields",
    [
        {"state": "RETRYING"},  # the attempt ended already
        {"state": "SUCCEEDED"},
        {"cancelRequested": True},  # a user's cancel comes first
        {"vertexJob": "projects/p/locations/us-central1/customJobs/2002"},  # moved on
        {"yielding": YIELDING},  # asked already (a second tick)
    ],
)
def test_there_is_nothing_to_yield(fields):
    assert yield_requested(record(**fields), NAME, "gave-up", "why", NOW) is None


def test_a_yielded_jobs_cancelled_end_is_a_switch_due_now_with_no_budget_charged():
    before = record(state="QUEUED", yielding=YIELDING, retries={"preemption": 2})
    change = settle(before, job("JOB_STATE_CANCELLED", start_time=None), NOW, POLICY)
    assert change.state is JobState.RETRYING
    assert change.record["nextAttemptAt"] == NOW  # the policy chooses again at once
    assert change.record["reason"] == "no SPOT capacity"
    assert "retries" not in change.record and "lastFailureClass" not in change.record
    assert "yielding" in change.deletes and "endedAt" not in change.record
    assert change.attempt["endedBy"] == "gave-up" and "errorClass" not in change.attempt
    assert change.attempt["queuedSeconds"] > 0  # still accounted
    assert change.record["outbox"][-1]["state"] == "RETRYING"


def test_a_users_cancel_wins_over_a_yield():
    before = record(yielding=YIELDING, cancelRequested=True)
    change = settle(before, job("JOB_STATE_CANCELLED"), NOW, POLICY)
    assert change.state is JobState.CANCELLED and "yielding" in change.deletes


@pytest.mark.parametrize(
    ("seen", "state"),
    [
        (job("JOB_STATE_SUCCEEDED"), JobState.SUCCEEDED),  # it finished before the cancel
        (job("JOB_STATE_FAILED", PREEMPTED, 14), JobState.RETRYING),  # preempted first
    ],
)
def test_a_yielded_job_that_ended_otherwise_ends_as_it_did(seen, state):
    change = settle(record(yielding=YIELDING), seen, NOW, POLICY)
    assert change.state is state and "yielding" in change.deletes
    assert "endedBy" not in change.attempt


def test_another_jobs_cancel_is_not_a_switch():
    other = {**YIELDING, "vertexJob": "projects/p/locations/us-central1/customJobs/2002"}
    change = settle(record(yielding=other), job("JOB_STATE_CANCELLED"), NOW, POLICY)
    assert change.state is JobState.CANCELLED


@pytest.mark.parametrize(
    ("why", "state"),
    [("gave-up", "RUNNING"), ("switch", "QUEUED"), ("gave-up", "ACCEPTED"), ("other", "QUEUED")],
)
def test_a_yield_needs_the_state_it_ends(why, state):
    # A give-up decided on a listing that showed the job queued, written after a hint recorded
    # it running: the fresh read refuses it.
    assert yield_requested(record(state=state), NAME, why, "why", NOW) is None


def test_a_yield_that_cannot_keep_its_cancel_pending_is_refused():
    full = [f"projects/p/locations/us-central1/customJobs/{n}" for n in range(50)]
    assert (
        yield_requested(record(state="QUEUED", pendingCancels=full), NAME, "gave-up", "w", NOW)
        is None
    )
    kept = record(state="QUEUED", pendingCancels=[*full[:49], NAME])  # pending already: fine
    assert yield_requested(kept, NAME, "gave-up", "w", NOW) is not None


def test_each_switch_is_counted():
    before = record(state="QUEUED", yielding=YIELDING, switches=3)
    change = settle(before, job("JOB_STATE_CANCELLED", start_time=None), NOW, POLICY)
    assert change.record["switches"] == 4
