"""The watch list's store contract (issue 26): the same cases on the in-memory fake and on the
Firestore emulator, each Firestore case in a project of its own (the list and the counts span
the whole collection, and the embedded stack's tick keeps a list of its own project).

What the tick relies on: every write of a record is stamped, so ``changed_since`` returns
every record written after a mark and no record left alone long before it; every read of a
sync is as of the list's read (a write after it is not seen, and is after the next mark);
``count_active`` counts as of that time; the list and the tally are saved together only while
no other save came first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.app.ports import AdmissionStore, JobStore, WatchStore
from shared.app.repository.jobs import JobRecords
from shared.domain.decisions.recovery import finish
from shared.domain.decisions.submissions import Submission
from shared.domain.model.changes import Change
from shared.domain.model.states import JobState
from shared.domain.model.tally import built as tally_built
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.model.watch import built
from shared.domain.request.message import parse_request
from tests.events import load
from tests.fakes import in_memory_records

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
LOCATION = "us-central1"


@dataclass
class Side:
    records: JobRecords
    # Waits past the adapter's mark margin, so that a write before it is "long before".
    pause: Callable[[], None]

    @property
    def watch(self) -> WatchStore:
        return self.records.watch_store

    @property
    def jobs(self) -> JobStore:
        return self.records.job_store

    @property
    def admission(self) -> AdmissionStore:
        return self.records.admissions.admission_store


@pytest.fixture(params=["memory", "firestore"])
def side(request: pytest.FixtureRequest) -> Side:
    if request.param == "memory":
        return Side(in_memory_records(LOCATION), lambda: None)
    from google.cloud import firestore

    from shared.adapters.firestore.database import Firestore
    from shared.adapters.firestore.job_store import MARK_MARGIN
    from shared.bootstrap import Ports, job_records
    from shared.kernel.config import Settings

    request.getfixturevalue("local_stack")  # the emulator, and its environment
    project = f"watch-{uuid.uuid4().hex[:10]}"
    settings = Settings(project=project, location=LOCATION)
    database = Firestore(settings, client=firestore.Client(project=project))
    records = job_records(settings, Ports(firestore=database))
    return Side(records, lambda: time.sleep(MARK_MARGIN.total_seconds() + 0.3))


def created(side: Side, rid: str) -> None:
    body = load("seed_request")
    body["requestId"] = rid
    claim = side.records.claim(parse_request(body, {}, "m-1"), NOW, 60.0)
    assert claim.token is not None


def submitted(side: Side, rid: str, job_id: int) -> None:
    created(side, rid)
    job = VertexJob(
        f"projects/p/locations/{LOCATION}/customJobs/{job_id}",
        "JOB_STATE_QUEUED",
        {"flexjobs-request": rid, "flexjobs-attempt": "1"},
        create_time=NOW,
    )
    submission = Submission(rid, 1, job, strategy="FLEX_START", location=LOCATION)
    assert side.records.record_submission(submission, NOW) is not None


def touch(side: Side, rid: str, **fields: Any) -> None:
    change = Change(state=JobState.ACCEPTED, record={"note": uuid.uuid4().hex, **fields})
    assert side.records.apply(rid, lambda _current: change) is not None


def ids(found: list[Any]) -> set[str]:
    return {str(s.raw.get("requestId")) for s in found}


def test_changed_since_returns_the_records_written_after_the_mark(side):
    created(side, "old")
    side.pause()
    first = side.watch.read_watch().at
    created(side, "new")
    touch(side, "old")  # a write of an old record stamps it again
    side.pause()
    second = side.watch.read_watch().at

    changed = side.jobs.changed_since(first, second, 100)
    assert ids(changed) == {"new", "old"}
    assert all(s.partial and s.key for s in changed)
    created(side, "later")
    third = side.watch.read_watch().at
    # Nothing written between the second mark and the third but "later".
    assert ids(side.jobs.changed_since(second, third, 100)) == {"later"}


def test_a_sync_reads_as_of_the_list_s_read(side):
    created(side, "a")
    created(side, "b")
    side.pause()
    mark = side.watch.read_watch().at
    at = side.watch.read_watch().at
    touch(side, "a", attempt=7)  # after ``at``: not seen as of it
    created(side, "c")
    assert "c" not in ids(side.jobs.changed_since(mark, at, 100))
    assert side.jobs.count_active(at) == 2
    assert {s.raw["attempt"] for s in side.jobs.active(at) if s.raw["requestId"] == "a"} == {1}
    later = side.watch.read_watch().at
    assert side.jobs.count_active(later) == 3
    assert {s.raw["attempt"] for s in side.jobs.active(later) if s.raw["requestId"] == "a"} == {7}


def test_count_active_leaves_out_ended_records(side):
    submitted(side, "running", 91_001)
    submitted(side, "done", 91_002)
    ended = side.records.apply("done", lambda r: finish(r, JobState.SUCCEEDED, NOW, None))
    assert ended is not None
    at = side.watch.read_watch().at
    assert side.jobs.count_active(at) == 1
    assert ids(side.jobs.active(at)) == {"running"}


def test_ended_since_streams_the_ended_records_and_newest_ranks_by_creation(side):
    for n, rid in enumerate(("first", "second", "third")):
        submitted(side, rid, 92_000 + n)
        touch(side, rid, createdAt=NOW + timedelta(minutes=n))
    fields = {"gpuSeconds": 60.0, "cost": {"costUsd": 0.5}}
    side.records.apply("second", lambda r: finish(r, JobState.FAILED, NOW, "x", fields=fields))
    at = side.watch.read_watch().at
    ended = list(side.jobs.ended_since(NOW - timedelta(days=7), at))
    assert ids(ended) == {"second"}
    assert ended[0].raw["gpuSeconds"] == 60.0 and ended[0].raw["cost"] == {"costUsd": 0.5}
    newest = side.jobs.newest(2, at)
    assert [r["requestId"] for r in newest] == ["third", "second"]
    assert set(newest[0]) == {"requestId", "createdAt"}


def test_the_list_and_the_tally_are_saved_together_and_only_once_per_read(side):
    submitted(side, "a", 93_001)
    saved = side.watch.read_watch()
    assert saved.watch is None and saved.tally is None and saved.version is None
    watch = built([(s.key or "", s) for s in side.jobs.active(saved.at)], [], saved.at, NOW, NOW)
    tally = tally_built({"QUEUED": 1}, [], [{"requestId": "a", "createdAt": NOW}], NOW)
    assert side.watch.save_watch(watch, tally, saved.version)
    # A second save decided on the same read finds another saved since: nothing written.
    assert not side.watch.save_watch(watch, None, saved.version)

    again = side.watch.read_watch()
    assert again.watch is not None and again.tally == tally
    assert set(again.watch.active) == set(watch.active) and again.watch.mark == saved.at
    assert again.watch.active["a"].raw == watch.active["a"].raw
    # The tally alone (the list unchanged): the stored list and its mark stay.
    newer = tally_built({"QUEUED": 2}, [], [], NOW)
    assert side.watch.save_watch(None, newer, again.version, list_too=False)
    third = side.watch.read_watch()
    assert third.tally == newer and third.watch is not None and third.watch.mark == saved.at


def test_a_list_that_did_not_fit_is_saved_as_overflowed(side):
    saved = side.watch.read_watch()
    assert side.watch.save_watch(None, None, saved.version)
    after = side.watch.read_watch()
    assert after.watch is None and after.tally is None and after.overflowed_at is not None


def test_a_ledger_write_of_a_record_stamps_it_too(side):
    created(side, "queued")
    side.pause()
    mark = side.watch.read_watch().at
    change = Change(state=JobState.ACCEPTED, record={"admission": {"stage": "WAITING"}})
    assert side.admission.transact_ledger("queued", lambda _ledger, _record: ({"v": 1}, change))
    at = side.watch.read_watch().at
    assert ids(side.jobs.changed_since(mark, at, 100)) == {"queued"}
