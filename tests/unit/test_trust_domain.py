"""Pure rules behind the trust guarantees: terminal states, strays, parked and due attempts,
tombstones and pending cancels."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.decisions.recovery import (
    MAX_PENDING_CANCELS,
    cancelled,
    cancels_confirmed,
    cancels_pending,
    failed,
    finish,
    parked,
)
from shared.domain.decisions.submissions import (
    TOMBSTONE_REASON,
    TOMBSTONE_TTL,
    is_stray,
    job_settled,
    pending_attempt,
    submission_claimable,
    tombstone,
    tombstone_claimed,
)
from shared.domain.model.records import DeploymentRecord, JobRecord
from shared.domain.model.states import JobState
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.request.message import parse_request
from tests.events import load
from tests.records_support import decoded

# The decisions read records decoded; these tests write them as stored documents.
is_stray = decoded(is_stray)
pending_attempt = decoded(pending_attempt)
submission_claimable = decoded(submission_claimable)
tombstone_claimed = decoded(tombstone_claimed)
cancelled = decoded(cancelled)
cancels_confirmed = decoded(cancels_confirmed)
cancels_pending = decoded(cancels_pending)
failed = decoded(failed)
parked = decoded(parked)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/"


def record(**fields):
    return {"requestId": "r", "state": "QUEUED", "attempt": 1, "vertexJob": JOB + "1", **fields}


def job(number: int, attempt: int, state: str = "JOB_STATE_RUNNING") -> VertexJob:
    labels = {"flexjobs-request": "r", "flexjobs-attempt": str(attempt)}
    return VertexJob(JOB + str(number), state, labels)


# --- one terminal function ------------------------------------------------------------------


@pytest.mark.parametrize("ended", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_a_terminal_state_is_never_overwritten(ended):
    current = record(state=ended)
    assert failed(current, NOW, "refused late") is None
    assert cancelled(current, NOW) is None
    assert decoded(finish)(current, JobState.FAILED, NOW, "x") is None


def test_failed_writes_its_notification_with_the_state_change():
    change = failed(record(state="ACCEPTED", vertexJob=None), NOW, "attempt 1 refused")
    assert change is not None
    assert change.record["state"] == "FAILED"
    assert change.record["endedAt"] == NOW
    assert change.deletes == ("claim", "nextAttemptAt")
    assert change.record["outbox"] == [
        {"requestId": "r", "state": "FAILED", "attempt": 1, "reason": "attempt 1 refused"}
    ]
    assert change.record["outboxPending"] is True


def test_finish_takes_only_terminal_states():
    with pytest.raises(ValueError):
        finish(record(), JobState.RUNNING, NOW, "no")


# --- strays -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "listed", "stray"),
    [
        (record(), job(1, 1), False),  # the recorded job itself
        (record(), job(2, 1), True),  # a second job for a settled attempt
        (record(attempt=2, vertexJob=JOB + "3"), job(2, 1), True),  # an attempt moved past
        (record(state="ACCEPTED", vertexJob=None), job(2, 1), False),  # being recorded now
        (record(state="RETRYING"), job(5, 2), False),  # the retry in flight
        (record(state="CANCELLED"), job(5, 2), True),  # the request is over
        (record(), job(2, 1, "JOB_STATE_FAILED"), False),  # ended already
        (record(), VertexJob(JOB + "9", "JOB_STATE_RUNNING", {"flexjobs-attempt": "x"}), False),
    ],
)
def test_which_listed_jobs_are_strays(current, listed, stray):
    assert is_stray(current, listed) is stray


LIVE = {"token": "b" * 32, "expiresAt": NOW + timedelta(seconds=60), "attempt": 2}


def made_by(number: int, attempt: int, token: str) -> VertexJob:
    listed = job(number, attempt)
    return dataclasses.replace(listed, labels={**listed.labels, "flexjobs-claim": token})


@pytest.mark.parametrize(
    ("claim", "listed", "others", "stray"),
    [
        # The live claim made its own job: one an expired claim's create left is a stray.
        (LIVE, made_by(5, 2, "a" * 32), [made_by(6, 2, "b" * 32)], True),
        (LIVE, made_by(6, 2, "b" * 32), [made_by(5, 2, "a" * 32)], False),  # the holder's own
        (LIVE, made_by(5, 2, "a" * 32), [], False),  # the holder may be adopting it
        (LIVE, job(5, 2), [made_by(6, 2, "b" * 32)], True),  # made before claims were labelled
        ({**LIVE, "expiresAt": NOW}, made_by(5, 2, "a" * 32), [made_by(6, 2, "b" * 32)], False),
        ({**LIVE, "attempt": 3}, made_by(5, 2, "a" * 32), [made_by(6, 2, "b" * 32)], False),
        (LIVE, made_by(5, 2, "a" * 32), [made_by(6, 3, "b" * 32)], False),  # another attempt
    ],
)
def test_a_job_the_live_claim_superseded_is_a_stray(claim, listed, others, stray):
    current = record(state="RETRYING", vertexJob=JOB + "1", claim=claim)
    assert is_stray(current, listed, NOW, [listed, *others]) is stray
    assert is_stray(current, listed) is False  # without the listing: left to the claim


# --- parked and due submissions -------------------------------------------------------------


def test_the_pending_attempt_of_each_state():
    assert pending_attempt(record(state="RETRYING", attempt=2)) == 3
    assert pending_attempt(record(state="QUEUED", vertexJob=None, reason="quota")) == 1
    assert pending_attempt(record()) is None
    assert pending_attempt(record(state="CANCELLED")) is None


def test_a_submission_is_claimable_only_when_due_unheld_and_not_cancelled():
    due = record(state="RETRYING", nextAttemptAt=NOW)
    assert submission_claimable(due, 2, NOW)
    assert not submission_claimable(due, 3, NOW)  # not the attempt waiting
    assert not submission_claimable({**due, "nextAttemptAt": NOW + timedelta(1)}, 2, NOW)
    held = {"token": "t", "expiresAt": NOW + timedelta(seconds=5)}
    assert not submission_claimable({**due, "claim": held}, 2, NOW)
    assert not submission_claimable({**due, "cancelRequested": True}, 2, NOW)


def test_parking_attempt_one_makes_it_queued_without_a_job():
    change = parked(record(state="ACCEPTED", vertexJob=None), NOW, 1, 30, "429 quota")
    assert change is not None and change.state is JobState.QUEUED
    assert change.record["reason"] == "quota"
    assert change.record["nextAttemptAt"] == NOW + timedelta(seconds=30)
    assert change.record["quotaRetries"] == 1
    retry = parked(record(state="RETRYING"), NOW, 2, 30, "429 quota")
    assert retry is not None and retry.state is JobState.RETRYING
    assert "attempt" not in retry.record
    assert parked(record(cancelRequested=True), NOW, 1, 30, "429") is None


# --- tombstones ---------------------------------------------------------------------------


def test_a_tombstone_is_cancelled_notified_and_expires():
    stone = tombstone("early", NOW)
    assert (stone["state"], stone["reason"]) == ("CANCELLED", TOMBSTONE_REASON)
    assert stone["expireAt"] == NOW + TOMBSTONE_TTL >= NOW + timedelta(days=1)
    assert [m["state"] for m in stone["outbox"]] == ["CANCELLED"]


def test_a_claimed_tombstone_keeps_its_state_and_loses_its_ttl():
    request = parse_request({**load("seed_request"), "requestId": "early"}, {}, "m")
    change = tombstone_claimed(tombstone("early", NOW), request, "us-central1", NOW)
    assert change is not None and change.state is JobState.CANCELLED
    fields = change.record
    assert "state" not in fields and fields["expireAt"] is None
    assert fields["kind"] == "customJob"
    assert tombstone_claimed({**record(), "kind": "customJob"}, request, "x", NOW) is None


# --- pending cancels ----------------------------------------------------------------------


def test_pending_cancels_are_kept_bounded_and_dropped_once_confirmed():
    change = cancels_pending(record(), [JOB + "1", JOB + "1", JOB + "2"], NOW)
    assert change is not None
    assert change.record["pendingCancels"] == [JOB + "1", JOB + "2"]
    kept = {**record(), **change.record}
    assert cancels_pending(kept, [JOB + "2"], NOW) is None
    done = cancels_confirmed(kept, [JOB + "1"], NOW)
    assert done is not None and done.record["pendingCancels"] == [JOB + "2"]
    many = cancels_pending(record(), [JOB + str(n) for n in range(200)], NOW)
    assert many is not None and len(many.record["pendingCancels"]) == MAX_PENDING_CANCELS
    full = {**record(), **many.record}
    # A full list never forgets an unconfirmed cancel to make room for a new one.
    assert cancels_pending(full, [JOB + "new"], NOW) is None


# --- decoding never fails, and an unknown state moves nothing ---------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"retries": {"capacity": None}},
        {"attempt": "one"},
        {"outbox": ["x"]},
        {"gpus": "eight"},
        {"cost": "n/a"},
        {"vertexJobIds": 5},
        {"request": "{not json"},
        {"maxWaitSeconds": "soon"},
    ],
)
def test_a_hand_edited_record_decodes_with_defaults(fields):
    decoded_record = JobRecord.decode(record(**fields))
    assert decoded_record.request_id == "r"
    assert isinstance(decoded_record.request, dict)


@pytest.mark.parametrize("state", [None, "PAUSED", 7])
def test_a_record_of_unknown_state_is_a_duplicate_and_moves_nothing(state):
    unknown = JobRecord.decode({**record(vertexJob=None), "state": state})
    assert unknown.state_known is False
    assert job_settled(unknown)
    assert pending_attempt(unknown) is None
    assert failed(unknown, NOW, "late") is None


def test_a_deployment_with_a_bad_body_still_decodes():
    deployment = DeploymentRecord.decode({"requestId": "d", "state": "DEPLOYING", "request": "{"})
    assert deployment.request == {} and deployment.state.value == "DEPLOYING"
