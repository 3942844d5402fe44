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
from shared.domain.model import watch as watches
from tests.fakes import FakeClock, InMemoryJobDatabase
from tests.functional.test_admission import QUEUES, body, publish, wired
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
