"""Scheduled requests (Cloud Scheduler → the requests topic), through handle_job_request."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.app import handlers
from shared.app.commands import SubmitJob
from shared.app.services import intake as intake_service
from shared.domain.model.delivery import Delivery
from shared.kernel.errors import SubmissionInProgress
from tests.events import load, published_at, pubsub_cloud_event
from tests.functional.conftest import START

TEMPLATE = "nightly-{slot}"


def nightly(concurrency: str = "allow", slot_seconds: int = 86400, **extra) -> dict:
    body = load("seed_request")
    body["requestId"] = TEMPLATE
    body["schedule"] = {"slotSeconds": slot_seconds, "concurrency": concurrency}
    return {**body, **extra}


def fire(post_event, body: dict, at: str, message_id: str = "m"):
    """Deliver ``body`` as Cloud Scheduler would have published it at ``at``."""
    return post_event(
        "handle_job_request", pubsub_cloud_event(body, message_id=message_id, scheduleTime=at)
    )


def jobs(intake) -> dict[str, dict]:
    return dict(intake.jobs.job_store.database.jobs)


def test_three_publishes_in_one_slot_make_one_job(intake, post_event):
    for i, at in enumerate(("2026-11-28T02:00:00Z", "2026-11-28T02:00:30Z", "2026-11-28T09:00Z")):
        assert fire(post_event, nightly(), at, message_id=f"m{i}").status_code == 200
    assert list(jobs(intake)) == ["nightly-20261128T000000Z"]
    assert len(intake.backend.created) == 1
    record = jobs(intake)["nightly-20261128T000000Z"]
    assert record["series"] == TEMPLATE
    assert record["source"] == "pubsub"


def test_without_a_schedule_time_attribute_the_publish_time_decides(intake, post_event):
    event = pubsub_cloud_event(nightly(slot_seconds=3600))
    published_at(event, START)  # 12:00:05
    post_event("handle_job_request", event)
    assert list(jobs(intake)) == ["nightly-20261130T120000Z"]


def test_allow_runs_every_slot(intake, post_event):
    fire(post_event, nightly("allow"), "2026-11-28T02:00:00Z")
    fire(post_event, nightly("allow"), "2026-11-29T02:00:00Z")
    assert len(intake.backend.created) == 2


def test_forbid_skips_the_next_slot_while_the_first_is_active(intake, post_event):
    fire(post_event, nightly("forbid"), "2026-11-28T02:00:00Z")
    fire(post_event, nightly("forbid"), "2026-11-29T02:00:00Z")

    assert len(intake.backend.created) == 1
    skipped = jobs(intake)["nightly-20261129T000000Z"]
    assert skipped["state"] == "SKIPPED"
    assert skipped["reason"] == "nightly-20261128T000000Z"
    assert skipped["series"] == TEMPLATE
    assert skipped.get("vertexJob") is None
    note = intake.notifier.messages[-1]
    assert note == {
        "requestId": "nightly-20261129T000000Z",
        "state": "SKIPPED",
        "attempt": 0,
        "reason": "nightly-20261128T000000Z",
    }
    # A redelivery of the skipped slot stays skipped and publishes nothing more.
    sent = len(intake.notifier.messages)
    fire(post_event, nightly("forbid"), "2026-11-29T02:00:00Z")
    assert len(intake.backend.created) == 1 and len(intake.notifier.messages) == sent


def test_forbid_runs_the_next_slot_once_the_first_ended(intake, post_event):
    fire(post_event, nightly("forbid"), "2026-11-28T02:00:00Z")
    intake.jobs.job_store.database.jobs["nightly-20261128T000000Z"]["state"] = "SUCCEEDED"
    fire(post_event, nightly("forbid"), "2026-11-29T02:00:00Z")
    assert len(intake.backend.created) == 2
    assert jobs(intake)["nightly-20261129T000000Z"]["state"] == "QUEUED"


def test_replace_cancels_the_active_run_and_starts_the_new_slot(intake, post_event):
    fire(post_event, nightly("replace"), "2026-11-28T02:00:00Z")
    first = jobs(intake)["nightly-20261128T000000Z"]["vertexJob"]

    assert fire(post_event, nightly("replace"), "2026-11-29T02:00:00Z").status_code == 200

    assert jobs(intake)["nightly-20261128T000000Z"]["state"] == "CANCELLED"
    assert intake.backend.cancels == [first]
    assert intake.backend.jobs[first].state == "JOB_STATE_CANCELLED"
    assert jobs(intake)["nightly-20261129T000000Z"]["state"] == "QUEUED"
    assert len(intake.backend.created) == 2


def test_a_late_older_slot_never_runs_after_a_newer_one(intake, post_event):
    fire(post_event, nightly("replace"), "2026-11-29T02:00:00Z")
    fire(post_event, nightly("replace"), "2026-11-28T02:00:00Z")  # delayed delivery
    assert jobs(intake)["nightly-20261128T000000Z"]["state"] == "SKIPPED"
    assert jobs(intake)["nightly-20261128T000000Z"]["reason"] == "nightly-20261129T000000Z"
    assert jobs(intake)["nightly-20261129T000000Z"]["state"] == "QUEUED"
    assert intake.backend.cancels == []


def _message(body: dict, at: str) -> SubmitJob:
    import json

    data = json.dumps(body).encode()
    return SubmitJob(message=Delivery(data, "m", attributes={"scheduleTime": at}))


def test_a_slot_waits_while_the_series_holder_is_between_take_and_claim(intake):
    """Interleaving: slot 1 takes the series, then its delivery dies before its claim.

    Slot 2 must neither run beside it nor skip on a request that may never exist: it is
    redelivered while a claim could still be alive, and takes the series once it cannot.
    """
    first = _message(nightly("forbid"), "2026-11-28T02:00:00Z")
    request = intake_service.read_command(first, intake).request
    assert request.slot is not None
    intake.jobs.take_turn(request, request.slot, intake.clock(), 120)  # ...and then it died

    second = _message(nightly("forbid"), "2026-11-29T02:00:00Z")
    with pytest.raises(SubmissionInProgress):
        handlers.submit_job(second, intake)
    assert not intake.backend.created

    later = intake.clock() + timedelta(seconds=121)
    intake.clock = lambda: later
    assert handlers.submit_job(second, intake).value == "submitted"
    assert list(jobs(intake)) == ["nightly-20261129T000000Z"]
    # The first slot, redelivered at last, is stale now: it never runs after the second.
    assert handlers.submit_job(first, intake).value == "skipped"
    assert len(intake.backend.created) == 1


def test_two_slots_racing_never_both_run(intake):
    """Interleaving: slot 2's decision runs between slot 1's take and slot 1's claim."""
    import threading

    one = _message(nightly("forbid"), "2026-11-28T02:00:00Z")
    two = _message(nightly("forbid"), "2026-11-29T02:00:00Z")
    taken = threading.Event()
    proceed = threading.Event()
    original = intake.jobs.take_turn

    def take_then_pause(request, slot, now, ttl):
        made = original(request, slot, now, ttl)
        if request.request_id.endswith("20261128T000000Z"):
            taken.set()
            proceed.wait(5)
        return made

    intake.jobs.take_turn = take_then_pause  # type: ignore[method-assign]
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(handlers.submit_job(one, intake)))
    worker.start()
    assert taken.wait(5)
    with pytest.raises(SubmissionInProgress):
        handlers.submit_job(two, intake)
    proceed.set()
    worker.join(5)
    assert [r.value for r in results] == ["submitted"]
    assert handlers.submit_job(two, intake).value == "skipped"
    assert len(intake.backend.created) == 1


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"schedule": None, "requestId": "nightly-{slot}"}, "requestId"),
        ({"requestId": "nightly"}, "schedule"),
        ({"schedule": {"slotSeconds": 0}}, "schedule.slotSeconds"),
        ({"schedule": {"concurrency": "sometimes"}}, "schedule.concurrency"),
        ({"schedule": {"slotSeconds": "60"}}, "schedule.slotSeconds"),
        ({"schedule": {"every": 60}}, "schedule.every"),
    ],
)
def test_schedule_mistakes_are_refused_clearly(intake, post_event, change, path):
    body = {**nightly(), **change}
    if body.get("schedule") is None:
        body.pop("schedule")
    fire(post_event, body, "2026-11-28T02:00:00Z")
    assert not intake.backend.created
    (rejection,) = intake.rejections.documents.values()
    assert path in [e["path"] for e in rejection["errors"]]


def test_an_unreadable_schedule_time_is_refused(intake, post_event):
    fire(post_event, nightly(), "last tuesday")
    (rejection,) = intake.rejections.documents.values()
    assert [e["path"] for e in rejection["errors"]] == ["scheduleTime"]


def test_a_schedule_time_in_the_future_is_refused(intake, post_event):
    fire(post_event, nightly("forbid"), "2036-01-01T02:00:00Z")
    assert not intake.backend.created and not jobs(intake)
    (rejection,) = intake.rejections.documents.values()
    assert [e["path"] for e in rejection["errors"]] == ["scheduleTime"]


def test_a_backfill_runs_once_the_series_is_idle(intake, post_event):
    fire(post_event, nightly("forbid"), "2026-11-29T02:00:00Z")
    intake.jobs.job_store.database.jobs["nightly-20261129T000000Z"]["state"] = "SUCCEEDED"
    fire(post_event, nightly("forbid"), "2026-11-27T02:00:00Z")
    assert jobs(intake)["nightly-20261127T000000Z"]["state"] == "QUEUED"
    assert len(intake.backend.created) == 2


def test_each_slot_checkpoints_under_its_own_prefix(intake, post_event):
    body = nightly("replace", checkpointUri="gs://bkt/nightly/{slot}/")
    fire(post_event, body, "2026-11-28T02:00:00Z")
    record = jobs(intake)["nightly-20261128T000000Z"]
    assert record["checkpointPrefix"] == "gs://bkt/nightly/20261128T000000Z/"


def test_slot_in_a_checkpoint_uri_needs_a_schedule(intake, post_event):
    body = {**load("seed_request"), "checkpointUri": "gs://bkt/n/{slot}/"}
    post_event("handle_job_request", pubsub_cloud_event(body))
    (rejection,) = intake.rejections.documents.values()
    assert [e["path"] for e in rejection["errors"]] == ["checkpointUri"]


def test_a_skipped_slot_expires(intake, post_event):
    fire(post_event, nightly("forbid"), "2026-11-28T02:00:00Z")
    fire(post_event, nightly("forbid"), "2026-11-29T02:00:00Z")
    skipped = jobs(intake)["nightly-20261129T000000Z"]
    assert skipped["expireAt"] - skipped["endedAt"] == timedelta(days=7)
