"""The exactly-once and cancel guarantees under the interleavings a review reproduced.

Each test drives the real entry points through functions-framework on the in-memory fakes,
and controls the interleaving: a create whose answer is lost, a cancel that lands between two
steps of a submission, a Vertex cancel that fails, a tick with one bad record.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from datetime import timedelta

import pytest

from shared.app.services.intake import MAX_REJECTION_ERRORS, excerpt
from shared.domain.decisions.recovery import cancel_requested
from shared.domain.decisions.submissions import TOMBSTONE_REASON, Submission
from shared.domain.model.ids import labels_for
from shared.domain.model.states import JobState, from_vertex
from shared.kernel.errors import BackendRejected, BackendUnavailable, OutcomeUnknown, QuotaExhausted
from tests.events import load, pubsub_cloud_event
from tests.fakes import crash_on_next_record
from tests.functional.test_lifecycle_handlers import (
    PREEMPTED,
    SEED,
    current,
    end,
    preempted_and_retrying,
    run,
    states,
    tick,
)

_ids = itertools.count(1)


def deliver(post_event, body) -> int:
    event = pubsub_cloud_event(body, message_id=f"trust-{next(_ids)}")
    return post_event("handle_job_request", event).status_code


def request_seed(post_event) -> int:
    return deliver(post_event, load("seed_request"))


def cancel(post_event, request_id: str = SEED) -> int:
    return deliver(post_event, {"cancel": request_id})


def live_jobs(backend) -> dict[str, str]:
    return {
        name: job.state
        for name, job in backend.jobs.items()
        if not (from_vertex(job.state) or JobState.QUEUED).terminal
    }


# --- a create whose outcome is unknown ---------------------------------------------------


def test_a_timed_out_create_that_happened_makes_one_job(tracker, clock, post_event):
    tracker.backend.fail_after_create = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")

    assert request_seed(post_event) == 500  # redeliver: the outcome is unknown
    assert len(tracker.backend.created) == 1
    record = current(tracker)
    # The claim is kept: a redelivery now must not look up before the job is there.
    assert record["claim"] is not None and record["vertexJob"] is None

    clock.advance(5)
    assert request_seed(post_event) == 500  # the claim still holds the submission
    assert len(tracker.backend.created) == 1

    clock.advance(tracker.settings.claim_ttl_seconds)
    assert request_seed(post_event) == 200  # claim expired: the lookup adopts the job

    (name,) = tracker.backend.jobs
    assert len(tracker.backend.created) == 1
    assert current(tracker)["vertexJob"] == name
    assert current(tracker)["state"] == "QUEUED"


def test_a_second_job_for_a_recorded_attempt_is_refused_by_the_record(tracker, clock, post_event):
    # Two deliveries both created attempt 1 (the first one's create landed after the second
    # looked up). The second to record loses: the record keeps the first job.
    request_seed(post_event)
    winner = current(tracker)["vertexJob"]
    loser = tracker.backend.create(_request_of(tracker), labels_for(SEED, 1), "us-central1")

    submission = Submission(SEED, 1, loser, "FLEX_START", "us-central1")
    assert tracker.jobs.record_submission(submission, clock()) is False
    assert current(tracker)["vertexJob"] == winner


def _request_of(tracker):
    request, _labels = tracker.backend.created[0]
    return request


def test_the_tick_cancels_a_stray_job_under_a_recorded_attempt(tracker, clock, post_event):
    request_seed(post_event)
    recorded = current(tracker)["vertexJob"]
    # A create that landed after its delivery gave up: same labels, never recorded.
    stray = tracker.backend.create(_request_of(tracker), labels_for(SEED, 1), "us-central1")

    assert tick(post_event, clock) == 200

    assert tracker.backend.jobs[stray.name].state == "JOB_STATE_CANCELLED"
    assert live_jobs(tracker.backend) == {recorded: "JOB_STATE_QUEUED"}
    assert current(tracker)["vertexJob"] == recorded


def test_a_job_of_a_later_attempt_in_flight_is_no_stray(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    # Attempt 2 is being created by a delivery that has not recorded it yet.
    in_flight = tracker.backend.create(_request_of(tracker), labels_for(SEED, 2), "us-central1")

    assert tick(post_event, clock, 1) == 200

    assert tracker.backend.jobs[in_flight.name].state == "JOB_STATE_QUEUED"


def test_a_late_create_of_an_expired_claim_is_cancelled_while_the_live_claim_holds(
    tracker, clock, post_event
):
    # The soak's seed 455247: a retry's create was slower than its claim (it landed after the
    # claim expired); the next claim looked up, found nothing, and created its own, whose
    # answer was lost too, so that claim is kept. Both jobs sit under attempt 2 with nothing
    # recorded: the late one must not wait for the live claim to expire (it could start).
    preempted_and_retrying(tracker, clock, post_event, backoff=1)
    ttl = tracker.settings.claim_ttl_seconds
    tracker.backend.fail_with = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")
    assert tick(post_event, clock, 5) == 200  # claim 1 taken; its create outcome unknown
    first_claim = current(tracker)["claim"]["token"]
    tracker.backend.fail_with = None

    tracker.backend.fail_after_create = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")
    assert tick(post_event, clock, ttl + 1) == 200  # claim 2: finds nothing, creates; lost
    second_claim = current(tracker)["claim"]["token"]
    (own,) = [n for n, j in tracker.backend.jobs.items() if j.labels.get("flexjobs-attempt") == "2"]
    assert tracker.backend.jobs[own].labels["flexjobs-claim"] == second_claim != first_claim
    # Claim 1's create lands now, late.
    late = tracker.backend.create(
        _request_of(tracker), {**labels_for(SEED, 2), "flexjobs-claim": first_claim}, "us-central1"
    )

    assert tick(post_event, clock, 1) == 200  # claim 2 still live: nothing recorded yet

    assert (
        current(tracker)["vertexJob"] != own and current(tracker)["claim"]["token"] == second_claim
    )
    assert tracker.backend.jobs[late.name].state == "JOB_STATE_CANCELLED"
    assert tracker.backend.jobs[own].state == "JOB_STATE_QUEUED"  # the live claim's, kept

    assert tick(post_event, clock, ttl) == 200  # claim 2 expired: its job is adopted
    record = current(tracker)
    assert (record["state"], record["attempt"], record["vertexJob"]) == ("QUEUED", 2, own)
    assert live_jobs(tracker.backend) == {own: "JOB_STATE_QUEUED"}


def test_a_job_of_an_expired_claim_is_kept_while_the_live_claim_made_none(
    tracker, clock, post_event
):
    # The live claim may be about to adopt the one job there is: it is no stray.
    preempted_and_retrying(tracker, clock, post_event, backoff=1)
    tracker.backend.fail_with = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")
    assert tick(post_event, clock, 5) == 200
    first_claim = current(tracker)["claim"]["token"]
    tracker.backend.fail_with = None
    late = tracker.backend.create(
        _request_of(tracker), {**labels_for(SEED, 2), "flexjobs-claim": first_claim}, "us-central1"
    )

    assert tick(post_event, clock, 1) == 200  # claim 1 still live

    assert tracker.backend.jobs[late.name].state == "JOB_STATE_QUEUED"
    assert tick(post_event, clock, tracker.settings.claim_ttl_seconds) == 200
    assert current(tracker)["vertexJob"] == late.name  # adopted once the claim expired
    assert len([c for c in tracker.backend.created if c[1]["flexjobs-attempt"] == "2"]) == 1


# --- create errors, classified ----------------------------------------------------------


def test_quota_parks_the_request_and_the_tick_submits_it(tracker, clock, post_event):
    tracker.backend.fail_with = QuotaExhausted("CreateCustomJob: 429 quota exceeded")

    assert request_seed(post_event) == 200  # parked, not redelivered

    record = current(tracker)
    assert (record["state"], record["reason"], record["vertexJob"]) == ("QUEUED", "quota", None)
    assert record["nextAttemptAt"] > clock.now
    # Expired, naming its attempt: the tick's claim of it looks up what a delivery made.
    assert record["claim"]["expiresAt"] <= clock() and record["claim"]["attempt"] == 1
    tracker.backend.fail_with = None
    tracker.backend.calls.clear()

    assert tick(post_event, clock, 3600) == 200

    record = current(tracker)
    assert (record["state"], record["attempt"]) == ("QUEUED", 1)
    assert record["vertexJob"] in tracker.backend.jobs
    assert record["reason"] is None
    assert len(tracker.backend.created) == 1
    assert states(tracker.notifier) == []
    # Not a first claim of attempt 1: an earlier delivery's create of unknown outcome could
    # have made a job, so the tick looked it up before creating.
    assert tracker.backend.calls["find"] == 1


def test_quota_on_a_retry_keeps_it_retrying_with_backoff(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    tracker.backend.fail_with = QuotaExhausted("CreateCustomJob: 429 quota exceeded")

    assert tick(post_event, clock, 3600) == 200

    record = current(tracker)
    assert (record["state"], record["attempt"], record["reason"]) == ("RETRYING", 1, "quota")
    assert record["nextAttemptAt"] >= clock.now
    tracker.backend.fail_with = None
    assert tick(post_event, clock, 3600) == 200
    assert (current(tracker)["state"], current(tracker)["attempt"]) == ("QUEUED", 2)


@pytest.mark.parametrize(
    "error",
    [
        "403 Permission 'aiplatform.customJobs.create' denied",
        "400 FAILED_PRECONDITION: the service account is disabled",
        "400 INVALID_ARGUMENT: bad machine type",
    ],
)
def test_a_create_refused_for_good_fails_with_a_notification(tracker, clock, post_event, error):
    tracker.backend.fail_with = BackendRejected(f"Vertex AI refused CreateCustomJob: {error}")

    assert request_seed(post_event) == 200

    record = current(tracker)
    assert record["state"] == "FAILED"
    assert error in record["reason"]
    assert record["endedAt"] == clock.now
    assert states(tracker.notifier) == [("FAILED", 1)]
    assert tracker.backend.jobs == {}


def test_a_refusal_after_a_cancel_keeps_the_request_cancelled(tracker, clock, post_event):
    tracker.backend.fail_with = QuotaExhausted("429")
    request_seed(post_event)  # parked: QUEUED, no job
    assert cancel(post_event) == 200
    assert current(tracker)["state"] == "CANCELLED"

    tracker.backend.fail_with = BackendRejected("400 refused")
    assert tick(post_event, clock, 3600) == 200  # nothing is due any more

    assert current(tracker)["state"] == "CANCELLED"
    assert states(tracker.notifier) == [("CANCELLED", 1)]
    assert tracker.backend.jobs == {}


def test_a_transient_fault_that_made_nothing_is_redelivered_at_once(tracker, clock, post_event):
    # (The Vertex adapter raises BackendUnavailable only where nothing can have been made:
    # reads, and the label lookup; a create that broke off is OutcomeUnknown.)
    tracker.backend.fail_with = BackendUnavailable("ListCustomJobs: 503 unavailable")
    assert request_seed(post_event) == 500
    claim = current(tracker)["claim"]
    assert claim["expiresAt"] <= clock()  # released: the redelivery need not wait out its TTL
    tracker.backend.fail_with = None
    assert request_seed(post_event) == 200
    assert len(tracker.backend.jobs) == 1


# --- cancel wins every race ---------------------------------------------------------------


def test_a_cancel_during_a_submission_waits_for_it_then_cancels_its_job(
    tracker, clock, post_event, monkeypatch
):
    create = tracker.backend.create
    answers = []

    def create_then_cancel_arrives(*args, **kwargs):
        job = create(*args, **kwargs)
        answers.append(cancel(post_event))  # delivered while the create is in flight
        return job

    monkeypatch.setattr(tracker.backend, "create", create_then_cancel_arrives)

    assert request_seed(post_event) == 200
    assert answers == [500]  # the submission held its claim: the cancel is redelivered
    (name,) = tracker.backend.jobs
    # The submission found cancelRequested when recording, and cancelled its own job.
    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLED"

    assert cancel(post_event) == 200  # the redelivered cancel
    assert current(tracker)["state"] == "CANCELLED"
    assert live_jobs(tracker.backend) == {}
    assert states(tracker.notifier) == [("CANCELLED", 1)]


def test_a_cancel_finds_the_job_of_a_delivery_that_died_before_recording(
    tracker, clock, post_event
):
    crash_on_next_record(tracker.jobs)  # the process dies between create and record
    with pytest.raises(KeyboardInterrupt):
        request_seed(post_event)
    (name,) = tracker.backend.jobs
    assert current(tracker)["vertexJob"] is None

    assert cancel(post_event) == 500  # the dead delivery's claim is still live
    clock.advance(tracker.settings.claim_ttl_seconds + 1)
    assert cancel(post_event) == 200

    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLED"
    assert current(tracker)["state"] == "CANCELLED"
    assert request_seed(post_event) == 200  # the request's redelivery creates nothing
    assert len(tracker.backend.created) == 1


def test_a_cancel_vertex_does_not_confirm_is_retried_until_it_does(tracker, clock, post_event):
    request_seed(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    tracker.backend.fail_cancel_with = BackendUnavailable("CancelCustomJob: 503")

    assert cancel(post_event) == 500  # redelivered until Vertex confirms
    record = current(tracker)
    assert record["state"] == "CANCELLED"
    assert record["pendingCancels"] == [name] and record["cancelPending"] is True
    assert tick(post_event, clock) == 200  # still failing: kept pending, tick acknowledged
    assert current(tracker)["pendingCancels"] == [name]

    tracker.backend.fail_cancel_with = None
    assert tick(post_event, clock) == 200

    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLED"
    record = current(tracker)
    assert record["pendingCancels"] == [] and record["cancelPending"] is False


def test_a_creator_whose_own_cancel_fails_leaves_it_to_the_tick(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    clock.advance(3600)  # the retry is due
    # The cancel lands between the retry's create and its record; Vertex then refuses the
    # creator's cancel for a while.
    create = tracker.backend.create

    def create_then_cancel_requested(*args, **kwargs):
        job = create(*args, **kwargs)
        tracker.jobs.apply(SEED, lambda rec: cancel_requested(rec, clock()))
        tracker.backend.fail_cancel_with = BackendUnavailable("CancelCustomJob: 503")
        return job

    tracker.backend.create = create_then_cancel_requested
    assert tick(post_event, clock, 1) == 200
    second = [n for n in tracker.backend.jobs if n != current(tracker)["vertexJob"]]
    assert current(tracker)["pendingCancels"] == second

    tracker.backend.fail_cancel_with = None
    assert tick(post_event, clock) == 200
    assert live_jobs(tracker.backend) == {}
    assert current(tracker)["cancelPending"] is False


def test_a_cancel_that_arrives_before_its_request_wins(tracker, clock, post_event, intake):
    assert cancel(post_event, "early") == 200

    record = tracker.jobs.job_store.get("early")
    assert (record["state"], record["reason"]) == ("CANCELLED", TOMBSTONE_REASON)
    assert record["expireAt"] >= clock.now + timedelta(days=1)
    assert intake.rejections.documents == {}
    assert [(m["state"], m["requestId"]) for m in tracker.notifier.messages] == [
        ("CANCELLED", "early")
    ]

    body = load("seed_request")
    body["requestId"] = "early"
    assert deliver(post_event, body) == 200

    record = tracker.jobs.job_store.get("early")
    assert record["state"] == "CANCELLED"
    assert record["kind"] == "customJob" and record["request"]
    assert record["expireAt"] is None  # a claimed tombstone is an ordinary record now
    assert tracker.backend.jobs == {}


# --- the tick isolates each record --------------------------------------------------------


def test_one_failing_retry_does_not_stop_the_tick(tracker, clock, post_event):
    preempted_and_retrying(tracker, clock, post_event)
    other = load("seed_request")
    other["requestId"] = "other"
    assert deliver(post_event, other) == 200
    other_job = tracker.jobs.job_store.get("other")["vertexJob"]
    end(tracker, clock, other_job, "JOB_STATE_SUCCEEDED")

    def broken(*args, **kwargs):
        raise RuntimeError("a bug reached by one record only")

    tracker.backend.create = broken

    assert tick(post_event, clock, 3600) == 200

    assert current(tracker)["state"] == "RETRYING"  # left for the next tick
    assert tracker.jobs.job_store.get("other")["state"] == "SUCCEEDED"
    assert ("SUCCEEDED", 1) in states(tracker.notifier)


# --- the reconcile window -----------------------------------------------------------------


def test_a_job_adopted_hours_after_vertex_made_it_stays_in_the_tick_window(
    tracker, clock, post_event
):
    # A delivery created the job, then died; the redelivery adopts it three hours later.
    crash_on_next_record(tracker.jobs)
    with pytest.raises(KeyboardInterrupt):
        request_seed(post_event)
    (name,) = tracker.backend.jobs
    tracker.backend.update(name, create_time=clock.now)
    clock.advance(3 * 3600)
    assert request_seed(post_event) == 200
    assert current(tracker)["vertexJob"] == name

    assert current(tracker)["vertexCreateTime"] == clock.now - timedelta(hours=3)
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED)
    assert tick(post_event, clock) == 200

    # The tick's listing reached the job: its preemption was seen, and attempt 2 follows.
    assert states(tracker.notifier) == [("RETRYING", 1)]
    assert current(tracker)["attempt"] == 2


# --- bounded rejections -------------------------------------------------------------------


def test_a_poison_message_leaves_a_bounded_rejection(tracker, post_event, intake):
    # An operator raised the message limit; 50,000 bad worker pools, three errors each.
    intake.settings = dataclasses.replace(intake.settings, max_message_bytes=4 * 1024 * 1024)
    body = load("seed_request")
    body["requestId"] = "poison"
    body["customJob"]["jobSpec"]["workerPoolSpecs"] = [
        body["customJob"]["jobSpec"]["workerPoolSpecs"][0],
        *[{"replicaCount": "-1"}] * 50_000,
    ]
    data = json.dumps(body, separators=(",", ":")).encode()

    assert post_event("handle_job_request", pubsub_cloud_event(data)).status_code == 200

    document = intake.rejections.documents["poison"]
    assert len(document["errors"]) == MAX_REJECTION_ERRORS
    assert document["errorCount"] >= 50_000
    assert len(document["payloadExcerpt"].encode()) <= 2048
    # Well inside Firestore's 1 MiB document limit, whatever the request held.
    assert len(json.dumps(document, default=str).encode()) < 256 * 1024
    (message,) = tracker.notifier.messages
    assert len(message["errors"]) == MAX_REJECTION_ERRORS
    assert tracker.backend.jobs == {}


def test_an_excerpt_of_undecodable_bytes_stays_within_its_byte_bound():
    text = excerpt(b"\xff" * 5000)
    assert len(text.encode()) <= 2048
    assert text.startswith("\ufffd")


def test_a_cancel_naming_a_deployment_takes_it_down_and_leaves_no_tombstone(
    tracker, post_event, intake
):
    assert deliver(post_event, load("deploy_request")) == 200
    assert cancel(post_event, "deploy-1") == 200

    assert intake.rejections.documents == {}
    assert tracker.jobs.job_store.get("deploy-1") is None  # no job tombstone under its id
    record = intake.deployments.records.deployment_store.get("deploy-1")
    # Its DeployModel is still running: the intent waits for it, then takes everything down.
    assert record["state"] == "DEPLOYING"
    assert record["serving"]["intent"]["kind"] == "UNDEPLOY"


# --- found by review: strays after the end, adopting an ended job, fallback locations -----


def test_a_create_landing_after_its_request_was_cancelled_is_cancelled_by_the_tick(
    tracker, clock, post_event
):
    tracker.backend.fail_with = OutcomeUnknown("504 deadline exceeded")  # not made yet
    assert request_seed(post_event) == 500
    tracker.backend.fail_with = None
    clock.advance(tracker.settings.claim_ttl_seconds + 1)
    assert cancel(post_event) == 200  # nothing found under the labels: CANCELLED
    assert current(tracker)["state"] == "CANCELLED"
    # The slow create lands in Vertex now.
    late = tracker.backend.create(_request_of_seed(), labels_for(SEED, 1), "us-central1")

    assert tick(post_event, clock) == 200

    assert tracker.backend.jobs[late.name].state == "JOB_STATE_CANCELLED"


def test_a_duplicate_appearing_after_success_is_cancelled_by_the_tick(tracker, clock, post_event):
    request_seed(post_event)
    end(tracker, clock, current(tracker)["vertexJob"], "JOB_STATE_SUCCEEDED")
    assert tick(post_event, clock) == 200
    assert current(tracker)["state"] == "SUCCEEDED"
    late = tracker.backend.create(_request_of(tracker), labels_for(SEED, 1), "us-central1")

    assert tick(post_event, clock) == 200

    assert tracker.backend.jobs[late.name].state == "JOB_STATE_CANCELLED"
    assert current(tracker)["state"] == "SUCCEEDED"


def test_adopting_a_job_that_already_ended_settles_it_through_the_one_terminal_path(
    tracker, clock, post_event
):
    tracker.backend.fail_after_create = OutcomeUnknown("504")  # made, the answer lost
    assert request_seed(post_event) == 500
    (name,) = tracker.backend.jobs
    run(tracker, clock, name)
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED, code=14)
    clock.advance(tracker.settings.claim_ttl_seconds + 1)

    assert request_seed(post_event) == 200  # adopted: recorded as started, not ended
    assert current(tracker)["state"] == "RUNNING"
    assert tick(post_event, clock) == 200  # the tick settles the preemption

    assert states(tracker.notifier)[0] == ("RETRYING", 1)
    assert current(tracker)["attempt"] == 2  # retried at once (backoff 0 here)


def test_a_cancel_finds_a_crashed_retry_in_its_fallback_location(tracker, clock, post_event):
    body = load("seed_request")
    body["fallback"] = [{"afterCapacityFailures": 1, "location": "europe-west4"}]
    assert deliver(post_event, body) == 200
    first = current(tracker)["vertexJob"]
    end(tracker, clock, first, "JOB_STATE_EXPIRED")  # a capacity failure: the rung applies
    crash_on_next_record(tracker.jobs)  # the retry's create lands, then the process dies
    with pytest.raises(KeyboardInterrupt):
        tick(post_event, clock)
    (retry,) = [n for n in tracker.backend.jobs if "/europe-west4/" in n]
    clock.advance(tracker.settings.claim_ttl_seconds + 1)

    assert cancel(post_event) == 200

    assert tracker.backend.jobs[retry].state == "JOB_STATE_CANCELLED"
    assert live_jobs(tracker.backend) == {}


def _request_of_seed():
    from shared.domain.request.message import parse_request

    return parse_request(load("seed_request"), {}, "m")


def test_a_hand_edited_record_does_not_stop_the_tick_for_the_others(tracker, clock, post_event):
    request_seed(post_event)
    other = load("seed_request")
    other["requestId"] = "other"
    assert deliver(post_event, other) == 200
    # Someone edits a record by hand into values no code writes.
    tracker.jobs.job_store.database.jobs[SEED].update(
        retries={"capacity": None}, gpus="eight", outbox=["x"]
    )
    end(tracker, clock, tracker.jobs.job_store.get("other")["vertexJob"], "JOB_STATE_SUCCEEDED")

    assert tick(post_event, clock) == 200

    assert tracker.jobs.job_store.get("other")["state"] == "SUCCEEDED"
