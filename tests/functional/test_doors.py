"""Issue 20's findings, each shown through the real entry points on the in-memory fakes, with
the interleaving controlled: a crash between create and record with the message's
deliveries used up, an adopted job of another decision, an AUTO record with no deadline left,
identities past their byte bounds, a decoder that fails for a reason nobody foresaw, a retry
whose checkpoint listing is cut short, and a trailing hint reader killed while it waits.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.pubsub import PubsubNotifier
from shared.domain.model.checkpoint import Checkpoint
from shared.kernel.config import Settings
from shared.kernel.errors import OutcomeUnknown
from tests.events import load, published_at, pubsub_cloud_event
from tests.fakes import MAX_DOCUMENT_BYTES, crash_on_next_record, document_size
from tests.functional.test_lifecycle_handlers import (
    CHECKPOINTS,
    JOB_HINT,
    PREEMPTED,
    SEED,
    STEP_SECONDS,
    auto_body,
    current,
    end,
    env_of,
    hint,
    hint_body,
    run,
    submit,
    submit_auto,
    tick,
)
from tests.functional.test_trust import cancel, deliver, request_seed

# --- 3: a crash between create and record leaves no job untracked ------------------------


def test_a_job_created_before_a_crash_is_adopted_by_the_tick_after_its_deliveries_ran_out(
    tracker, clock, post_event
):
    crash_on_next_record(tracker.jobs)  # the delivery dies between create and record
    with pytest.raises(KeyboardInterrupt):
        request_seed(post_event)
    (name,) = tracker.backend.jobs
    # Every redelivery inside the claim's TTL finds it held, and the message runs out of its
    # deliveries (max_delivery_attempts 5): dead-lettered, never delivered again.
    for _ in range(4):
        clock.advance(10)
        assert request_seed(post_event) == 500
    assert current(tracker)["state"] == "ACCEPTED"

    assert tick(post_event, clock, 1) == 200  # the claim still holds: the tick waits too
    assert current(tracker)["vertexJob"] is None

    clock.advance(tracker.settings.claim_ttl_seconds)
    assert tick(post_event, clock, 1) == 200

    record = current(tracker)
    assert (record["state"], record["vertexJob"]) == ("QUEUED", name)
    assert len(tracker.backend.created) == 1  # looked up by its labels, adopted
    assert "nextAttemptAt" not in record and "claim" not in record
    assert tick(post_event, clock) == 200  # and nothing more happens to it
    assert len(tracker.backend.created) == 1


def test_a_request_claimed_and_never_created_is_created_by_the_tick(tracker, clock, post_event):
    tracker.backend.fail_with = KeyboardInterrupt("the delivery dies before its create")
    with pytest.raises(KeyboardInterrupt):
        request_seed(post_event)
    tracker.backend.fail_with = None
    assert not tracker.backend.jobs

    clock.advance(tracker.settings.claim_ttl_seconds + 1)
    assert tick(post_event, clock, 1) == 200

    (name,) = tracker.backend.jobs
    assert current(tracker)["vertexJob"] == name
    assert tracker.backend.calls["find"] == 1  # the claim was not fresh: it looked first


def test_a_cancel_of_a_request_the_tick_would_take_over_wins(tracker, clock, post_event):
    crash_on_next_record(tracker.jobs)
    with pytest.raises(KeyboardInterrupt):
        request_seed(post_event)
    (name,) = tracker.backend.jobs
    clock.advance(tracker.settings.claim_ttl_seconds + 1)
    assert cancel(post_event) == 200
    assert tick(post_event, clock, 1) == 200

    assert current(tracker)["state"] == "CANCELLED"
    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLED"
    assert len(tracker.backend.created) == 1


# --- 4: a record says what Vertex runs --------------------------------------------------


def test_an_adopted_auto_job_is_recorded_with_the_strategy_it_runs_on(
    intake, tracker, clock, post_event
):
    tracker.backend.fail_after_create = OutcomeUnknown("CreateCustomJob: 504 deadline exceeded")
    event = pubsub_cloud_event(auto_body())
    assert post_event("handle_job_request", event).status_code == 500
    (name,) = tracker.backend.jobs
    # What the first delivery chose is what Vertex runs. The redelivery, 400 s later, would
    # choose again from its own time; stand for a choice that differs by running it on SPOT
    # after a FLEX_START decision, or FLEX_START (waiting 2,295 s) after a SPOT one.
    first = tracker.backend.jobs[name].strategy
    runs_on, wait = ("SPOT", None) if first != "SPOT" else ("FLEX_START", 2295.0)
    tracker.backend.update(name, strategy=runs_on, max_wait_seconds=wait)

    clock.advance(400)
    assert post_event("handle_job_request", event).status_code == 200

    record = current(tracker)
    assert record["vertexJob"] == name and len(tracker.backend.created) == 1
    assert record["strategy"] == runs_on
    assert record["maxWaitSeconds"] == (None if wait is None else int(wait))
    assert record["capacity"]["strategy"] == runs_on
    assert record["capacity"]["reason"].startswith("adopted the job an earlier delivery created")
    assert tracker.jobs.get_attempt(SEED, 1)["strategy"] == runs_on


# --- 10: AUTO's fallback to STANDARD is final -------------------------------------------


def test_an_auto_record_without_its_deadline_runs_on_demand_and_is_never_given_up(
    intake, tracker, clock, post_event
):
    first = submit_auto(intake, tracker, post_event)
    run(tracker, clock, first)
    assert hint(post_event, clock, first) == 200
    # Its deadline fields can no longer be read (a hand-edited record), then it is preempted.
    stored = tracker.jobs.job_store.database.jobs[SEED]
    stored["options"] = json.dumps({"checkpointUri": CHECKPOINTS})
    end(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED, code=14)
    assert hint(post_event, clock, first) == 200

    record = current(tracker)
    assert (record["attempt"], record["strategy"]) == (2, "STANDARD")
    assert record["capacity"]["final"] is True and record["capacity"]["waitUntil"] is None
    # Queued for a long while: before, each tick gave the fresh on-demand job up again.
    for _ in range(12):
        assert tick(post_event, clock) == 200
    assert len(tracker.backend.created) == 2
    assert tracker.backend.cancels == []


# --- 5: bounded identities --------------------------------------------------------------


def test_a_request_id_over_its_byte_bound_is_a_recorded_rejection(intake, tracker, post_event):
    body = load("seed_request")
    body["requestId"] = "r" * 160_000  # 160 KB: it once made the record pass 1 MiB
    assert deliver(post_event, body) == 200

    assert not tracker.jobs.job_store.database.jobs and not tracker.backend.created
    (rejection_id, rejection), *_ = intake.rejections.documents.items()
    assert rejection_id.startswith("trust-")  # the message id: the requestId is not kept
    assert rejection["errors"][0]["path"] == "requestId"
    assert "at most 1500" in rejection["errors"][0]["message"]
    assert intake.notifier.messages[-1]["requestId"] == rejection_id


def test_a_request_id_of_1500_multibyte_bytes_stays_bounded_through_many_preemptions(
    tracker, clock, post_event
):
    request_id = "é" * 750  # 1,500 bytes, 750 characters
    body = load("seed_request")
    body.update(requestId=request_id, retryPolicy={"preemption": 12})
    body["customJob"]["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": "gs://ck-b/r"}
    assert deliver(post_event, body) == 200
    for _ in range(12):  # the fake refuses a document over 1 MiB, as Firestore does
        name = tracker.jobs.job_store.database.jobs[request_id]["vertexJob"]
        run(tracker, clock, name)
        end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED, code=14)
        assert hint(post_event, clock, name) == 200
    record = tracker.jobs.job_store.database.jobs[request_id]
    assert record["attempt"] == 13
    assert document_size("jobs/x", record) < MAX_DOCUMENT_BYTES // 8


class _Publisher:
    """The Pub/Sub publisher client's surface the notifier uses, refusing what Pub/Sub does."""

    def __init__(self) -> None:
        self.attributes: list[dict[str, str]] = []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
        for value in attributes.values():
            if len(value.encode()) > 1024:
                raise ValueError("attribute value too long")  # the client refuses it first
        self.attributes.append(attributes)
        return self

    def result(self, timeout: float) -> str:
        return "1"


def test_a_notification_attribute_is_cut_by_bytes():
    publisher = _Publisher()
    notifier = PubsubNotifier(Settings(project="p"), client=publisher)
    notifier.notify({"requestId": "é" * 750, "state": "REJECTED"})  # 750 characters
    (attributes,) = publisher.attributes
    assert len(attributes["requestId"].encode()) <= 1024
    assert "é" * 500 in attributes["requestId"]


# --- 2: a decoder that fails for any reason refuses, never loops ------------------------


def test_an_unexpected_failure_reading_a_message_is_a_recorded_rejection(
    intake, post_event, monkeypatch
):
    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr("shared.domain.request.reading.parse_request", exhausted)
    assert deliver(post_event, load("seed_request")) == 200  # acknowledged, never redelivered
    (rejection,) = intake.rejections.documents.values()
    assert rejection["errors"] == [
        {"path": "$", "message": "the message could not be read (MemoryError)"}
    ]
    assert intake.notifier.messages[-1]["state"] == "REJECTED"


# --- 6: a retry never resumes from less than the record names ---------------------------


def preempted_after_checkpoints(tracker, clock, post_event, monkeypatch, *, keep: bool) -> str:
    """A job that recorded step 900 as it ran, whose retry's listing (cut short by its bounds,
    as 50 unmarked higher step directories cut it) finds only step 100."""
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    assert hint(post_event, clock, name) == 200
    older = tracker.checkpoints.commit(CHECKPOINTS, 100, clock.advance(60))
    newer = tracker.checkpoints.commit(CHECKPOINTS, 900, clock.advance(60))
    tracker.jobs.record_checkpoint(SEED, newer, clock())  # what its upload recorded
    if not keep:
        tracker.checkpoints.objects["flexjobs-test"] = {
            key: info
            for key, info in tracker.checkpoints.objects["flexjobs-test"].items()
            if "step-00000900" not in key
        }
    monkeypatch.setattr(tracker.checkpoints, "latest", lambda prefix, not_before=None: older)
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED, code=14)
    assert hint(post_event, clock, name) == 200
    return env_of(tracker.backend.created[1])["FLEXJOBS_RESUME_FROM"]


def test_a_cut_off_listing_resumes_from_the_newer_checkpoint_the_record_names(
    tracker, clock, post_event, monkeypatch
):
    resumed = preempted_after_checkpoints(tracker, clock, post_event, monkeypatch, keep=True)
    assert resumed == f"{CHECKPOINTS}step-00000900/"
    assert tracker.checkpoints.confirmed == [f"{CHECKPOINTS}step-00000900/"]


def test_a_recorded_checkpoint_that_is_gone_is_not_resumed_from(
    tracker, clock, post_event, monkeypatch
):
    resumed = preempted_after_checkpoints(tracker, clock, post_event, monkeypatch, keep=False)
    assert resumed == f"{CHECKPOINTS}step-00000100/"


def test_the_listings_own_newer_checkpoint_needs_no_confirmation(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    tracker.jobs.record_checkpoint(
        SEED, Checkpoint(f"{CHECKPOINTS}step-00000100/", 100, clock()), clock()
    )
    tracker.checkpoints.commit(CHECKPOINTS, 200, clock.advance(60))
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED, code=14)
    assert hint(post_event, clock, name) == 200
    assert env_of(tracker.backend.created[1])["FLEXJOBS_RESUME_FROM"].endswith("step-00000200/")
    assert tracker.checkpoints.confirmed == []


# --- 12: the promise of a trailing read is held by its delivery -------------------------


def test_a_trailing_reader_killed_while_it_waits_reads_when_redelivered(
    tracker, clock, post_event, monkeypatch
):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    assert hint(post_event, clock, name) == 200  # a read
    run(tracker, clock, name)
    clock.advance(1)
    assert hint_at(post_event, clock, name, "h-2").status_code == 200  # the window's second
    assert len(tracker.backend.reads) == 2

    def killed(seconds: float) -> None:
        raise KeyboardInterrupt("the function instance is killed while the reader waits")

    # The third hint of the window becomes its trailing reader; it dies waiting. Meanwhile
    # Vertex preempts the job.
    monkeypatch.setattr(tracker, "sleep", killed)
    clock.advance(1)
    event = hint_event(clock, name, "h-3")
    with pytest.raises(KeyboardInterrupt):
        post_event("handle_job_event", event)
    assert current(tracker)["hintPending"] is True
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED, code=14)

    # Pub/Sub redelivers the killed delivery a second later, inside the window: it is the
    # holder of the promise, so it reads, rather than find the read promised and leave.
    monkeypatch.setattr(tracker, "sleep", clock.advance)
    clock.advance(1)
    assert post_event("handle_job_event", event).status_code == 200
    assert len(tracker.backend.reads) == 3
    record = current(tracker)
    assert record["attempt"] == 2  # it saw the preemption: the retry is on its way
    assert not record.get("hintPending") and "hintHolder" not in record


def test_another_hint_inside_the_window_still_leaves_the_read_to_its_holder(
    tracker, clock, post_event, monkeypatch
):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    assert hint(post_event, clock, name) == 200
    clock.advance(1)
    assert hint_at(post_event, clock, name, "h-2").status_code == 200
    waiting: list[Any] = []

    def sleep(seconds: float) -> None:
        # While the holder waits, a copy of the hint comes: promised, so it reads nothing.
        waiting.append(post_event("handle_job_event", hint_event(clock, name, "h-4")))
        clock.advance(seconds)

    monkeypatch.setattr(tracker, "sleep", sleep)
    clock.advance(1)
    assert post_event("handle_job_event", hint_event(clock, name, "h-3")).status_code == 200
    assert [r.status_code for r in waiting] == [200]
    assert len(tracker.backend.reads) == 3  # two, then one trailing read for the window


def hint_event(clock, name: str, message_id: str) -> Any:
    """A hint about ``name`` published now, as message ``message_id``."""
    event = pubsub_cloud_event(hint_body(JOB_HINT, name), message_id=message_id)
    return published_at(event, clock.now - timedelta(seconds=0.5))


def hint_at(post_event, clock, name: str, message_id: str) -> Any:
    return post_event("handle_job_event", hint_event(clock, name, message_id))


# --- the tick reads its records narrow ---------------------------------------------------


def test_a_steady_tick_reads_no_record_and_a_changed_job_is_read_whole(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    tracker.jobs.job_store.database.jobs[SEED]["request"] = json.dumps({"big": "x" * 200_000})
    assert tick(post_event, clock) == 200
    reads = tracker.jobs.job_store.database.ops["read"]
    assert tick(post_event, clock) == 200
    assert tracker.jobs.job_store.database.ops["read"] == reads  # nothing changed: no record read

    run(tracker, clock, name)
    assert tick(post_event, clock, STEP_SECONDS) == 200
    assert tracker.jobs.job_store.database.ops["read"] == reads + 1  # the changed one, read whole
    assert current(tracker)["state"] == "RUNNING"
    assert dataclasses.is_dataclass(tracker.settings)


# --- found by review: each door once more -----------------------------------------------


def test_a_slot_template_cannot_grow_the_checkpoint_uri_past_its_bound(intake, tracker, post_event):
    body = load("seed_request")
    body.update(requestId="s-{slot}", schedule={"slotSeconds": 60})
    body["checkpointUri"] = "gs://ck-b/" + "{slot}" * 40_000  # 240 KB, 640 KB once expanded
    assert deliver(post_event, body) == 200  # refused and recorded, never redelivered
    (rejection,) = intake.rejections.documents.values()
    assert rejection["errors"][0]["path"] == "checkpointUri"
    assert "Cloud Storage allows 1024" in rejection["errors"][0]["message"]
    assert not tracker.jobs.job_store.database.jobs


def test_a_request_id_with_a_lone_surrogate_is_a_recorded_rejection(intake, post_event):
    text = json.dumps({**load("seed_request"), "requestId": "PLACEHOLDER"})
    data = text.replace("PLACEHOLDER", "r-\\ud800").encode()
    assert (
        post_event("handle_job_request", pubsub_cloud_event(data, message_id="m-lone")).status_code
        == 200
    )
    (rejection,) = intake.rejections.documents.values()
    assert "not valid Unicode" in rejection["errors"][0]["message"]


def test_an_adopted_spot_job_under_a_final_decision_is_revisited(
    intake, tracker, clock, post_event
):
    tracker.backend.fail_after_create = OutcomeUnknown("CreateCustomJob: 504")
    event = pubsub_cloud_event(auto_body())
    assert post_event("handle_job_request", event).status_code == 500
    (name,) = tracker.backend.jobs
    assert tracker.backend.jobs[name].strategy == "SPOT"  # days of slack: attempt 1 on Spot
    # The redelivery comes when only on-demand fits (a final STANDARD decision), and adopts
    # the Spot job the first delivery made: nothing then bounded its wait.
    clock.advance((datetime(2026, 12, 3, 7, 50, tzinfo=UTC) - clock()).total_seconds())
    assert post_event("handle_job_request", event).status_code == 200
    record = current(tracker)
    assert record["vertexJob"] == name and record["strategy"] == "SPOT"
    assert record["capacity"]["final"] is False
    assert tick(post_event, clock) == 200  # still queued: given up, the policy chooses again
    assert tracker.backend.cancels == [name]
    assert tick(post_event, clock) == 200
    assert current(tracker)["strategy"] == "STANDARD" and current(tracker)["attempt"] == 2


def test_a_cancel_marked_under_a_dead_claim_is_finished_by_the_tick(tracker, clock, post_event):
    crash_on_next_record(tracker.jobs)
    with pytest.raises(KeyboardInterrupt):
        request_seed(post_event)
    (name,) = tracker.backend.jobs
    assert cancel(post_event) == 500  # the claim is live: cancelRequested marked, redelivery
    # ... which never comes (dead-lettered). The tick finishes the cancel once the claim dies.
    clock.advance(tracker.settings.claim_ttl_seconds + 1)
    assert tick(post_event, clock, 1) == 200
    assert current(tracker)["state"] == "CANCELLED"
    assert tracker.backend.jobs[name].state == "JOB_STATE_CANCELLED"
    assert "nextAttemptAt" not in current(tracker)
