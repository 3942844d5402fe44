"""The admission line against the interleavings an adversarial review of issue 41 found
(each reproduced first on the change, then fixed): the tick weighs the waiting records as they
are when it decides, not as its watch list read them; a line that drifted never ends a
request intake accepted; the tick's heal is not lost to a pass that saved meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.app.context import Intake, Tracker
from shared.app.services import admission
from shared.bootstrap import Ports
from tests.fakes import FakeClock
from tests.functional.test_admission import (
    QUEUES,
    body,
    preempting_wired,
    publish,
    record,
    wired,
)
from tests.functional.test_admission_line import database, saved_line
from tests.functional.test_lifecycle_handlers import tick


@pytest.fixture
def preempting(ports: Ports, clock: FakeClock, checkpoints: Any) -> Iterator[tuple[Tracker, Any]]:
    with preempting_wired(ports, clock, checkpoints) as both:
        yield both


@pytest.fixture
def queued(ports: Ports, clock: FakeClock) -> Iterator[tuple[Intake, Tracker]]:
    with wired(ports, clock, QUEUES) as both:
        yield both


def test_a_line_that_drifted_never_ends_a_request_intake_accepted(
    queued, post_event, clock, monkeypatch
):
    _, tracker = queued
    monkeypatch.setattr(admission, "MAX_WAITING_PER_QUEUE", 3)
    for n in range(4):  # a0 admitted; a1, a2, a3 wait: the queue is at its cap
        assert publish(post_event, clock, body(f"a{n}")) == 200
    assert tick(post_event, clock) == 200  # the line saved: a1 a2 a3
    db = database(tracker)
    # Two waiting records leave by writes that leave no stamp (a hand delete; an older
    # revision's cancel is the same to the line).
    with db.lock:
        del db.jobs["a1"]
        del db.jobs["a2"]
    assert tracker.jobs.admissions.count_waiting("team-a") == 1
    # Intake counts the records (1 < 3) and accepts a4; its pass weighs the stale line (4
    # entries), and ends nobody: only the tick ends what is past a cap, once a count agrees.
    assert publish(post_event, clock, body("a4")) == 200
    assert record(tracker, "a4")["state"] == "QUEUED"
    assert tick(post_event, clock) == 200
    assert record(tracker, "a4")["state"] == "QUEUED"
    assert saved_line(tracker) == ["a3", "a4"]


def test_the_tick_ends_what_is_past_a_cap_once_a_count_agrees(
    queued, post_event, clock, monkeypatch
):
    _, tracker = queued
    monkeypatch.setattr(admission, "MAX_WAITING_PER_QUEUE", 2)
    original = tracker.jobs.admissions.count_waiting
    # Two intakes raced past the count: the queue holds 3, one more than its cap.
    monkeypatch.setattr(tracker.jobs.admissions, "count_waiting", lambda queue: 0)
    for n in range(4):  # a0 admitted; a1, a2, a3 wait
        assert publish(post_event, clock, body(f"a{n}")) == 200
    assert [record(tracker, f"a{n}")["state"] for n in range(1, 4)] == ["QUEUED"] * 3
    monkeypatch.setattr(tracker.jobs.admissions, "count_waiting", original)
    assert tick(post_event, clock) == 200
    # The newest one ends, saying why; the others wait.
    assert [record(tracker, f"a{n}")["state"] for n in range(1, 4)] == [
        "QUEUED",
        "QUEUED",
        "FAILED",
    ]
    assert "came past the limit" in record(tracker, "a3")["reason"]


def test_the_tick_s_heal_is_kept_when_a_pass_saved_meanwhile(
    queued, post_event, clock, monkeypatch
):
    _, tracker = queued
    for n in range(4):  # a0 admitted; a1, a2, a3 wait
        assert publish(post_event, clock, body(f"a{n}")) == 200
    for n in range(10):  # b0 admitted; b1..b9 wait
        assert publish(post_event, clock, body(f"b{n}", "team-b")) == 200
    assert tick(post_event, clock) == 200
    db = database(tracker)
    with db.lock:
        del db.jobs["a1"]  # drift: only the tick can see it
    admissions = tracker.jobs.admissions
    rebuilt = admissions.rebuilt

    def rebuilt_then_a_busy_intake_pass(*args):
        found = rebuilt(*args)
        # Meanwhile intakes' passes run; one whose sync read SAVE_AFTER records saves.
        for i in range(admission.SAVE_AFTER):
            admissions.note_held(f"b{i + 1}", f"busy {i}", clock.now)
        admission.admit_waiting(tracker, tracker.queues, lambda rid: None)
        return found

    monkeypatch.setattr(admissions, "rebuilt", rebuilt_then_a_busy_intake_pass)
    assert tick(post_event, clock) == 200
    assert "a1" not in saved_line(tracker)  # the tick's line was written over the pass's


def test_the_tick_never_preempts_for_a_head_cancelled_since_its_watch_read(
    preempting, clock, post_event, monkeypatch
):
    from shared.app.services import tick as tick_module
    from tests.functional.test_admission import (
        checkpointing,
        save_checkpoint,
        start,
    )

    tracker, upload = preempting
    tracker.backend.cancel_lands = False
    for rid in ["low1", "low2"]:
        assert publish(post_event, clock, checkpointing(rid)) == 200
        start(post_event, clock, tracker, rid)
    # No checkpoint yet: nobody may be preempted, the urgent request waits.
    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    assert tracker.backend.cancels == []
    save_checkpoint(upload, clock, "low1", 100)
    save_checkpoint(upload, clock, "low2", 100)

    listings = tick_module._reconcile_listings

    def listings_then_the_user_cancels(*args):
        changed = listings(*args)
        # While the tick lists its locations, the user cancels the waiting request.
        assert publish(post_event, clock, {"cancel": "urgent"}) == 200
        return changed

    monkeypatch.setattr(tick_module, "_reconcile_listings", listings_then_the_user_cancels)
    assert tick(post_event, clock) == 200
    assert record(tracker, "urgent")["state"] == "CANCELLED"
    # Nobody is ended for a request that no longer waits (issue 41's review: the tick
    # weighed the waiting records as its watch list read them).
    assert tracker.backend.cancels == [], tracker.backend.cancels


def test_the_tick_never_preempts_for_a_head_its_own_listing_admitted(preempting, clock, post_event):
    from tests.functional.test_admission import (
        checkpointing,
        save_checkpoint,
        start,
    )
    from tests.functional.test_lifecycle_handlers import end

    tracker, upload = preempting
    tracker.backend.cancel_lands = False
    names = {}
    for rid in ["low1", "low2"]:
        assert publish(post_event, clock, checkpointing(rid)) == 200
        names[rid] = start(post_event, clock, tracker, rid)
    assert publish(post_event, clock, checkpointing("urgent", priority="high")) == 200
    assert tracker.backend.cancels == []  # no checkpoint yet: nobody may be preempted
    save_checkpoint(upload, clock, "low2", 100)
    # low1 succeeds in Vertex; no hint: the tick's listing finds it, settles it, gives
    # its GPUs back, and the release's pass admits urgent into them.
    end(tracker, clock, names["low1"], "JOB_STATE_SUCCEEDED")
    assert tick(post_event, clock) == 200
    assert record(tracker, "urgent")["admission"]["stage"] == "ADMITTED"
    # The tick's own pass weighs urgent as it is now (admitted), not as its watch list
    # read it: low2 is not preempted for GPUs nobody waits for.
    assert tracker.backend.cancels == [], tracker.backend.cancels
