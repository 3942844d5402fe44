"""handle_job_event and handle_scheduler_tick driven through functions-framework, on fakes.

Every scenario starts from a real submission (handle_job_request), moves the fake Vertex job
on the way Vertex would, and then delivers a state hint or a scheduler tick as a real
CloudEvent. The clock only moves when a test moves it.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import timedelta
from typing import Any

import pytest

from shared.app import handlers
from shared.app.commands import Reconcile
from shared.domain.decisions.recovery import cancel_requested
from shared.domain.model.states import JobState, from_vertex
from shared.kernel.errors import BackendRejected, BackendUnavailable, PublishFailed
from tests.events import load, published_at, pubsub_cloud_event
from tests.fakes import key_labels

SEED = "seed-1"
OUTPUT = "gs://flexjobs-test/seed-1"
CHECKPOINTS = f"{OUTPUT}/checkpoints/"
PREEMPTED = "The replica workerpool0-0 was preempted"
USER_ERROR = "The replica workerpool0-0 exited with a non-zero status of 1."
# Hints arrive this long after the previous step, past the coalescing window (10 s).
STEP_SECONDS = 60.0

JOB_HINT = "ml_job_log_entry"

_message_ids = itertools.count(1)


def submit(post_event) -> None:
    """Submit the seed request, writing its checkpoints under its output directory."""
    body = load("seed_request")
    body["customJob"]["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": OUTPUT}
    response = post_event("handle_job_request", pubsub_cloud_event(body))
    assert response.status_code == 200


def job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def hint_body(shape: str, name: str) -> dict[str, Any]:
    """One of the sample hint events, retargeted at the Vertex job ``name``."""
    body = load(shape)
    if shape == "ml_job_log_entry":
        body["resource"]["labels"]["job_id"] = job_id(name)
    elif shape == "audit_log_entry":
        body["protoPayload"]["resourceName"] = name
    else:
        body["jobName"] = name
    return body


def deliver_hint(post_event, clock, data: dict[str, Any] | bytes, *, late: float = 0.5):
    """Publish a hint now and deliver it ``late`` seconds later; returns the response."""
    event = pubsub_cloud_event(data, message_id=f"hint-{next(_message_ids)}")
    published_at(event, clock.now)
    clock.advance(late)
    return post_event("handle_job_event", event)


def hint(post_event, clock, name: str, shape: str = JOB_HINT) -> int:
    """A step later, a hint about job ``name``; returns the HTTP status."""
    clock.advance(STEP_SECONDS)
    return deliver_hint(post_event, clock, hint_body(shape, name)).status_code


def tick(post_event, clock, seconds: float = STEP_SECONDS) -> int:
    clock.advance(seconds)
    event = pubsub_cloud_event(b"tick", message_id=f"tick-{next(_message_ids)}")
    return post_event("handle_scheduler_tick", event).status_code


def env_of(created: tuple[Any, dict[str, str]]) -> dict[str, str]:
    request, _labels = created
    pool = request.spec["jobSpec"]["workerPoolSpecs"][0]
    return {e["name"]: e["value"] for e in pool["containerSpec"].get("env", [])}


def states(notifier) -> list[tuple[str, int]]:
    return [(m["state"], m["attempt"]) for m in notifier.messages]


def run(tracker, clock, name: str) -> None:
    """Vertex starts the job now."""
    tracker.backend.update(name, state="JOB_STATE_RUNNING", start_time=clock.now)


def end(tracker, clock, name: str, state: str, message: str | None = None, code: int = 0):
    """Vertex ends the job now."""
    tracker.backend.update(
        name, state=state, end_time=clock.now, error_code=code or None, error_message=message
    )


def current(tracker) -> dict[str, Any]:
    record = tracker.jobs.job_store.get(SEED)
    assert record is not None
    return record


# --- hints ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["ml_job_log_entry", "audit_log_entry", "job_name_hint"])
def test_hint_moves_a_queued_job_to_running(tracker, clock, post_event, shape):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    assert current(tracker)["state"] == "QUEUED"
    clock.advance(30)
    run(tracker, clock, name)
    started = clock.now

    assert hint(post_event, clock, name, shape) == 200

    record = current(tracker)
    assert record["state"] == "RUNNING"
    assert record["vertexState"] == "JOB_STATE_RUNNING"
    attempt = tracker.jobs.get_attempt(SEED, 1)
    assert (attempt["state"], attempt["startedAt"]) == ("RUNNING", started)
    assert tracker.backend.reads == [name]
    assert tracker.notifier.messages == []  # progress is not notified, only outcomes


def test_preempted_job_resumes_at_once_from_the_latest_checkpoint(tracker, clock, post_event):
    submit(post_event)
    first = current(tracker)["vertexJob"]
    started = clock.now
    run(tracker, clock, first)
    assert hint(post_event, clock, first) == 200
    tracker.checkpoints.commit(CHECKPOINTS, 100, clock.advance(600))
    latest = tracker.checkpoints.commit(CHECKPOINTS, 200, clock.advance(600))
    ended_at = clock.advance(300)
    end(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED, code=14)

    assert hint(post_event, clock, first) == 200

    # Backoff 0: attempt 2 was created within the same delivery.
    assert len(tracker.backend.created) == 2
    record = current(tracker)
    second = record["vertexJob"]
    assert second != first
    assert (record["state"], record["attempt"]) == ("QUEUED", 2)
    assert record["retries"] == {"preemption": 1}
    assert record["vertexJobIds"] == [job_id(first), job_id(second)]
    assert record["latestCheckpoint"] == latest.to_dict()
    assert record["workLostSeconds"] == 300.0
    assert "nextAttemptAt" not in record and "claim" not in record
    env_1, env_2 = (env_of(c) for c in tracker.backend.created)
    assert env_2["FLEXJOBS_RESUME_FROM"] == latest.uri
    assert env_2["FLEXJOBS_ATTEMPT"] == "2"
    assert env_2["FLEXJOBS_RUN_ID"] == env_1["FLEXJOBS_RUN_ID"] == SEED
    assert "FLEXJOBS_RESUME_FROM" not in env_1
    assert key_labels(tracker.backend.created[1][1]) == {
        "flexjobs-request": SEED,
        "flexjobs-attempt": "2",
    }
    ended = tracker.jobs.get_attempt(SEED, 1)
    assert ended["state"] == "FAILED"
    assert ended["errorClass"] == "preempted"
    assert ended["runningSeconds"] == (ended_at - started).total_seconds()
    assert ended["gpuSeconds"] == ended["runningSeconds"]  # one GPU
    assert ended["workLostSeconds"] == 300.0
    assert tracker.jobs.get_attempt(SEED, 2)["resumedFrom"] == latest.uri
    assert states(tracker.notifier) == [("RETRYING", 1)]
    assert tracker.notifier.messages[0]["requestId"] == SEED
    assert tracker.notifier.messages[0]["reason"] == f"preempted: retry 1 of 6: {PREEMPTED}"

    # Attempt 2 runs to the end: one more notification, and the request is over.
    run(tracker, clock, second)
    clock.advance(3600)
    end(tracker, clock, second, "JOB_STATE_SUCCEEDED")
    assert hint(post_event, clock, second) == 200
    record = current(tracker)
    assert record["state"] == "SUCCEEDED"
    assert record["gpuSeconds"] == ended["gpuSeconds"] + 3600
    # FLEX_START A100 at 2.00 vs 4.00 a GPU-hour (PRICES in tests/functional/conftest.py):
    # attempt 1 ran 1560.5 s (0.87 vs 1.73), attempt 2 one hour (2.00 vs 4.00).
    assert record["cost"] == {
        "costUsd": 2.87,
        "onDemandUsd": 5.73,
        "savingsUsd": 2.86,
        "priced": True,
    }
    assert states(tracker.notifier) == [("RETRYING", 1), ("SUCCEEDED", 2)]
    assert len(tracker.backend.created) == 2


def test_user_error_fails_without_retry(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    clock.advance(120)
    end(tracker, clock, name, "JOB_STATE_FAILED", USER_ERROR, code=3)

    assert hint(post_event, clock, name) == 200

    record = current(tracker)
    assert record["state"] == "FAILED"
    assert record["reason"] == f"user-error: not retried (user budget is 0): {USER_ERROR}"
    assert tracker.jobs.get_attempt(SEED, 1)["errorClass"] == "user-error"
    assert [m["state"] for m in tracker.notifier.messages] == ["FAILED"]
    assert tracker.notifier.messages[0]["reason"] == record["reason"]
    # Nothing follows, however long we wait or whatever arrives.
    assert tick(post_event, clock, 3600) == 200
    assert hint(post_event, clock, name) == 200
    assert len(tracker.backend.created) == 1
    assert len(tracker.notifier.messages) == 1


def test_hint_about_an_earlier_attempt_is_acknowledged_and_changes_nothing(
    tracker, clock, post_event
):
    submit(post_event)
    first = current(tracker)["vertexJob"]
    run(tracker, clock, first)
    end(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED)
    assert hint(post_event, clock, first) == 200
    assert current(tracker)["attempt"] == 2
    before, reads = current(tracker), list(tracker.backend.reads)

    assert hint(post_event, clock, first) == 200

    assert current(tracker) == before
    assert tracker.backend.reads == reads  # not even read
    assert len(tracker.backend.created) == 2
    assert states(tracker.notifier) == [("RETRYING", 1)]


@pytest.mark.parametrize(
    "data",
    [
        load("gce_instance_log_entry"),
        {"jobName": "projects/p/locations/us-central1/endpoints/1000"},
        {"resource": {"type": "ml_job", "labels": {"job_id": "not-a-number"}}},
        [1, 2],
        b"not json",
        b"\xff\xfe",
        b"",
    ],
    ids=["gce", "endpoint", "bad-job-id", "list", "text", "not-utf8", "empty"],
)
def test_foreign_or_malformed_hint_is_acknowledged_and_changes_nothing(
    tracker, clock, post_event, data
):
    submit(post_event)
    before = current(tracker)

    assert deliver_hint(post_event, clock, data).status_code == 200

    assert current(tracker) == before
    assert tracker.backend.reads == []
    assert tracker.notifier.messages == []


def test_hint_about_an_unknown_job_is_redelivered_while_recent(tracker, clock, post_event):
    submit(post_event)
    before = current(tracker)
    stranger = "projects/p/locations/us-central1/customJobs/999999"
    # Recent: Vertex may log a job before its attempt is recorded, so try again later.
    assert deliver_hint(post_event, clock, hint_body(JOB_HINT, stranger)).status_code == (500)
    # Older than hint_recent_seconds (15 s): not flexjobs' job, acknowledged.
    stale = deliver_hint(post_event, clock, hint_body(JOB_HINT, stranger), late=20)
    assert stale.status_code == 200
    assert current(tracker) == before
    assert tracker.backend.reads == []


def test_hints_inside_a_window_share_one_trailing_read(tracker, clock, post_event, monkeypatch):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    assert hint(post_event, clock, name) == 200  # outside any window: reads at once
    assert tracker.backend.reads == [name]
    run(tracker, clock, name)
    # A second change a second later is read at once too: two reads per window.
    clock.advance(1)
    assert deliver_hint(post_event, clock, hint_body(JOB_HINT, name)).status_code == 200
    assert tracker.backend.reads == [name, name]
    waits, during_wait = [], []

    def sleep(seconds: float) -> None:
        # While the trailing reader waits for its window to close, two more hints arrive.
        waits.append(seconds)
        for _ in range(2):
            during_wait.append(deliver_hint(post_event, clock, hint_body(JOB_HINT, name)))
        assert tracker.backend.reads == [name, name]  # they read nothing themselves
        clock.advance(seconds)

    monkeypatch.setattr(tracker, "sleep", sleep)
    clock.advance(1)
    assert deliver_hint(post_event, clock, hint_body(JOB_HINT, name)).status_code == 200

    assert [r.status_code for r in during_wait] == [200, 200]
    # The third, the trailing reader, waited out the rest of the 10 s window of the first
    # read, then read once for all.
    assert len(waits) == 1 and 0 < waits[0] <= 10
    assert tracker.backend.reads == [name, name, name]
    record = current(tracker)
    assert record["state"] == "RUNNING"
    assert not record["hintPending"]


def test_failed_vertex_read_is_redelivered_and_changes_no_state(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    before = current(tracker)
    tracker.backend.fail_get_with = BackendUnavailable("Vertex AI GetCustomJob failed: 503")

    assert hint(post_event, clock, name) == 500

    after = current(tracker)
    lease = {"lastReadAt", "previousReadAt", "hintPending"}
    assert {k: v for k, v in after.items() if k not in lease} == {
        k: v for k, v in before.items() if k not in lease
    }
    assert after["state"] == "QUEUED"
    assert tracker.jobs.get_attempt(SEED, 1)["state"] == "QUEUED"
    assert tracker.notifier.messages == []
    assert len(tracker.backend.created) == 1


@pytest.mark.parametrize(
    ("late", "redelivered_after"),
    [
        (2.0, 30.0),  # the failed read began after publication: COVERED, forever
        (0.5, 3.0),  # delivered at once and redelivered inside the 10 s window: PENDING
    ],
    ids=["covered", "pending"],
)
def test_hint_redelivered_after_a_failed_read_reads_vertex_again(
    tracker, clock, post_event, late, redelivered_after
):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    tracker.backend.fail_get_with = BackendUnavailable("Vertex AI GetCustomJob failed: 503")
    clock.advance(STEP_SECONDS)
    event = published_at(pubsub_cloud_event(hint_body(JOB_HINT, name), message_id="h-1"), clock.now)
    clock.advance(late)
    assert post_event("handle_job_event", event).status_code == 500
    tracker.backend.fail_get_with = None

    # Pub/Sub redelivers the same message; Vertex answers again.
    clock.advance(redelivered_after)
    assert post_event("handle_job_event", event).status_code == 200

    assert tracker.backend.reads == [name, name]
    assert current(tracker)["state"] == "RUNNING"


# --- the scheduler tick -----------------------------------------------------------------


def test_tick_runs_a_due_retry_and_reconciles_without_hints(tracker, clock, post_event):
    tracker.retry = dataclasses.replace(
        tracker.retry, backoff=dataclasses.replace(tracker.retry.backoff, base_seconds=60)
    )
    submit(post_event)
    first = current(tracker)["vertexJob"]
    run(tracker, clock, first)
    clock.advance(600)
    end(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED, code=14)

    # The tick finds the preemption through list_labelled: no hint was delivered.
    assert tick(post_event, clock, 1) == 200
    record = current(tracker)
    assert record["state"] == "RETRYING"
    # Backoff base 60 s, rand 0.5: the first retry waits 30 s.
    assert record["nextAttemptAt"] == clock.now + timedelta(seconds=30)
    assert len(tracker.backend.created) == 1
    assert states(tracker.notifier) == [("RETRYING", 1)]

    assert tick(post_event, clock, 29) == 200  # not due yet
    assert len(tracker.backend.created) == 1
    assert current(tracker)["state"] == "RETRYING"

    assert tick(post_event, clock, 1) == 200  # due now
    assert len(tracker.backend.created) == 2
    record = current(tracker)
    second = record["vertexJob"]
    assert (record["state"], record["attempt"]) == ("QUEUED", 2)
    assert env_of(tracker.backend.created[1])["FLEXJOBS_ATTEMPT"] == "2"

    run(tracker, clock, second)
    assert tick(post_event, clock) == 200
    assert current(tracker)["state"] == "RUNNING"

    end(tracker, clock, second, "JOB_STATE_SUCCEEDED")
    assert tick(post_event, clock) == 200
    assert current(tracker)["state"] == "SUCCEEDED"
    assert tick(post_event, clock) == 200
    assert states(tracker.notifier) == [("RETRYING", 1), ("SUCCEEDED", 2)]
    assert len(tracker.backend.created) == 2
    # The tick read Vertex by listing, never job by job.
    assert tracker.backend.reads == []


def test_tick_publishes_what_a_failed_publish_left_in_the_outbox(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED)
    tracker.notifier.fail_next = PublishFailed("job-notifications: deadline exceeded")

    # The state is settled and the notification kept; the publish fault asks for redelivery.
    assert hint(post_event, clock, name) == 500
    record = current(tracker)
    assert record["state"] == "RETRYING"
    assert [m["state"] for m in record["outbox"]] == ["RETRYING"]
    assert tracker.notifier.messages == []

    assert tick(post_event, clock) == 200

    assert states(tracker.notifier) == [("RETRYING", 1)]
    record = current(tracker)
    assert record["outbox"] == [] and record["outboxPending"] is False
    # The retry the failed delivery could not start was started by the tick.
    assert (record["state"], record["attempt"]) == ("QUEUED", 2)
    assert tick(post_event, clock) == 200
    assert len(tracker.notifier.messages) == 1


def preempted_and_retrying(tracker, clock, post_event, backoff: float = 60) -> str:
    """Submit, run and preempt attempt 1; returns its job. The record is RETRYING."""
    tracker.retry = dataclasses.replace(
        tracker.retry, backoff=dataclasses.replace(tracker.retry.backoff, base_seconds=backoff)
    )
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED)
    assert hint(post_event, clock, name) == 200
    assert current(tracker)["state"] == "RETRYING"
    return name


def test_transient_create_fault_in_a_retry_is_retried_by_the_tick(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    tracker.backend.fail_with = BackendUnavailable("Vertex AI CreateCustomJob failed: 503")

    # The tick isolates the record: logged, counted and left for the next tick, acknowledged.
    assert tick(post_event, clock, 3600) == 200

    record = current(tracker)
    assert (record["state"], record["attempt"]) == ("RETRYING", 1)
    assert record["claim"]["expiresAt"] <= clock()  # released: the tick need not wait its TTL
    tracker.backend.fail_with = None
    assert tick(post_event, clock, 1) == 200
    assert (current(tracker)["state"], current(tracker)["attempt"]) == ("QUEUED", 2)
    assert len(tracker.backend.created) == 2


def test_a_retry_vertex_refuses_fails_the_request(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    tracker.backend.fail_with = BackendRejected("400 location europe-west9 is not supported")

    assert tick(post_event, clock, 3600) == 200

    record = current(tracker)
    assert record["state"] == "FAILED"
    reason = "attempt 2 refused by Vertex AI: 400 location europe-west9 is not supported"
    assert record["reason"] == reason
    assert states(tracker.notifier) == [("RETRYING", 1), ("FAILED", 1)]
    assert tracker.notifier.messages[-1]["reason"] == reason
    assert len(tracker.backend.created) == 1


# --- cancel -----------------------------------------------------------------------------


def cancel(post_event, request_id: str = SEED) -> None:
    event = pubsub_cloud_event({"cancel": request_id}, message_id=f"cancel-{next(_message_ids)}")
    assert post_event("handle_job_request", event).status_code == 200


def test_cancel_ends_the_running_job_and_nothing_follows(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    assert hint(post_event, clock, name) == 200

    cancel(post_event)

    record = current(tracker)
    assert record["state"] == "CANCELLED"
    assert record["reason"] == "cancelled"
    assert record["cancelRequested"] is True
    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLED"
    assert states(tracker.notifier) == [("CANCELLED", 1)]
    # Vertex reports the cancel; hints and ticks change nothing more.
    assert hint(post_event, clock, name) == 200
    assert tick(post_event, clock, 3600) == 200
    assert current(tracker)["state"] == "CANCELLED"
    assert len(tracker.backend.created) == 1
    assert states(tracker.notifier) == [("CANCELLED", 1)]


def test_cancel_while_retrying_stops_the_retry(tracker, clock, post_event):
    tracker.retry = dataclasses.replace(
        tracker.retry, backoff=dataclasses.replace(tracker.retry.backoff, base_seconds=60)
    )
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED)
    assert hint(post_event, clock, name) == 200
    assert current(tracker)["state"] == "RETRYING"

    cancel(post_event)

    assert current(tracker)["state"] == "CANCELLED"
    assert tracker.backend.jobs[name].state == "JOB_STATE_FAILED"  # ended already: not asked
    assert tick(post_event, clock, 3600) == 200
    assert len(tracker.backend.created) == 1
    assert states(tracker.notifier) == [("RETRYING", 1), ("CANCELLED", 1)]


def test_a_cancel_requested_request_starts_no_retry(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    # A cancel delivery marked the request, then died before settling it CANCELLED.
    tracker.jobs.apply(SEED, lambda record: cancel_requested(record, clock()))

    assert tick(post_event, clock, 3600) == 200

    assert len(tracker.backend.created) == 1


def test_a_retry_racing_a_cancel_leaves_no_job_running(tracker, clock, post_event, monkeypatch):
    preempted_and_retrying(tracker, clock, post_event)
    clock.advance(3600)  # the retry is due
    write, raced = tracker.jobs.write, []

    def tick_right_after_cancel_requested(request_id, decide, known=None):
        written = write(request_id, decide, known)
        change = written.change if written is not None else None
        if change is not None and change.record.get("cancelRequested") and not raced:
            raced.append(handlers.reconcile(Reconcile(), tracker))  # the scheduler tick
        return written

    monkeypatch.setattr(tracker.jobs, "write", tick_right_after_cancel_requested)

    cancel(post_event)

    assert raced, "the tick did not run inside the cancel"
    assert current(tracker)["state"] == "CANCELLED"
    running = {
        name: job.state
        for name, job in tracker.backend.jobs.items()
        if not (from_vertex(job.state) or JobState.QUEUED).terminal
    }
    assert running == {}


def test_cancel_while_retrying_keeps_how_the_ended_attempt_ended(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)

    cancel(post_event)

    assert current(tracker)["state"] == "CANCELLED"
    attempt = tracker.jobs.get_attempt(SEED, 1)
    assert (attempt["state"], attempt["errorClass"]) == ("FAILED", "preempted")


# --- AUTO: the capacity policy chooses each attempt ---------------------------------------


def auto_body() -> dict[str, Any]:
    """An AUTO request with days of slack: published 2026-11-30T12:00Z (the sample envelope),
    4 h of work, due in 3 days."""
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "AUTO"}
    body["customJob"]["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": OUTPUT}
    body.update(
        deadline="2026-12-03T12:00:00Z",
        estimatedRunSeconds=4 * 3600,
        checkpointIntervalSeconds=600,
        restartOverheadSeconds=300,
    )
    return body


def test_auto_attempts_run_on_what_the_policy_chose_and_record_why(
    intake, tracker, clock, post_event
):
    assert post_event("handle_job_request", pubsub_cloud_event(auto_body())).status_code == 200

    record = current(tracker)
    first = record["vertexJob"]
    (request, _labels), *_ = tracker.backend.created
    sent = request.spec["jobSpec"]["scheduling"]["strategy"]
    # Plenty of slack: the cheapest capacity, never AUTO itself (Vertex does not know it).
    assert sent in ("SPOT", "FLEX_START") and record["strategy"] == sent
    assert record["capacity"]["strategy"] == sent and record["capacity"]["reason"]

    run(tracker, clock, first)
    assert hint(post_event, clock, first) == 200
    tracker.checkpoints.commit(CHECKPOINTS, 100, clock.advance(600))
    end(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED, code=14)
    assert hint(post_event, clock, first) == 200

    record = current(tracker)
    assert record["attempt"] == 2
    retry, _labels = tracker.backend.created[1]
    chosen = retry.spec["jobSpec"]["scheduling"]["strategy"]
    assert chosen in ("SPOT", "FLEX_START", "STANDARD")
    assert record["capacity"]["strategy"] == chosen == record["strategy"]
    if chosen == "FLEX_START":
        assert retry.spec["jobSpec"]["scheduling"]["maxWaitDuration"] == (
            f"{record['capacity']['maxWaitSeconds']}s"
        )


def test_auto_with_the_slack_gone_runs_on_demand(intake, tracker, clock, post_event):
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "AUTO"}
    # 24 h of work due in 24 h 20 min of the publish: only on-demand can still make it.
    body.update(
        deadline="2026-12-01T12:20:00Z",
        estimatedRunSeconds=86400,
        restartOverheadSeconds=300,
    )
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200

    (request, _labels), *_ = tracker.backend.created
    assert request.spec["jobSpec"]["scheduling"]["strategy"] == "STANDARD"
    assert current(tracker)["capacity"]["strategy"] == "STANDARD"


# --- AUTO: attempts ended by choice ------------------------------------------------------


def submit_auto(intake, tracker, post_event) -> str:
    """:func:`auto_body` submitted; returns attempt 1's job, which the policy puts on Spot."""
    assert post_event("handle_job_request", pubsub_cloud_event(auto_body())).status_code == 200
    record = current(tracker)
    assert record["strategy"] == "SPOT", record["capacity"]
    return str(record["vertexJob"])


def wait_until(tracker) -> float:
    """Seconds from now to attempt's ``capacity.waitUntil``."""
    return (current(tracker)["capacity"]["waitUntil"] - tracker.clock()).total_seconds()


def test_auto_spot_attempt_still_queued_at_its_wait_until_is_given_up_free_of_charge(
    intake, tracker, clock, post_event
):
    first = submit_auto(intake, tracker, post_event)
    left = wait_until(tracker)
    assert left >= 300  # at least a probe's length
    assert tick(post_event, clock, left - 30) == 200
    assert tracker.backend.cancels == []  # not yet: it may still find capacity

    assert tick(post_event, clock, 60) == 200  # past waitUntil, still queued: given up
    assert tracker.backend.cancels == [first]
    record = current(tracker)
    assert record["yielding"]["vertexJob"] == first and record["yielding"]["why"] == "gave-up"
    assert record.get("pendingCancels") == []  # Vertex confirmed the cancel

    # The next look settles the cancelled job as a switch and runs attempt 2 at once.
    assert tick(post_event, clock) == 200
    record = current(tracker)
    assert record["attempt"] == 2 and record["state"] == "QUEUED"
    assert "yielding" not in record
    assert record.get("retries", {}) == {}  # no budget charged, no failure counted
    ended = tracker.jobs.job_store.database.attempts[(SEED, 1)]
    assert ended["state"] == "CANCELLED" and ended["endedBy"] == "gave-up"
    assert "errorClass" not in ended
    # The capacity Spot did not have a moment ago is looked for elsewhere first.
    assert record["strategy"] == record["capacity"]["strategy"] == "FLEX_START"
    assert (
        tracker.jobs.job_store.database.attempts[(SEED, 2)]["capacity"]["strategy"] == "FLEX_START"
    )
    retrying = [m for m in tracker.notifier.messages if m["state"] == "RETRYING"]
    assert len(retrying) == 1
    assert retrying[0]["reason"].startswith("no SPOT capacity by ")
    assert [m["state"] for m in tracker.notifier.messages].count("CANCELLED") == 0


def test_auto_attempt_that_started_before_its_wait_until_passed_is_kept(
    intake, tracker, clock, post_event
):
    first = submit_auto(intake, tracker, post_event)
    clock.advance(wait_until(tracker) - 10)
    run(tracker, clock, first)
    assert tick(post_event, clock, 60) == 200  # the listing shows it running: settled, kept
    assert tracker.backend.cancels == []
    assert current(tracker)["state"] == "RUNNING" and "yielding" not in current(tracker)


def test_a_give_up_whose_cancel_fails_is_finished_by_a_later_tick(
    intake, tracker, clock, post_event
):
    first = submit_auto(intake, tracker, post_event)
    tracker.backend.fail_cancel_with = BackendUnavailable("Vertex is down")
    assert tick(post_event, clock, wait_until(tracker) + 1) == 200
    record = current(tracker)
    # Marked, and the job kept pending cancel on the record: nothing is lost in between.
    assert record["yielding"]["vertexJob"] == first and record["pendingCancels"] == [first]
    assert tracker.backend.jobs[first].state == "JOB_STATE_QUEUED"

    tracker.backend.fail_cancel_with = None
    assert tick(post_event, clock) == 200  # the pending cancel goes through
    assert tick(post_event, clock) == 200  # and the cancelled job is settled as a switch
    record = current(tracker)
    assert record["attempt"] == 2 and record.get("retries", {}) == {}
    assert tracker.backend.jobs[first].state == "JOB_STATE_CANCELLED"


def test_a_user_cancel_after_a_give_up_ends_the_request_cancelled(
    intake, tracker, clock, post_event
):
    first = submit_auto(intake, tracker, post_event)
    assert tick(post_event, clock, wait_until(tracker) + 1) == 200
    assert current(tracker)["yielding"]["vertexJob"] == first
    cancel(post_event)  # before any look settles the given-up job
    assert tick(post_event, clock) == 200
    assert tick(post_event, clock) == 200
    record = current(tracker)
    assert record["state"] == "CANCELLED" and record["attempt"] == 1
    assert len(tracker.backend.created) == 1  # no attempt 2
    assert "yielding" not in record


def test_a_give_up_after_a_user_cancel_changes_nothing(intake, tracker, clock, post_event):
    submit_auto(intake, tracker, post_event)
    clock.advance(wait_until(tracker) + 1)
    cancel(post_event)
    assert tick(post_event, clock) == 200
    record = current(tracker)
    assert record["state"] == "CANCELLED" and "yielding" not in record
    assert len(tracker.backend.created) == 1


def test_a_give_up_decided_on_a_queued_listing_spares_a_job_a_hint_saw_start(
    intake, tracker, clock, post_event
):
    from shared.app.steps.switches import yield_attempt

    first = submit_auto(intake, tracker, post_event)
    clock.advance(wait_until(tracker) + 1)
    listed = tracker.jobs.get(SEED)  # what the tick's query returned: QUEUED, past waitUntil
    run(tracker, clock, first)
    assert hint(post_event, clock, first) == 200  # meanwhile a hint records it RUNNING
    # The tick's give-up, decided on its stale record: the write's fresh read refuses it.
    assert not yield_attempt(tracker, SEED, first, why="gave-up", reason="r", known=listed)
    assert tracker.backend.cancels == []
    assert current(tracker)["state"] == "RUNNING" and "yielding" not in current(tracker)
