"""The admission line kept between passes (issue 41, :mod:`shared.domain.admission.line`), end to
end on the fakes: a pass between ticks reads the saved line and the records stamped since its
mark, never every waiting record; the tick writes the line again from the watch list's active
records, which heals one that drifted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from shared.app.context import Intake, Tracker
from shared.app.services import admission
from shared.bootstrap import Ports
from shared.domain.admission.line import HEAD_KEPT
from shared.domain.model import watch as watches
from tests.fakes import FakeClock, InMemoryJobDatabase
from tests.functional.test_admission import QUEUES, body, finish, publish, wired
from tests.functional.test_lifecycle_handlers import tick


@pytest.fixture
def queued(ports: Ports, clock: FakeClock) -> Iterator[tuple[Intake, Tracker]]:
    """The admission tests' two queues, on the shared fakes and clock."""
    with wired(ports, clock, QUEUES) as both:
        yield both


def database(tracker: Tracker) -> InMemoryJobDatabase:
    db: InMemoryJobDatabase = tracker.jobs.job_store.database  # type: ignore[attr-defined]
    return db


def saved_line(tracker: Tracker) -> list[str]:
    """The requestIds of the line as last saved."""
    line = watches.decode(database(tracker).line_shards)
    assert line is not None
    return sorted(str(s.raw["requestId"]) for s in line.active.values())


def line_now(tracker: Tracker, clock: FakeClock) -> list[str]:
    """The requestIds of the line as a pass would read it now (saved, then synced)."""
    found = tracker.jobs.admissions.line(clock.now)
    assert found is not None
    return sorted(w.request_id for w in found.waiters())


def reads(ops: Counter[str]) -> int:
    """What Firestore bills as document reads in ``ops``: gets, documents a query returned,
    and each document of the line's batch get."""
    return ops["read"] + ops["returned"] + ops["line_read"]


def intake_cost(tracker: Tracker, post_event, clock, request_id: str) -> tuple[int, Counter[str]]:
    """The reads of one intake of a request that waits, and the store calls it made."""
    db = database(tracker)
    before, calls = Counter(db.ops), Counter(db.calls)
    assert publish(post_event, clock, body(request_id)) == 200
    assert tracker.jobs.job_store.get(request_id)["admission"]["stage"] == "WAITING"
    return reads(db.ops - before), db.calls - calls


def test_an_intake_s_pass_reads_the_line_not_the_waiting_records(queued, post_event, clock):
    _, tracker = queued
    for n in range(6):
        assert publish(post_event, clock, body(f"first-{n}")) == 200
    assert tick(post_event, clock) == 200  # writes the line from the watch list
    assert saved_line(tracker) == [f"first-{n}" for n in range(1, 6)]  # 1 admitted of 6

    short, calls = intake_cost(tracker, post_event, clock, "short-line")
    assert calls["waiting_admission"] == 0 and calls["line_changed_since"] == 1
    for n in range(40):
        assert publish(post_event, clock, body(f"more-{n}")) == 200
    assert tick(post_event, clock) == 200
    long, calls = intake_cost(tracker, post_event, clock, "long-line")
    assert calls["waiting_admission"] == 0

    # Ten times the line, the same reads: the line's documents, the records stamped since
    # its mark (the new one), the ledger and the count of its queue.
    assert long == short
    assert "long-line" in line_now(tracker, clock) and len(line_now(tracker, clock)) == 47


def test_a_cancelled_request_leaves_the_line_at_the_next_pass(queued, post_event, clock):
    _, tracker = queued
    for n in range(4):
        assert publish(post_event, clock, body(f"r{n}")) == 200
    assert tick(post_event, clock) == 200
    assert saved_line(tracker) == ["r1", "r2", "r3"]

    assert publish(post_event, clock, {"cancel": "r2"}) == 200
    assert tracker.jobs.job_store.get("r2")["state"] == "CANCELLED"
    assert publish(post_event, clock, body("r4")) == 200  # a pass between ticks
    assert line_now(tracker, clock) == ["r1", "r3", "r4"]
    # Not saved yet: a sync of a few records costs less than writing the line again.
    assert saved_line(tracker) == ["r1", "r2", "r3"]


def test_a_pass_saves_the_line_once_its_sync_reads_enough(queued, post_event, clock):
    _, tracker = queued
    assert publish(post_event, clock, body("r0")) == 200
    assert tick(post_event, clock) == 200
    assert saved_line(tracker) == []  # r0 was admitted: nothing waits
    names = [f"w{n}" for n in range(admission.SAVE_AFTER)]
    for name in names:
        assert publish(post_event, clock, body(name)) == 200
    # The last intake's pass read SAVE_AFTER records stamped since the tick's mark: it saved.
    assert saved_line(tracker) == sorted(names)


def test_the_tick_heals_a_line_that_drifted(queued, post_event, clock):
    _, tracker = queued
    for n in range(4):
        assert publish(post_event, clock, body(f"r{n}")) == 200
    assert tick(post_event, clock) == 200
    db = database(tracker)
    # A hand edit leaves no stamp: the record is gone, and no sync between ticks can know.
    with db.lock:
        del db.jobs["r3"]
        db.stamping = False
        db.written("r2")  # a write without its stamp (an older revision's)
        db.stamping = True
    assert publish(post_event, clock, body("r4")) == 200
    assert line_now(tracker, clock) == ["r1", "r2", "r3", "r4"]

    assert tick(post_event, clock) == 200  # from the watch list, which counts the records
    assert saved_line(tracker) == ["r1", "r2", "r4"]


def test_the_saved_line_keeps_each_queue_s_head_and_a_pass_weighs_only_a_true_prefix(
    queued, post_event, clock
):
    """Issue 41: the line is saved as each queue's first HEAD_KEPT and its bound, so a pass
    between ticks decodes a few entries a queue, whatever the line's length; what joined
    since is synced, and weighed only where it stands within the bound (a request past it
    may stand behind requests the saved line does not hold)."""
    _, tracker = queued
    count = HEAD_KEPT + 10
    for n in range(count):
        assert publish(post_event, clock, body(f"r{n:03d}")) == 200
    assert tick(post_event, clock) == 200
    saved = watches.decode(database(tracker).line_shards)
    assert saved is not None
    assert len(saved.active) == HEAD_KEPT  # r000 was admitted: r001 to r050 are kept
    assert saved.bounds["team-a"]["requestId"] == f"r{HEAD_KEPT:03d}"

    assert publish(post_event, clock, body("vip", priority="high")) == 200
    assert publish(post_event, clock, body("late")) == 200
    found = tracker.jobs.admissions.line(clock.now)
    assert found is not None
    held = {w.request_id for w in found.waiters()}
    assert {"vip", "late"} <= held and len(held) == HEAD_KEPT + 2
    weighed = admission._windowed(admission.waiting_workloads(found.waiters()), found.line)
    ids = [w.request_id for w in weighed]
    # The high-priority arrival stands first; the late one stands past the bound, behind
    # r051..r059, which the saved line does not hold: not weighed until the tick.
    assert ids[0] == "vip" and "late" not in ids and len(ids) == admission.PASS_WINDOW

    # The running request's end frees its GPUs: the pass between ticks admits the head.
    finish(post_event, clock, tracker, "r000")
    assert tracker.jobs.job_store.get("vip")["admission"]["stage"] == "ADMITTED"
    assert tracker.jobs.job_store.get("r001")["admission"]["stage"] == "WAITING"


def test_the_tick_weighs_every_line_whole_past_the_saved_bound(queued, post_event, clock):
    _, tracker = queued
    for n in range(HEAD_KEPT + 5):
        assert publish(post_event, clock, body(f"r{n:03d}")) == 200
    assert tick(post_event, clock) == 200
    # Every waiting request but the bounded queue's first HEAD_KEPT is past the bound; the
    # tick, which has every waiting record, still counts them all for the operators.
    summary = database(tracker).admission_summary
    assert summary is not None
    queue = next(q for q in summary["queues"] if q["name"] == "team-a")
    assert queue["waiting"] == HEAD_KEPT + 4


def test_a_saved_head_that_ran_dry_is_read_whole_from_the_records(queued, post_event, clock):
    """Found by review: were most of a queue's saved head to leave between two ticks, the
    requests past its bound (which the saved line does not hold) would be its head, and a
    pass that weighed the queue without them could let another queue's lower priority go
    first. A pass that finds fewer than its window left at or before a bound reads that
    queue's line whole from the records."""
    _, tracker = queued
    for n in range(HEAD_KEPT + 10):
        assert publish(post_event, clock, body(f"r{n:03d}")) == 200
    assert tick(post_event, clock) == 200
    for n in range(1, 41):  # 40 of the saved head leave: 10 are left at or before the bound
        assert publish(post_event, clock, {"cancel": f"r{n:03d}"}) == 200

    found = tracker.jobs.admissions.line(clock.now)
    assert found is not None
    waiting = admission._Waiting(found.waiters(), found.line, found.version)
    refilled = admission._refilled(tracker, waiting)

    assert refilled.refilled == frozenset({"team-a"})
    workloads = admission.waiting_workloads(refilled.records)
    weighed = admission._windowed(workloads, refilled.line, refilled.refilled)
    ids = [w.request_id for w in weighed]
    # The ten left of the saved head, then the nine past its bound, in queue order.
    assert ids == [f"r{n:03d}" for n in range(41, HEAD_KEPT + 10)]
