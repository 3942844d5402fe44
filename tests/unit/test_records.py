"""The record rules both stores apply (pure): new records, claims seen, submission writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.domain.decisions.submissions import (
    ClaimSeen,
    Submission,
    existing_claim,
    job_settled,
    new_record,
    submission_change,
)
from shared.domain.model.records import Claim
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.request.message import parse_request
from tests.events import load
from tests.records_support import decoded

# The decisions read records decoded; these tests write them as stored documents.
job_settled = decoded(job_settled)
submission_change = decoded(submission_change)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
LEASE = {"token": "t-1", "expiresAt": NOW + timedelta(seconds=120)}
JOB_1 = "projects/p/locations/us-central1/customJobs/1001"
JOB_2 = "projects/p/locations/europe-west4/customJobs/2002"


def request_of(event: str, **fields: Any):
    body = load(event)
    body.update(fields)
    return parse_request(body, {}, "message-1")


# --- new_record -------------------------------------------------------------------------


def test_new_record_of_the_seed_request():
    request = request_of("seed_request")
    record = new_record(request, "us-central1", NOW)
    assert record == {
        "requestId": "seed-1",
        "kind": "customJob",
        "state": "ACCEPTED",
        "attempt": 1,
        "vertexJob": None,
        "strategy": "FLEX_START",
        "location": "us-central1",
        "baseLocation": "us-central1",
        "displayName": "MyDwsJob",
        "maxWaitSeconds": 1800.0,
        "acceleratorType": "NVIDIA_TESLA_A100",
        "gpus": 1,
        "runId": "seed-1",
        "request": record["request"],
        "options": "{}",
        "createdAt": NOW,
        "updatedAt": NOW,
    }
    # The body exactly as it will be resubmitted (defaults applied), as JSON text.
    assert json.loads(record["request"]) == request.spec


def test_new_record_keeps_the_requested_location_and_options():
    options = {"retryPolicy": {"preemption": 2}, "checkpointUri": "gs://b/ck/"}
    request = request_of("seed_request", location="europe-west4", **options)
    record = new_record(request, "us-central1", NOW)
    assert record["location"] == record["baseLocation"] == "europe-west4"
    assert json.loads(record["options"]) == options


def test_new_record_of_a_tuning_job_counts_every_parallel_trial():
    record = new_record(request_of("hpt_request"), "us-central1", NOW)
    assert (record["kind"], record["acceleratorType"], record["gpus"]) == (
        "hyperparameterTuningJob",
        "NVIDIA_L4",
        2,
    )
    assert record["maxWaitSeconds"] == 3600.0


def test_new_record_waits_indefinitely_for_zero_max_wait():
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"]["maxWaitDuration"] = "0s"
    record = new_record(parse_request(body, {}, "m"), "us-central1", NOW)
    assert record["maxWaitSeconds"] is None


def test_run_id_is_the_label_value_of_an_unlabellable_request_id():
    request = request_of("seed_request", requestId="Team/Run #7")
    record = new_record(request, "us-central1", NOW)
    assert record["requestId"] == "Team/Run #7"
    assert record["runId"] != "Team/Run #7"
    assert len(record["runId"]) <= 63
    assert set(record["runId"]) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-")


# --- existing_claim ---------------------------------------------------------------------


def accepted(**fields: Any) -> dict[str, Any]:
    return {"requestId": "r", "state": "ACCEPTED", "attempt": 1, "vertexJob": None, **fields}


@pytest.mark.parametrize(
    ("current", "settled"),
    [
        (accepted(vertexJob=JOB_1, state="QUEUED"), True),
        # Once a job is recorded, a claim left on the record no longer matters.
        (accepted(vertexJob=JOB_1, claim=LEASE), True),
        # Refused for good before any job existed: a duplicate, not a new submission.
        (accepted(state="FAILED", reason="refused"), True),
        (accepted(state="CANCELLED"), True),
        (accepted(claim=LEASE), False),
        (accepted(), False),
    ],
)
def test_job_settled(current, settled):
    assert job_settled(current) is settled


@pytest.mark.parametrize(
    ("claim", "seen"),
    [
        ({"token": "t", "expiresAt": NOW + timedelta(seconds=1)}, ClaimSeen.HELD),
        ({"token": "t", "expiresAt": NOW}, ClaimSeen.EXPIRED),
        ({"token": "t", "expiresAt": NOW - timedelta(seconds=1)}, ClaimSeen.EXPIRED),
        # Released by a delivery that failed: the next one proceeds at once.
        (None, ClaimSeen.EXPIRED),
        ({}, ClaimSeen.EXPIRED),
    ],
)
def test_existing_claim_of_an_unsettled_record(claim, seen):
    current = accepted() if claim is None else accepted(claim=claim)
    assert existing_claim(Claim.of(current.get("claim")), NOW, settled=False) is seen


def test_a_settled_record_is_a_duplicate_whatever_its_claim():
    assert existing_claim(Claim.of(LEASE), NOW, settled=True) is ClaimSeen.SUBMITTED


# --- submission_change -------------------------------------------------------------------


def submission(attempt: int = 1, name: str = JOB_1, state: str = "JOB_STATE_QUEUED", **kw: Any):
    job = VertexJob(name=name, state=state, labels={"flexjobs-attempt": str(attempt)})
    fields = {"strategy": "FLEX_START", "location": name.split("/")[3], **kw}
    return Submission(request_id="r", attempt=attempt, vertex_job=job, **fields)


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_an_ended_record_is_not_recorded(state):
    write = submission_change(accepted(state=state), submission(), NOW)
    assert write.recorded is False
    assert (write.record, write.attempt, write.deletes) == ({}, {}, ())


@pytest.mark.parametrize(
    "current",
    [
        accepted(state="QUEUED", vertexJob=JOB_1, vertexJobIds=["1001"]),
        # A later attempt is already recorded, and this job was attempt 1's: long done.
        accepted(state="RUNNING", attempt=3, vertexJob=JOB_2, vertexJobIds=["1001", "2", "2002"]),
    ],
)
def test_an_attempt_already_recorded_writes_nothing(current):
    write = submission_change(current, submission(attempt=1), NOW)
    assert write.recorded is True
    assert (write.record, write.attempt, write.deletes) == ({}, {}, ())


@pytest.mark.parametrize(
    "current",
    [
        # Another job holds attempt 1 already (two creates raced, one after a timeout).
        accepted(state="QUEUED", vertexJob=JOB_2, vertexJobIds=["2002"]),
        # The request moved past attempt 1 with other jobs: this one is nobody's.
        accepted(state="RUNNING", attempt=3, vertexJob=JOB_2, vertexJobIds=["1", "2", "2002"]),
        # Cancel asked for while the job was being created.
        accepted(cancelRequested=True),
    ],
)
def test_a_job_the_record_will_not_take_is_refused_so_its_creator_cancels_it(current):
    write = submission_change(current, submission(attempt=1), NOW)
    assert write.recorded is False
    assert (write.record, write.attempt, write.deletes) == ({}, {}, ())


def test_first_attempt_is_recorded_and_the_claim_dropped():
    write = submission_change(accepted(claim=LEASE), submission(), NOW)
    assert write.recorded is True
    assert write.record == {
        "state": "QUEUED",
        "attempt": 1,
        "vertexJob": JOB_1,
        "vertexJobId": "1001",
        "vertexState": "JOB_STATE_QUEUED",
        "vertexJobIds": ["1001"],
        "strategy": "FLEX_START",
        "location": "us-central1",
        "locationsUsed": ["us-central1"],
        "updatedAt": NOW,
        "attemptSubmittedAt": NOW,
        "attemptStartedAt": None,
        "vertexCreateTime": NOW,
    }
    assert write.attempt == {
        "attempt": 1,
        "vertexJob": JOB_1,
        "state": "QUEUED",
        "strategy": "FLEX_START",
        "location": "us-central1",
        "submittedAt": NOW,
        "resumedFrom": None,
    }
    # The new job's reads start afresh: the leases were the previous job's.
    assert write.deletes == (
        "claim",
        "nextAttemptAt",
        "lastReadAt",
        "previousReadAt",
        "hintPending",
    )


def test_next_attempt_accumulates_job_ids_and_carries_its_extras():
    retrying = accepted(
        state="RETRYING",
        attempt=1,
        vertexJob=JOB_1,
        vertexJobId="1001",
        vertexJobIds=["1001"],
        nextAttemptAt=NOW,
        claim=LEASE,
    )
    sub = submission(
        attempt=2,
        name=JOB_2,
        strategy="STANDARD",
        resumed_from="gs://b/ck/step-2/",
        record_extra={"workLostSeconds": 12.5},
    )
    write = submission_change(retrying, sub, NOW)
    assert write.recorded is True
    assert write.record["state"] == "QUEUED"
    assert write.record["attempt"] == 2
    assert write.record["vertexJob"] == JOB_2
    assert write.record["vertexJobId"] == "2002"
    assert write.record["vertexJobIds"] == ["1001", "2002"]
    assert write.record["strategy"] == "STANDARD"
    assert write.record["location"] == "europe-west4"
    assert write.record["workLostSeconds"] == 12.5
    assert write.attempt["resumedFrom"] == "gs://b/ck/step-2/"
    assert write.attempt["attempt"] == 2
    # The new job's reads start afresh: the leases were the previous job's.
    assert write.deletes == (
        "claim",
        "nextAttemptAt",
        "lastReadAt",
        "previousReadAt",
        "hintPending",
    )
    assert retrying["vertexJobIds"] == ["1001"]  # the current record is not mutated


@pytest.mark.parametrize(
    ("vertex_state", "state"),
    [
        ("JOB_STATE_RUNNING", "RUNNING"),  # adopted after it started
        ("JOB_STATE_PENDING", "QUEUED"),
        ("PIPELINE_STATE_QUEUED", "QUEUED"),
        ("JOB_STATE_UNSPECIFIED", "QUEUED"),
    ],
)
def test_recorded_state_is_the_jobs_own(vertex_state, state):
    write = submission_change(accepted(), submission(state=vertex_state), NOW)
    assert write.record["state"] == write.attempt["state"] == state
