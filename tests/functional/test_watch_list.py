"""The tick's watch list through the handlers, on the fakes (issue 26): what brings it back to
the records when it drifted, and what the status page takes from its tally.

The fakes stamp every write they make; a test that edits the database's ``jobs`` directly
writes as a hand edit (or an older revision) would: no stamp, no version.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import timedelta

from shared.app.services.tick import STRAY_WATCH
from shared.app.steps.watch import MAX_GAP, watched
from shared.domain.model import watch as watches
from shared.domain.model.tally import decode
from tests.events import load, pubsub_cloud_event
from tests.functional.test_lifecycle_handlers import SEED, current, end, run, submit, tick


def saved_list(tracker) -> watches.Watch:
    store = tracker.jobs.job_store.database
    found = watches.decode(store.watch_shards)
    assert found is not None
    return found


def submit_as(post_event, request_id: str) -> None:
    body = load("seed_request")
    body["requestId"] = request_id
    assert post_event("handle_job_request", pubsub_cloud_event(body)).status_code == 200


def test_a_record_changed_by_hand_out_of_the_active_ones_is_read_again(tracker, clock, post_event):
    submit(post_event)
    submit_as(post_event, "other")
    assert tick(post_event, clock) == 200
    assert set(saved_list(tracker).active) == {SEED, "other"}
    # By hand, no stamp: the count of active records now differs from the list's.
    tracker.jobs.job_store.database.jobs["other"]["state"] = "CANCELLED"
    assert tick(post_event, clock) == 200
    assert set(saved_list(tracker).active) == {SEED}
    assert tracker.jobs.job_store.database.watch_tally["active"] == {"QUEUED": 1}


def test_a_live_job_whose_record_the_list_missed_is_settled(tracker, clock, post_event):
    submit(post_event)
    submit_as(post_event, "gone-by-hand")
    assert tick(post_event, clock) == 200
    store = tracker.jobs.job_store.database
    # Unstamped, and the count unchanged: one active record deleted, one made, by hand.
    missed = copy.deepcopy(store.jobs["gone-by-hand"])
    del store.jobs["gone-by-hand"]
    name = current(tracker)["vertexJob"]
    twin = name.rsplit("/", 1)[0] + "/777"
    tracker.backend.jobs[twin] = dataclasses.replace(
        tracker.backend.jobs[name],
        name=twin,
        labels={**tracker.backend.jobs[name].labels, "flexjobs-request": "missed"},
    )
    missed.update(requestId="missed", runId="missed", vertexJob=twin, vertexJobId="777",
                  vertexJobIds=["777"])  # fmt: skip
    store.jobs["missed"] = missed
    store.versions["missed"] = 0
    run(tracker, clock, twin)
    assert tick(post_event, clock) == 200
    # Its job was listed live with no entry: its record was looked up and settled.
    assert store.jobs["missed"]["state"] == "RUNNING"


def test_a_job_deleted_in_vertex_fails_its_record_once(tracker, clock, post_event):
    submit(post_event)
    assert tick(post_event, clock) == 200
    name = current(tracker)["vertexJob"]
    del tracker.backend.jobs[name]  # deleted by hand: the listing no longer shows it
    assert tick(post_event, clock) == 200
    record = current(tracker)
    assert record["state"] == "FAILED" and "no longer exists" in record["reason"]
    reads = tracker.backend.calls["get"]
    assert tick(post_event, clock) == 200
    assert tracker.backend.calls["get"] == reads  # ended: not looked for again


def test_a_tick_after_a_long_gap_builds_the_list_again(tracker, clock, post_event):
    submit(post_event)
    assert tick(post_event, clock) == 200
    watch_store, job_store = tracker.jobs.watch_store, tracker.jobs.job_store
    assert watched(watch_store, job_store, clock.now, STRAY_WATCH).how == "synced"
    later = clock.now + MAX_GAP + timedelta(seconds=1)
    assert watched(watch_store, job_store, later, STRAY_WATCH).how == "built"


def test_an_end_the_list_held_active_is_tallied_whatever_its_time(tracker, clock, post_event):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    assert tick(post_event, clock) == 200
    # Vertex reports an end three hours back (a reading that came late).
    end(tracker, clock, name, "JOB_STATE_SUCCEEDED")
    tracker.backend.jobs[name] = dataclasses.replace(
        tracker.backend.jobs[name], end_time=clock.now - timedelta(hours=3)
    )
    assert tick(post_event, clock) == 200
    assert current(tracker)["state"] == "SUCCEEDED"
    assert tick(post_event, clock) == 200
    stored = decode(tracker.jobs.job_store.database.watch_tally)
    assert stored is not None
    assert stored.window(clock.now - timedelta(days=7)).jobs == 1
