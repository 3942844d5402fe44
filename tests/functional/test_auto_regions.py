"""AUTO across regions through the handlers, on the fakes: the region rule moves a retry to
another allowed region, records the region before the create, and every delivery of that
attempt creates (or adopts) in the one region recorded."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from shared.app.steps import attempts
from shared.domain.capacity.regions import RegionDecision
from shared.kernel.errors import BackendRejected, OutcomeUnknown, QuotaExhausted
from tests.events import pubsub_cloud_event
from tests.functional.test_lifecycle_handlers import (
    SEED,
    auto_body,
    cancel,
    current,
    run,
    tick,
    wait_until,
)

HOME, OTHER = "us-central1", "us-east1"


def regional_body(**fields: Any) -> dict[str, Any]:
    body = auto_body()
    body.update(location=HOME, regions=[OTHER], checkpointSizeGb=1, **fields)
    return body


def give_up_spot(tracker, clock, post_event) -> str:
    """Submit; attempt 1 runs on Spot in the request's location, queued past its waitUntil:
    given up (a wait in vain there). Returns its job."""
    event = pubsub_cloud_event(regional_body())
    assert post_event("handle_job_request", event).status_code == 200
    record = current(tracker)
    first = str(record["vertexJob"])
    assert f"/locations/{HOME}/" in first and record["strategy"] == "SPOT"
    assert tick(post_event, clock, wait_until(tracker) + 1) == 200
    assert tracker.backend.cancels == [first]
    return first


def test_a_wait_in_vain_moves_the_retry_to_the_other_region(intake, tracker, clock, post_event):
    give_up_spot(tracker, clock, post_event)
    assert tick(post_event, clock) == 200  # settled as a switch; the retry runs at once

    record = current(tracker)
    assert record["attempt"] == 2
    second = record["vertexJob"]
    # In us-central1 Spot just waited in vain (so FLEX_START would be next there); us-east1
    # has no history, and its Spot, charged the 1 GB read, is cheaper by far.
    assert f"/locations/{OTHER}/" in second
    assert record["location"] == OTHER and record["strategy"] == "SPOT"
    assert record["locationsUsed"] == [HOME, OTHER]
    assert record["regionChoice"]["attempt"] == 2 and record["regionChoice"]["location"] == OTHER
    assert record["capacity"]["location"] == OTHER
    assert record["capacity"]["regionReason"].startswith(f"moves to {OTHER}")
    assert tracker.jobs.get_attempt(SEED, 2)["location"] == OTHER
    (request, _labels) = tracker.backend.created[1]
    assert request.location == OTHER


def test_a_pinned_request_is_never_moved(intake, tracker, clock, post_event):
    body = auto_body()
    body.update(location=HOME, pinnedRegion=True)
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200
    first = current(tracker)["vertexJob"]
    assert tick(post_event, clock, wait_until(tracker) + 1) == 200
    assert tracker.backend.cancels == [first]
    assert tick(post_event, clock) == 200
    record = current(tracker)
    assert record["attempt"] == 2 and record["location"] == HOME
    assert "regionChoice" not in record


def test_a_redelivery_creates_in_the_region_recorded_not_in_a_new_choice(
    intake, tracker, clock, post_event, monkeypatch
):
    give_up_spot(tracker, clock, post_event)
    # The retry's create lands in us-east1 but its answer is lost: the claim is kept.
    tracker.backend.fail_after_create = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")
    assert tick(post_event, clock) == 200  # isolated by the tick's sweep
    record = current(tracker)
    assert record["state"] == "RETRYING" and record["regionChoice"]["location"] == OTHER
    landed = [n for n in tracker.backend.jobs if f"/locations/{OTHER}/" in n]
    assert len(landed) == 1

    # The next delivery's rule, from its own clock, would choose the request's location
    # again: stand for that by making the rule say so.
    def flipped(s, regions, prices_by_region=None):
        return RegionDecision(HOME, attempts.decide(s), "stays (a choice from a later clock)")

    monkeypatch.setattr(attempts, "decide_across_regions", flipped)
    assert tick(post_event, clock, tracker.settings.claim_ttl_seconds + 1) == 200

    record = current(tracker)
    # Adopted in the recorded region: one job for attempt 2, none in the other.
    assert record["attempt"] == 2 and record["vertexJob"] == landed[0]
    assert len(tracker.backend.created) == 2
    assert record["location"] == OTHER


def test_a_cancel_looks_in_every_location_the_request_used(intake, tracker, clock, post_event):
    give_up_spot(tracker, clock, post_event)
    assert tick(post_event, clock) == 200
    second = current(tracker)["vertexJob"]
    run(tracker, clock, second)
    # A stray of attempt 2 left in the request's location (a create from a dead delivery).
    stray = second.replace(OTHER, HOME)
    tracker.backend.jobs[stray] = dataclasses.replace(tracker.backend.jobs[second], name=stray)
    cancel(post_event)
    assert {second, stray} <= set(tracker.backend.cancels)
    assert current(tracker)["state"] == "CANCELLED"


def test_the_tick_lists_every_location_the_request_used(intake, tracker, clock, post_event):
    give_up_spot(tracker, clock, post_event)
    assert tick(post_event, clock) == 200
    listed = tracker.backend.calls["list_labelled"]
    assert tick(post_event, clock) == 200
    assert tracker.backend.calls["list_labelled"] - listed == 2  # us-central1 and us-east1


def test_a_stray_left_in_a_region_the_job_moved_from_is_cancelled_by_the_tick(
    intake, tracker, clock, post_event
):
    give_up_spot(tracker, clock, post_event)
    assert tick(post_event, clock) == 200
    second = current(tracker)["vertexJob"]
    assert f"/locations/{OTHER}/" in second
    # A job of attempt 2 in the request's location, which no record follows (a create that
    # landed there from a delivery that died): only a listing of that location finds it.
    stray = second.replace(OTHER, HOME)
    tracker.backend.jobs[stray] = dataclasses.replace(
        tracker.backend.jobs[second], name=stray, create_time=clock()
    )
    assert tick(post_event, clock) == 200
    assert stray in tracker.backend.cancels and second not in tracker.backend.cancels
    assert current(tracker)["vertexJob"] == second


def test_a_takeover_of_attempt_1_stays_in_the_request_location(
    intake, tracker, clock, post_event, monkeypatch
):
    # Intake's create lands in us-central1 but its answer is lost: the record stays ACCEPTED
    # with no region recorded, and the tick takes attempt 1 over once the claim expires.
    tracker.backend.fail_after_create = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")
    post_event("handle_job_request", pubsub_cloud_event(regional_body()))
    tracker.backend.fail_after_create = None
    landed = [n for n in tracker.backend.jobs if f"/locations/{HOME}/" in n]
    assert len(landed) == 1

    # Were the region rule asked, it would move the attempt (and its lookup would miss the
    # job intake made): attempt 1 is never moved, so it is not asked.
    def moved(s, regions, prices_by_region=None):
        return RegionDecision(OTHER, attempts.decide(s), "moves (it must not be asked)")

    monkeypatch.setattr(attempts, "decide_across_regions", moved)
    assert tick(post_event, clock, tracker.settings.claim_ttl_seconds + 1) == 200

    record = current(tracker)
    assert record["attempt"] == 1 and record["vertexJob"] == landed[0]
    assert len(tracker.backend.created) == 1
    assert "regionChoice" not in record or record["regionChoice"] is None


@pytest.mark.parametrize(
    "refusal",
    [
        QuotaExhausted("CreateCustomJob: 429 custom_model_training_preemptible_nvidia_a100_gpus"),
        BackendRejected("400 NVIDIA_TESLA_A100 is not offered in us-east1"),
    ],
)
def test_a_create_refused_in_the_region_moved_to_goes_back_to_the_request_location(
    intake, tracker, clock, post_event, refusal
):
    give_up_spot(tracker, clock, post_event)
    # The retry moves to us-east1, where Vertex refuses the create (no quota there, or an
    # accelerator the region does not offer): no job was made there.
    tracker.backend.fail_with = refusal
    assert tick(post_event, clock) == 200
    tracker.backend.fail_with = None
    record = current(tracker)
    assert record["state"] == "RETRYING" and record["attempt"] == 1
    assert record["regionChoice"]["attempt"] == 2
    assert record["regionChoice"]["location"] == HOME
    assert record["regionChoice"]["reason"].startswith(f"refused in {OTHER}, back to {HOME}")
    assert len(tracker.backend.created) == 1  # attempt 1 only

    # The next tick creates attempt 2 in the request's own region: the job is neither failed
    # nor parked for ever in a region that cannot run it.
    assert tick(post_event, clock, 1) == 200
    record = current(tracker)
    assert record["attempt"] == 2 and record["state"] != "FAILED"
    assert f"/locations/{HOME}/" in record["vertexJob"]
    assert record["location"] == HOME
    assert len(tracker.backend.created) == 2
    assert record["regionsRefused"] == [OTHER]

    # Attempt 2 waits in vain at home too; a fresh region would look cheaper, but the one
    # that refused is never chosen again: attempt 3 stays in the request's location.
    assert record["capacity"].get("waitUntil")
    assert tick(post_event, clock, wait_until(tracker) + 1) == 200
    assert tick(post_event, clock) == 200
    record = current(tracker)
    assert record["attempt"] == 3
    assert f"/locations/{HOME}/" in record["vertexJob"]
    (request, _labels) = tracker.backend.created[-1]
    assert request.location == HOME


def test_a_cancel_while_a_move_is_in_flight_ends_the_job_made_in_the_new_region(
    intake, tracker, clock, post_event, monkeypatch
):
    give_up_spot(tracker, clock, post_event)
    create = tracker.backend.create

    event = pubsub_cloud_event({"cancel": SEED}, message_id="cancel-in-flight")

    def cancelled_first(request, labels, location, **kwargs):
        # The cancel lands after the retry recorded its region and claimed the attempt, and
        # before its create: it can only mark the record (the claim is live), and asks for
        # redelivery.
        if location == OTHER:
            record = current(tracker)
            assert record["regionChoice"]["location"] == OTHER
            assert OTHER in record["locationsUsed"]
            assert post_event("handle_job_request", event).status_code == 500
            assert current(tracker)["cancelRequested"] is True
        return create(request, labels, location, **kwargs)

    monkeypatch.setattr(tracker.backend, "create", cancelled_first)
    assert tick(post_event, clock) == 200
    assert post_event("handle_job_request", event).status_code == 200  # the redelivery

    record = current(tracker)
    moved = [n for n in tracker.backend.jobs if f"/locations/{OTHER}/" in n]
    # The create in the new region happened, and its job is cancelled: the record will not
    # take a job after its cancel, and nothing is left running in either region.
    assert len(moved) == 1 and moved[0] in tracker.backend.cancels
    assert record["state"] == "CANCELLED"
    live = [
        job
        for job in tracker.backend.jobs.values()
        if job.name not in tracker.backend.cancels and not job.state.endswith("CANCELLED")
    ]
    assert live == []
    # A later tick finds nothing to do in either region.
    assert tick(post_event, clock) == 200
    assert current(tracker)["state"] == "CANCELLED"
