"""The admission store's contract (``AdmissionStore``): the same cases on the in-memory fake
and on the Firestore emulator, each Firestore case in a project of its own (the ledger and the
summary are one document each, and the waiting line spans the whole ``jobs`` collection).

The cases drive the store through :class:`shared.app.repository.jobs.AdmissionRecords` (a
request entering its queue, an admission, a release, a quota read, a hold noted) and through
its own primitives: what is compared is the ledger and the records as stored.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.app.ports import AdmissionStore, JobStore
from shared.app.repository.jobs import AdmissionRecords, JobRecords
from shared.domain.admission.config import Pool, Resource, parse_queue_file
from shared.domain.admission.ledger import Stage, admission_fields, workload_of
from shared.domain.model.changes import Change
from shared.domain.model.records import TICK_FIELDS
from shared.domain.model.states import JobState
from shared.domain.model.watch import Watch
from shared.domain.request.message import JobRequest, parse_request
from tests.events import load
from tests.fakes import InMemoryJobDatabase, in_memory_records
from tests.integration.test_admission import QUEUES as QUEUE_FILE

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
LOCATION = "us-central1"
A100 = Resource(LOCATION, "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)
# The two queues of the admission tests, sharing an 8-GPU project quota.
QUEUES = parse_queue_file(QUEUE_FILE)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@dataclass
class Side:
    backend: str
    records: JobRecords
    # The summary as stored (admission/summary), None when never written.
    read_summary: Callable[[], dict[str, Any] | None]

    @property
    def admissions(self) -> AdmissionRecords:
        return self.records.admissions

    @property
    def store(self) -> AdmissionStore:
        return self.records.admissions.admission_store

    @property
    def jobs(self) -> JobStore:
        return self.records.job_store


@pytest.fixture(params=["memory", "firestore"])
def side(request: pytest.FixtureRequest) -> Side:
    if request.param == "memory":
        database = InMemoryJobDatabase()
        return Side(
            "memory", in_memory_records(LOCATION, database), lambda: database.admission_summary
        )
    from google.cloud import firestore

    from shared.adapters.firestore.admission_store import ADMISSION, SUMMARY
    from shared.adapters.firestore.database import Firestore
    from shared.bootstrap import Ports, job_records
    from shared.kernel.config import Settings

    request.getfixturevalue("local_stack")  # the emulator, and its environment
    project = f"admission-{uuid.uuid4().hex[:10]}"
    client = firestore.Client(project=project)
    settings = Settings(project=project, location=LOCATION)
    records = job_records(settings, Ports(firestore=Firestore(settings, client=client)))

    def read_summary() -> dict[str, Any] | None:
        snap = client.collection(ADMISSION).document(SUMMARY).get()
        return snap.to_dict() if snap.exists else None

    return Side("firestore", records, read_summary)


def job_request(request_id: str) -> JobRequest:
    body = load("seed_request")
    body["requestId"] = request_id
    return parse_request(body, {}, "message-1")


def waits(side: Side, request_id: str, queue: str, since: datetime, gpus: int = 4) -> None:
    """``request_id`` enters ``queue`` at ``since``, asking ``gpus`` A100s."""
    fields = admission_fields(queue, 0, {A100: gpus}, since)
    assert side.admissions.enter(job_request(request_id), fields, since) is not None


def line(side: Side, queue: str | None, most: int = 10) -> list[str]:
    return [r.request_id for r in side.admissions.waiting(queue, most)]


# --- the waiting line -------------------------------------------------------------------


def test_the_line_is_each_queue_s_waiting_records_oldest_first(side):
    waits(side, "b-late", "team-b", at(30))
    waits(side, "a-late", "team-a", at(20))
    waits(side, "a-first", "team-a", at(10))

    assert line(side, "team-a") == ["a-first", "a-late"]
    assert line(side, "team-b") == ["b-late"]
    assert line(side, None) == ["a-first", "a-late", "b-late"]  # every queue, oldest first
    assert line(side, None, most=2) == ["a-first", "a-late"]
    assert line(side, "team-c") == []
    assert (side.admissions.count_waiting("team-a"), side.admissions.count_waiting("team-b")) == (
        2,
        1,
    )
    assert side.admissions.count_waiting("team-c") == 0


def test_the_line_reads_the_tick_s_fields_only(side):
    waits(side, "partial", "team-a", NOW)

    (found,) = side.store.waiting_admission("team-a", 1)

    assert found.partial
    assert set(found.raw) <= set(TICK_FIELDS) and "request" not in found.raw
    assert found.raw["admission"]["stage"] == Stage.WAITING.value
    assert "request" in (side.jobs.get("partial") or {})


def test_a_request_that_entered_once_is_not_entered_again(side):
    waits(side, "once", "team-a", NOW)

    fields = admission_fields("team-b", 0, {A100: 4}, at(5))
    assert side.admissions.enter(job_request("once"), fields, at(5)) is None
    assert line(side, "team-a") == ["once"] and line(side, "team-b") == []


# --- the ledger, with the records it admits ----------------------------------------------


def test_an_admission_writes_the_ledger_and_its_record_together(side):
    waits(side, "a1", "team-a", NOW)
    (waiting,) = side.admissions.waiting("team-a", 1)
    workload = workload_of("a1", waiting.admission)
    assert workload is not None
    assert side.store.read_ledger() is None  # never written yet

    assert side.admissions.admit(workload, QUEUES, at(1), reading=False)

    ledger = side.admissions.ledger()
    assert set(ledger.held) == {"a1"} and ledger.held["a1"].demand == {A100: 4}
    record = side.jobs.get("a1") or {}
    assert record["admission"]["stage"] == Stage.ADMITTED.value
    assert [m["state"] for m in record["outbox"]] == ["ADMITTED"] and record["outboxPending"]
    assert line(side, "team-a") == [] and side.admissions.count_waiting("team-a") == 0
    # Admitted already: a second pass on an older snapshot takes nothing.
    assert not side.admissions.admit(workload, QUEUES, at(2), reading=False)
    assert set(side.admissions.ledger().held) == {"a1"}


def test_an_admission_past_the_queue_s_room_writes_nothing(side):
    waits(side, "a1", "team-a", NOW)
    waits(side, "a2", "team-a", at(1))
    first, second = side.admissions.waiting("team-a", 2)
    admitted = [
        side.admissions.admit(workload, QUEUES, at(2), reading=False)
        for workload in (workload_of(r.request_id, r.admission) for r in (first, second))
        if workload is not None
    ]

    # team-a's nominal 4 holds a1; a2 has no cohort to borrow from: it waits, unwritten.
    assert admitted == [True, False]
    assert set(side.admissions.ledger().held) == {"a1"}
    assert (side.jobs.get("a2") or {})["admission"]["stage"] == Stage.WAITING.value
    assert line(side, "team-a") == ["a2"]


def test_a_release_gives_the_entries_back_once(side):
    waits(side, "a1", "team-a", NOW)
    (waiting,) = side.admissions.waiting("team-a", 1)
    workload = workload_of("a1", waiting.admission)
    assert workload is not None and side.admissions.admit(workload, QUEUES, NOW, reading=False)

    assert side.admissions.release(["a1", "never-held"])
    assert side.admissions.ledger().held == {}
    assert not side.admissions.release(["a1"])  # nothing held: nothing written


def test_a_quota_read_is_kept_in_the_ledger(side):
    side.admissions.observe_quota({A100: 6}, [A100], None, NOW)
    ledger = side.admissions.ledger()
    assert (ledger.observed, ledger.asked, ledger.observed_at) == ({A100: 6}, {A100}, NOW)

    side.admissions.observe_quota({}, [A100], "503 unavailable", at(60))
    ledger = side.admissions.ledger()
    assert ledger.observed == {A100: 6}  # the limits read before stay
    assert (ledger.unreadable, ledger.observed_at) == ("503 unavailable", at(60))


def test_what_a_held_request_waits_for_is_noted_once_and_an_ended_one_leaves_the_line(side):
    waits(side, "held", "team-a", NOW)
    before = side.jobs.read("held")
    assert before is not None

    side.admissions.note_held("held", "quota", at(1))
    noted = side.jobs.read("held")
    assert noted is not None and noted.raw["admission"]["heldBy"] == "quota"
    side.admissions.note_held("held", "quota", at(2))  # unchanged: nothing written
    assert side.jobs.read("held").version == noted.version

    side.admissions.leave_line("held", at(3))  # not ended: it still waits
    assert line(side, "team-a") == ["held"]
    ended = Change(JobState.CANCELLED, {"state": "CANCELLED", "endedAt": at(4)})
    assert side.records.apply("held", lambda _r: ended) == ended
    side.admissions.leave_line("held", at(5))
    assert (side.jobs.get("held") or {})["admission"]["stage"] == Stage.ENDED.value
    assert line(side, "team-a") == [] and side.admissions.count_waiting("team-a") == 0


def test_the_summary_is_written_whole(side):
    assert side.read_summary() is None
    side.admissions.write_summary({"queues": [{"name": "team-a", "waiting": 2}], "at": NOW})
    side.admissions.write_summary({"queues": [], "at": at(60)})  # the last tick's alone
    assert side.read_summary() == {"queues": [], "at": at(60)}


# --- the port's own primitives ----------------------------------------------------------


def test_transact_ledger_creates_then_updates_the_ledger(side):
    assert side.store.transact_ledger(None, lambda raw, record: ({"n": 1}, None))
    first = side.store.read_ledger()
    assert first is not None and first.raw == {"n": 1}

    seen: list[Any] = []

    def bump(raw: dict[str, Any] | None, record: dict[str, Any] | None) -> Any:
        seen.append((raw, record))
        return {"n": (raw or {})["n"] + 1}, None

    assert side.store.transact_ledger(None, bump)
    assert seen == [({"n": 1}, None)]
    second = side.store.read_ledger()
    assert second is not None and second.raw == {"n": 2} and second.version != first.version
    # A decision to write nothing writes nothing.
    assert not side.store.transact_ledger(None, lambda raw, record: None)
    assert not side.store.transact_ledger(None, lambda raw, record: (None, None))
    assert side.store.read_ledger().raw == {"n": 2}


def test_transact_ledger_reads_and_writes_the_record_with_the_ledger(side):
    waits(side, "rec", "team-a", NOW)
    seen: list[Any] = []
    change = Change(
        JobState.QUEUED, {"note": "admitted", "outboxPending": True}, deletes=("reason",)
    )

    def decide(raw: dict[str, Any] | None, record: dict[str, Any] | None) -> Any:
        seen.append(record)
        return {"held": ["rec"]}, change

    assert side.store.transact_ledger("rec", decide)

    assert seen[0] is not None and seen[0]["requestId"] == "rec"
    assert side.store.read_ledger().raw == {"held": ["rec"]}
    record = side.jobs.get("rec") or {}
    assert record["note"] == "admitted" and "reason" not in record


def test_transact_ledger_drops_the_change_of_a_missing_record(side):
    seen: list[Any] = []

    def decide(raw: dict[str, Any] | None, record: dict[str, Any] | None) -> Any:
        seen.append(record)
        return None, Change(JobState.QUEUED, {"note": "x"})

    # No record: the change alone is nothing to write.
    assert not side.store.transact_ledger("missing", decide)
    assert seen == [None] and side.jobs.get("missing") is None
    assert side.store.read_ledger() is None

    # The ledger is still written when the decision has one.
    assert side.store.transact_ledger(
        "missing", lambda raw, record: ({"v": 1}, Change(JobState.QUEUED, {"note": "x"}))
    )
    assert side.store.read_ledger().raw == {"v": 1} and side.jobs.get("missing") is None


def test_two_ledger_writes_on_one_read_never_both_land(side: Side) -> None:
    """The guard against admitting past a quota is the ledger write's precondition: two
    admissions that read the same ledger (held at a barrier until both have read) each try
    to take the last slot; exactly one write lands, and the other decides again on a fresh
    read and takes nothing. The fake serialises under a lock, so this is Firestore's own."""
    if side.backend == "memory":
        pytest.skip("the in-memory store decides under one lock: no two reads interleave")
    store = side.store
    run = uuid.uuid4().hex[:8]
    both_read = threading.Barrier(2, timeout=20)
    calls: dict[str, int] = {}

    def take(slot: str) -> bool:
        def decide(raw: dict[str, Any] | None, _record: dict[str, Any] | None) -> Any:
            calls[slot] = calls.get(slot, 0) + 1
            if calls[slot] == 1:
                both_read.wait()  # both have read the ledger before either writes
            held = list((raw or {}).get("held") or [])
            if any(str(e.get("requestId", "")).startswith(run) for e in held):
                return None  # the last slot is taken
            at = datetime.now(UTC)
            entry = {"requestId": f"{run}-{slot}", "queue": "q", "demand": [], "at": at}
            return {**(raw or {}), "held": [*held, entry]}, None

        return store.transact_ledger(None, decide)

    results: dict[str, bool] = {}
    threads = [
        threading.Thread(target=lambda s=s: results.__setitem__(s, take(s))) for s in ("x", "y")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results.values()) == [False, True]  # one landed, one took nothing
    assert sorted(calls.values()) == [1, 2]  # the loser decided again, on a fresh read
    stored = store.read_ledger()
    assert stored is not None
    ours = [e for e in stored.raw["held"] if str(e["requestId"]).startswith(run)]
    assert len(ours) == 1


# --- the line, kept between passes (shared.domain.admission.line) ----------------------------


def test_the_saved_line_is_synced_from_the_writes_that_stamp_it(side):
    assert side.admissions.line(NOW) is None  # none saved: the pass reads the records whole
    empty = side.store.read_line()
    assert side.admissions.save_line(Watch({}, {}, empty.at, NOW), empty.version)

    waits(side, "w1", "team-a", NOW)
    waits(side, "w2", "team-b", at(1))
    # A record outside admission, written twice: no stamp for the line, so no sync reads it.
    plain = {"requestId": "plain", "state": JobState.RUNNING.value, "attempt": 1}
    assert side.jobs.create("plain", plain) is not None
    side.jobs.transact("plain", lambda _: Change(state=JobState.RUNNING, record={"x": 1}))

    found = side.admissions.line(at(2))
    assert found is not None
    assert sorted(r.request_id for r in found.waiters()) == ["w1", "w2"]
    assert found.reads == 2
    assert side.admissions.save_line(found.line, found.version)
    # Saved since that read: a second save on the same version writes nothing.
    assert not side.admissions.save_line(found.line, found.version)

    # Admitted (its admission written with the ledger): out of the line at the next sync.
    (first,) = side.admissions.waiting("team-a", 1)
    workload = workload_of("w1", first.admission)
    assert workload is not None and side.admissions.admit(workload, QUEUES, at(3), reading=False)
    # A write of a waiting record stamps it whatever it writes (a cancel's mark here).
    side.jobs.transact(
        "w2", lambda _: Change(state=JobState.QUEUED, record={"cancelRequested": True})
    )
    synced = side.admissions.line(at(4))
    assert synced is not None
    assert [(r.request_id, r.cancel_requested) for r in synced.waiters()] == [("w2", True)]
    assert synced.reads == 2  # w1 and w2, each stamped since the saved line's mark
