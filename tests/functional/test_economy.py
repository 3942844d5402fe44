"""Call counts per scenario, pinned: a later change cannot quietly add a Vertex call or a
Firestore round trip. The job stores' fakes count each call on their shared database
(tests/fakes/jobs.py: ``calls`` per method, and ``ops`` as Firestore bills them: reads, writes,
queries); ``./dev bench economy`` counts the
same scenarios over gRPC against the emulator and the simulator.
"""

from __future__ import annotations

from collections import Counter

import pytest

from shared.domain.model.watch import MAX_SHARDS
from tests.events import load, pubsub_cloud_event
from tests.functional.test_lifecycle_handlers import (
    CHECKPOINTS,
    PREEMPTED,
    current,
    end,
    hint,
    run,
    submit,
    tick,
)


def reset(tracker) -> None:
    tracker.jobs.job_store.database.calls.clear()
    tracker.jobs.job_store.database.ops.clear()
    tracker.backend.calls.clear()


def counted(tracker) -> tuple[Counter[str], Counter[str]]:
    """Firestore operations and Vertex calls since :func:`reset` (taken before the test reads
    the record itself, which the fake would count too)."""
    return +tracker.jobs.job_store.database.ops, +tracker.backend.calls


def test_a_fresh_request_costs_one_vertex_call_and_two_writes(tracker, post_event):
    reset(tracker)
    submit(post_event)
    firestore, vertex = counted(tracker)

    assert current(tracker)["state"] == "QUEUED"
    # The claim created the record, so nothing can exist under its labels: no lookup.
    assert vertex == Counter(create=1)
    # One read (is it recorded?), the claim (a conditional create), the submission (decided
    # on the record as created, guarded by its version).
    assert firestore == Counter(read=1, write=2)


def test_a_duplicate_delivery_costs_one_read_and_no_vertex_call(tracker, post_event):
    submit(post_event)
    reset(tracker)

    submit(post_event)
    firestore, vertex = counted(tracker)

    assert vertex == Counter()
    assert firestore == Counter(read=1)


def test_a_hinted_state_change_costs_one_query_two_writes_and_one_vertex_read(
    tracker, clock, post_event
):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    reset(tracker)

    assert hint(post_event, clock, name) == 200
    firestore, vertex = counted(tracker)

    assert current(tracker)["state"] == "RUNNING"
    assert vertex == Counter(get=1)
    # The query finds and reads the record; the read lease and the settle are one write each.
    assert firestore == Counter(query=1, write=2)


def test_a_job_life_with_two_hinted_changes_costs_two_more_vertex_calls(tracker, clock, post_event):
    reset(tracker)
    submit(post_event)
    name = next(iter(tracker.backend.jobs))  # the one job intake created
    run(tracker, clock, name)
    assert hint(post_event, clock, name) == 200
    end(tracker, clock, name, "JOB_STATE_SUCCEEDED")
    assert hint(post_event, clock, name) == 200
    firestore, vertex = counted(tracker)

    assert current(tracker)["state"] == "SUCCEEDED"
    assert vertex == Counter(create=1, get=2)
    # Intake 1 read + 2 writes; each hint 1 query + 2 writes; the end's notification is
    # forgotten from the outbox with one more write (decided on the settled record).
    assert firestore == Counter(read=1, write=7, query=2)


def test_a_preemption_and_its_retry_cost_at_most_eight_firestore_operations(
    tracker, clock, post_event
):
    submit(post_event)
    name = current(tracker)["vertexJob"]
    run(tracker, clock, name)
    assert hint(post_event, clock, name) == 200
    tracker.checkpoints.commit(CHECKPOINTS, 100, clock.advance(600))
    end(tracker, clock, name, "JOB_STATE_FAILED", PREEMPTED, code=14)
    listings = len(tracker.checkpoints.asked)
    reset(tracker)

    assert hint(post_event, clock, name) == 200
    ops, vertex = counted(tracker)

    assert (current(tracker)["state"], current(tracker)["attempt"]) == ("QUEUED", 2)
    assert vertex == Counter(get=1, create=1)  # the retry's claim is its first
    assert len(tracker.checkpoints.asked) == listings + 1  # one checkpoint listing
    # query; lease, settle, outbox, claim, attempt 1's work lost, the submission; attempt 1
    # read for what it resumed from and how long it ran.
    assert ops == Counter(query=1, write=6, read=1)
    assert sum(ops.values()) <= 8


@pytest.mark.parametrize("active", [1, 25])
def test_a_tick_over_active_jobs_reads_each_once_and_lists_once(tracker, clock, post_event, active):
    for n in range(active):
        body = load("seed_request")
        body["requestId"] = f"tick-{n}"
        response = post_event("handle_job_request", pubsub_cloud_event(body))
        assert response.status_code == 200
    reset(tracker)

    # The first tick builds its watch list: each active record read once (and the newest
    # jobs, the same records, for the status page's first page).
    assert tick(post_event, clock) == 200
    firestore, vertex = counted(tracker)
    # One paged listing per location (the fake's listing is one call), no Vertex read.
    assert vertex == Counter(list_labelled=1)
    # Six queries (due, active, the week's ended, the newest, outboxes, pending cancels);
    # nothing changed, so nothing written and no record read again: each settle decided on
    # the queried record. The list and its tally: one batch get, one batch write.
    watch = 2 + MAX_SHARDS  # the head, the tally and every shard the list may have
    assert firestore == Counter(query=6, returned=2 * active, watch_read=watch, watch_write=watch)
    assert tracker.jobs.job_store.database.calls["active"] == 1

    # A steady tick reads no record: the list, what changed since it (nothing), a count.
    reset(tracker)
    assert tick(post_event, clock) == 200
    firestore, vertex = counted(tracker)
    assert vertex == Counter(list_labelled=1)
    # Five queries (due, changed since the mark, the active count, outboxes, pending
    # cancels), none returning a record; the list unchanged, only the tally is saved.
    assert firestore == Counter(query=5, watch_read=watch, watch_write=2)
    assert tracker.jobs.job_store.database.calls["active"] == 0
