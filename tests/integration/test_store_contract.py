"""The store contract: the same cases run on the in-memory fakes and on the Firestore emulator.

The cases drive the stores through :class:`shared.app.repository.jobs.JobRecords` and
``DeploymentRecords``, the one place that gives the stores' few primitives (get, create,
transact, the queries) their meaning, so what is compared is what the services see. The ports
covered here: ``JobStore``, ``AttemptStore``, ``SeriesStore``, ``DeploymentStore`` and
``RejectionLog``; the watch list's (``WatchStore``, and the job store's reads as of its time)
are test_watch_contract.py's, admission's (``AdmissionStore``) test_admission_contract.py's.

Every test takes ``stores`` (parametrized over ``memory`` and ``firestore``) and asserts what
the port promises, so a fake that drifts from the real store fails here. Firestore is the
reference: the fake holds storage only (copies, sequences read back as lists, nested maps
merged as ``set(merge=True)`` merges them) and applies the same domain rules.

The Firestore side shares the session's emulator and never resets it: each test works under
its own requestIds (the ``unique`` fixture) and Vertex job ids, and the whole-collection
queries (``active``, ``due_submissions``, ``with_outbox``, ``with_pending_cancels``,
``alive``, ``on_endpoint``) are checked for membership of the test's own ids only.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.app.ports import RejectionLog
from shared.app.repository.deployments import DeploymentRecords
from shared.app.repository.jobs import JobRecords
from shared.domain.decisions.deploy_model import new_deployment, policy_of
from shared.domain.decisions.hints import HintAction
from shared.domain.decisions.recovery import cancels_confirmed, cancels_pending, finish
from shared.domain.decisions.submissions import (
    MAX_NOTIFIED,
    QUOTA_REASON,
    Submission,
    new_record,
    submission_claimable,
    tombstone,
)
from shared.domain.model.changes import Change, Decided, DeploymentChange
from shared.domain.model.ids import doc_id
from shared.domain.model.records import TICK_FIELDS, JobRecord, Stored
from shared.domain.model.states import JobState
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.request.message import JobRequest, parse_request
from shared.domain.serving.followed import FOLLOWED_FIELDS, built_followed
from shared.domain.serving.model import (
    ActionKind,
    CallKind,
    InFlight,
    Intent,
    MachineSpec,
    ObservedEndpoint,
    ObservedModel,
    Phase,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.rule import new_state
from shared.kernel.errors import SubmissionInProgress
from tests.events import load
from tests.fakes import (
    InMemoryDeploymentStore,
    InMemoryJobStore,
    InMemoryRejectionLog,
    in_memory_records,
)

pytestmark = pytest.mark.integration

# Whole seconds: Firestore keeps microseconds and answers DatetimeWithNanoseconds in UTC.
NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
TTL = 120.0
LOCATION = "us-central1"
BACKENDS = ["memory", "firestore"]
_job_numbers = itertools.count(int(uuid.uuid4().int % 10**12) * 1000)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


# --- the stores -------------------------------------------------------------------------


@dataclass
class Stores:
    backend: str
    jobs: JobRecords
    deployments: DeploymentRecords
    rejections: RejectionLog
    read_rejection: Callable[[str], dict[str, Any] | None]


@pytest.fixture(scope="session")
def firestore_client(local_stack: Any) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=local_stack.config.project)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stores(backend: str, request: pytest.FixtureRequest) -> Stores:
    if backend == "memory":
        jobs = in_memory_records(LOCATION)
        log = InMemoryRejectionLog()
        deployments = DeploymentRecords(InMemoryDeploymentStore())
        return Stores(backend, jobs, deployments, log, log.documents.get)
    from shared.adapters.firestore.database import Firestore
    from shared.adapters.firestore.deployment_store import FirestoreDeploymentStore
    from shared.adapters.firestore.rejection_log import REJECTIONS, FirestoreRejectionLog
    from shared.bootstrap import Ports, job_records
    from shared.kernel.config import Settings

    # Only the Firestore side needs the emulator stack: `-k memory` runs without it.
    client = request.getfixturevalue("firestore_client")
    project = request.getfixturevalue("local_stack").config.project
    settings = Settings(project=project, location=LOCATION)
    database = Firestore(settings, client=client)

    def read_rejection(rejection_id: str) -> dict[str, Any] | None:
        snap = client.collection(REJECTIONS).document(doc_id(rejection_id)).get()
        return snap.to_dict() if snap.exists else None

    return Stores(
        backend,
        # The production wiring of the job stores, on this database.
        job_records(settings, Ports(firestore=database)),
        DeploymentRecords(FirestoreDeploymentStore(database)),
        FirestoreRejectionLog(database),
        read_rejection,
    )


@pytest.fixture
def jobs(stores: Stores) -> JobRecords:
    return stores.jobs


@pytest.fixture
def deployments(stores: Stores) -> DeploymentRecords:
    return stores.deployments


@pytest.fixture
def delete_record(stores: Stores, request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Delete a job record behind the store's back (as an operator would)."""
    store = stores.jobs.job_store
    if isinstance(store, InMemoryJobStore):
        return lambda rid: (store.database.jobs.pop(rid), None)[1]
    from shared.adapters.firestore.job_store import JOBS

    client = request.getfixturevalue("firestore_client")
    return lambda rid: (client.collection(JOBS).document(doc_id(rid)).delete(), None)[1]


# --- building blocks --------------------------------------------------------------------


def job_request(request_id: str) -> JobRequest:
    body = load("seed_request")
    body["requestId"] = request_id
    return parse_request(body, {}, "message-1")


def deploy_request(request_id: str) -> JobRequest:
    body = load("deploy_request")
    body["requestId"] = request_id
    return parse_request(body, {}, "message-1")


def vertex_job(
    state: str = "JOB_STATE_QUEUED", create_time: datetime | None = NOW, attempt: int = 1
) -> VertexJob:
    """A Vertex job with an id no other test uses (``by_job_id`` spans the collection)."""
    name = f"projects/p/locations/{LOCATION}/customJobs/{next(_job_numbers)}"
    labels = {"flexjobs-request": "r", "flexjobs-attempt": str(attempt)}
    return VertexJob(name=name, state=state, labels=labels, create_time=create_time)


def submission(request_id: str, job: VertexJob, attempt: int = 1, **fields: Any) -> Submission:
    return Submission(
        request_id=request_id,
        attempt=attempt,
        vertex_job=job,
        strategy="FLEX_START",
        location=LOCATION,
        **fields,
    )


def lease(token: str | None, now: datetime = NOW, attempt: int | None = 1) -> dict[str, Any]:
    held: dict[str, Any] = {"token": token, "expiresAt": now + timedelta(seconds=TTL)}
    if attempt is not None:
        held["attempt"] = attempt
    return held


def put(jobs: JobRecords, request_id: str, **fields: Any) -> None:
    """Write record fields through the port's own transaction."""
    change = Change(state=JobState.ACCEPTED, record=fields)
    assert jobs.apply(request_id, lambda _current: change) == change


def claimed(jobs: JobRecords, request_id: str) -> str:
    claim = jobs.claim(job_request(request_id), NOW, TTL)
    assert claim.token is not None
    return claim.token


def submitted(jobs: JobRecords, request_id: str, **job: Any) -> VertexJob:
    claimed(jobs, request_id)
    made = vertex_job(**job)
    assert jobs.record_submission(submission(request_id, made), at(5))
    return made


# --- JobRecords.claim ---------------------------------------------------------------------


def test_claim_creates_the_record_in_accepted_with_a_lease(jobs, unique):
    rid = unique("claim")
    request = job_request(rid)

    claim = jobs.claim(request, NOW, TTL)

    assert claim.token and claim.record is None
    assert jobs.job_store.get(rid) == {
        **new_record(request, LOCATION, NOW),
        "claim": lease(claim.token),
        # Due on the tick once the claim expires: a delivery that dies leaves nothing behind.
        "nextAttemptAt": NOW + timedelta(seconds=TTL),
    }
    assert jobs.job_store.get(rid)["state"] == "ACCEPTED"
    assert jobs.get_attempt(rid, 1) is None
    assert rid not in jobs.due_submissions(at(TTL - 1))
    assert rid in jobs.due_submissions(at(TTL))


def test_a_second_claim_while_the_first_is_held_raises(jobs, unique):
    rid = unique("held")
    token = claimed(jobs, rid)
    before = jobs.job_store.get(rid)

    with pytest.raises(SubmissionInProgress):
        jobs.claim(job_request(rid), at(TTL - 1), TTL)

    assert jobs.job_store.get(rid) == before
    assert jobs.job_store.get(rid)["claim"]["token"] == token


@pytest.mark.parametrize("later", [TTL, TTL + 1], ids=["at-expiry", "after-expiry"])
def test_an_expired_claim_is_taken_over(jobs, unique, later):
    rid = unique("expired")
    first = claimed(jobs, rid)

    claim = jobs.claim(job_request(rid), at(later), TTL)

    assert claim.token and claim.token != first and claim.record is None
    assert jobs.job_store.get(rid)["claim"] == lease(claim.token, at(later))
    assert jobs.job_store.get(rid)["state"] == "ACCEPTED"
    assert jobs.job_store.get(rid)["nextAttemptAt"] == at(later) + timedelta(seconds=TTL)


def test_a_claim_taken_over_updates_the_record_time(jobs, unique):
    rid = unique("takeover-time")
    claimed(jobs, rid)

    jobs.claim(job_request(rid), at(TTL + 1), TTL)

    assert jobs.job_store.get(rid)["updatedAt"] == at(TTL + 1)


def test_a_released_claim_is_taken_over_at_once(jobs, unique):
    rid = unique("released")
    token = claimed(jobs, rid)
    jobs.release(rid, token, at(1))

    claim = jobs.claim(job_request(rid), at(2), TTL)

    assert claim.token
    assert jobs.job_store.get(rid)["claim"] == lease(claim.token, at(2))


def test_a_settled_record_is_returned_with_no_token(jobs, unique):
    rid = unique("settled")
    submitted(jobs, rid)

    claim = jobs.claim(job_request(rid), at(10), TTL)

    assert claim.token is None
    assert claim.record == jobs.job_store.get(rid)
    assert claim.record["state"] == "QUEUED"


def test_a_record_that_left_accepted_is_settled_without_a_job(jobs, unique):
    rid = unique("parked")
    claimed(jobs, rid)
    put(jobs, rid, state="QUEUED", reason=QUOTA_REASON, claim=None)

    claim = jobs.claim(job_request(rid), at(1), TTL)

    assert claim.token is None and claim.record == jobs.job_store.get(rid)


# --- JobRecords.record_submission ---------------------------------------------------------


def test_record_submission_records_the_job_and_its_attempt(jobs, unique):
    rid = unique("record")
    claimed(jobs, rid)
    put(jobs, rid, nextAttemptAt=at(1), reason=QUOTA_REASON)
    job = vertex_job(state="JOB_STATE_PENDING", create_time=at(-30))

    recorded = jobs.record_submission(submission(rid, job, resumed_from="gs://b/c/"), at(5))

    assert recorded is True
    record = jobs.job_store.get(rid)
    expected = {
        **new_record(job_request(rid), LOCATION, NOW),
        "state": "QUEUED",
        "attempt": 1,
        "vertexJob": job.name,
        "vertexJobId": job.job_id,
        "vertexState": "JOB_STATE_PENDING",
        "vertexJobIds": [job.job_id],
        "strategy": "FLEX_START",
        "location": LOCATION,
        "locationsUsed": [LOCATION],  # where the tick lists and a cancel looks
        "updatedAt": at(5),
        "attemptSubmittedAt": at(5),
        "attemptStartedAt": None,  # PENDING: not started yet
        "vertexCreateTime": at(-30),
        "reason": None,
    }
    assert record == expected
    assert "claim" not in record and "nextAttemptAt" not in record
    assert jobs.get_attempt(rid, 1) == {
        "attempt": 1,
        "vertexJob": job.name,
        "state": "QUEUED",
        "strategy": "FLEX_START",
        "location": LOCATION,
        "submittedAt": at(5),
        "resumedFrom": "gs://b/c/",
    }


def test_record_submission_writes_the_extra_fields(jobs, unique):
    rid = unique("extra")
    claimed(jobs, rid)
    job = vertex_job(state="JOB_STATE_RUNNING", create_time=None)
    sub = submission(rid, job, record_extra={"retries": {"capacity": 1}})

    assert jobs.record_submission(sub, at(5))

    record = jobs.job_store.get(rid)
    assert record["state"] == "RUNNING"
    assert record["vertexCreateTime"] == at(5)  # no createTime from Vertex: the record's now
    assert record["retries"] == {"capacity": 1}
    assert jobs.get_attempt(rid, 1)["state"] == "RUNNING"


def test_record_submission_is_idempotent_for_the_same_job(jobs, unique):
    rid = unique("again")
    claimed(jobs, rid)
    job = vertex_job()
    assert jobs.record_submission(submission(rid, job), at(5))
    record, attempt = jobs.job_store.get(rid), jobs.get_attempt(rid, 1)

    assert jobs.record_submission(submission(rid, job), at(9)) is True
    assert jobs.record_submission(submission(rid, job), at(9)) is True

    assert jobs.job_store.get(rid) == record
    assert jobs.get_attempt(rid, 1) == attempt


def test_record_submission_refuses_another_job_for_the_same_attempt(jobs, unique):
    rid = unique("race")
    claimed(jobs, rid)
    first, second = vertex_job(), vertex_job()
    assert jobs.record_submission(submission(rid, first), at(5))
    record, attempt = jobs.job_store.get(rid), jobs.get_attempt(rid, 1)

    assert jobs.record_submission(submission(rid, second), at(6)) is False

    assert jobs.job_store.get(rid) == record
    assert jobs.get_attempt(rid, 1) == attempt


def test_record_submission_refuses_an_attempt_the_request_moved_past(jobs, unique):
    rid = unique("past")
    claimed(jobs, rid)
    put(jobs, rid, attempt=2, state="RETRYING")
    before = jobs.job_store.get(rid)

    assert jobs.record_submission(submission(rid, vertex_job(), attempt=1), at(5)) is False

    assert jobs.job_store.get(rid) == before
    assert jobs.get_attempt(rid, 1) is None


@pytest.mark.parametrize(
    "fields",
    [{"cancelRequested": True}, {"state": "CANCELLED"}, {"state": "FAILED"}],
    ids=["cancel-requested", "cancelled", "failed"],
)
def test_record_submission_refuses_a_cancelled_or_ended_record(jobs, unique, fields):
    rid = unique("over")
    claimed(jobs, rid)
    put(jobs, rid, **fields)
    before = jobs.job_store.get(rid)

    assert jobs.record_submission(submission(rid, vertex_job()), at(5)) is False

    assert jobs.job_store.get(rid) == before
    assert jobs.get_attempt(rid, 1) is None


def test_record_submission_of_the_next_attempt_keeps_every_job_id(jobs, unique):
    rid = unique("next")
    first = submitted(jobs, rid)
    put(jobs, rid, state="RETRYING", nextAttemptAt=at(60))
    token = jobs.claim_retry(rid, 2, at(60), TTL).token
    assert token is not None
    second = vertex_job(attempt=2)

    assert jobs.record_submission(submission(rid, second, attempt=2), at(61))

    record = jobs.job_store.get(rid)
    assert record["attempt"] == 2 and record["vertexJob"] == second.name
    assert record["vertexJobIds"] == [first.job_id, second.job_id]
    assert "claim" not in record and "nextAttemptAt" not in record
    assert jobs.get_attempt(rid, 1)["vertexJob"] == first.name
    assert jobs.get_attempt(rid, 2)["vertexJob"] == second.name


# --- JobRecords.release -------------------------------------------------------------------


def test_release_drops_only_the_claim_it_holds(jobs, unique):
    rid = unique("release")
    token = claimed(jobs, rid)

    jobs.release(rid, "not-the-holder", at(1))
    assert jobs.job_store.get(rid)["claim"] == lease(token)

    # Released, it expires at once but stays, naming its attempt: a later claim of the same
    # attempt must know one was held before (and look up what it may have created).
    jobs.release(rid, token, at(2))
    assert jobs.job_store.get(rid)["claim"] == {"token": token, "expiresAt": at(2), "attempt": 1}
    jobs.release(rid, token, at(3))  # twice: already released, nothing changes
    assert jobs.job_store.get(rid)["claim"] == {"token": token, "expiresAt": at(2), "attempt": 1}


def test_release_updates_the_record_time(jobs, unique):
    rid = unique("release-time")
    token = claimed(jobs, rid)

    jobs.release(rid, token, at(2))

    assert jobs.job_store.get(rid)["updatedAt"] == at(2)


def test_release_of_a_missing_record_does_nothing(jobs, unique):
    rid = unique("release-missing")

    jobs.release(rid, "token", NOW)

    assert jobs.job_store.get(rid) is None


# --- JobRecords.create_tombstone ----------------------------------------------------------


def test_a_tombstone_is_created_once(jobs, unique):
    rid = unique("tomb")
    record = tombstone(rid, NOW)

    assert jobs.create_tombstone(rid, record) is True
    assert jobs.job_store.get(rid) == record
    assert jobs.create_tombstone(rid, {**record, "reason": "another"}) is False
    assert jobs.job_store.get(rid) == record


def test_a_tombstone_is_not_created_over_a_record(jobs, unique):
    rid = unique("tomb-late")
    claimed(jobs, rid)
    before = jobs.job_store.get(rid)

    assert jobs.create_tombstone(rid, tombstone(rid, NOW)) is False
    assert jobs.job_store.get(rid) == before


def test_a_request_arriving_after_its_tombstone_gets_the_record(jobs, unique):
    rid = unique("tomb-claim")
    jobs.create_tombstone(rid, tombstone(rid, NOW))

    claim = jobs.claim(job_request(rid), at(1), TTL)

    assert claim.token is None and claim.record == tombstone(rid, NOW)


# --- JobRecords.get, get_attempt, update_attempt ------------------------------------------


def test_missing_records_and_attempts_are_none(jobs, unique):
    rid = unique("missing")
    assert jobs.job_store.get(rid) is None
    assert jobs.get_attempt(rid, 1) is None
    claimed(jobs, rid)
    assert jobs.get_attempt(rid, 1) is None


def test_update_attempt_merges_fields_into_the_attempt(jobs, unique):
    rid = unique("attempt")
    submitted(jobs, rid)
    before = jobs.get_attempt(rid, 1)

    jobs.update_attempt(rid, 1, {"workLostSeconds": 12.5, "resumedFrom": None})
    jobs.update_attempt(rid, 2, {"note": "fresh"})

    assert jobs.get_attempt(rid, 1) == {**before, "workLostSeconds": 12.5, "resumedFrom": None}
    assert jobs.get_attempt(rid, 2) == {"note": "fresh"}


def test_update_attempt_merges_nested_maps(jobs, unique):
    rid = unique("attempt-nested")
    submitted(jobs, rid)

    jobs.update_attempt(rid, 1, {"cost": {"costUsd": 1.5, "priced": True}})
    jobs.update_attempt(rid, 1, {"cost": {"priced": False}})

    assert jobs.get_attempt(rid, 1)["cost"] == {"costUsd": 1.5, "priced": False}


def test_update_attempt_stores_a_copy(jobs, unique):
    rid = unique("attempt-copy")
    submitted(jobs, rid)
    cost = {"costUsd": 1.5, "priced": True}

    jobs.update_attempt(rid, 1, {"cost": cost})
    cost["costUsd"] = 99.0

    assert jobs.get_attempt(rid, 1)["cost"] == {"costUsd": 1.5, "priced": True}


def test_sequences_are_read_back_as_lists(jobs, unique):
    rid = unique("tuple")
    claimed(jobs, rid)

    put(jobs, rid, pendingCancels=("a", "b"))

    assert jobs.job_store.get(rid)["pendingCancels"] == ["a", "b"]


# --- JobRecords.apply ---------------------------------------------------------------------


def test_transact_writes_the_change_and_merges_the_current_attempt(jobs, unique):
    rid = unique("transact")
    submitted(jobs, rid)
    seen: list[dict[str, Any]] = []
    change = Change(
        state=JobState.RUNNING,
        record={"state": "RUNNING", "vertexState": "JOB_STATE_RUNNING", "reason": None},
        attempt={"state": "RUNNING", "startedAt": at(20), "endedAt": None},
    )
    before_record, before_attempt = jobs.job_store.get(rid), jobs.get_attempt(rid, 1)

    def decide(current: JobRecord) -> Change:
        seen.append(current)
        return change

    assert jobs.apply(rid, decide) == change

    assert seen[-1] == JobRecord.decode(before_record)  # the decision reads it decoded
    assert jobs.job_store.get(rid) == {**before_record, **change.record}
    assert jobs.get_attempt(rid, 1) == {**before_attempt, **change.attempt}


def test_transact_writes_the_attempt_the_record_is_on(jobs, unique):
    rid = unique("transact-attempt")
    claimed(jobs, rid)
    put(jobs, rid, attempt=3, state="RETRYING")

    jobs.apply(rid, lambda _r: Change(JobState.RETRYING, {"updatedAt": at(1)}, {"errorClass": "x"}))

    assert jobs.get_attempt(rid, 3) == {"errorClass": "x"}
    assert jobs.get_attempt(rid, 1) is None


def test_transact_stores_a_copy_of_the_attempt_fields(jobs, unique):
    rid = unique("transact-copy")
    submitted(jobs, rid)
    cost = {"costUsd": 1.5, "priced": True}
    change = Change(JobState.QUEUED, {"updatedAt": at(1)}, {"cost": cost})

    jobs.apply(rid, lambda _r: change)
    cost["costUsd"] = 99.0

    assert jobs.get_attempt(rid, 1)["cost"] == {"costUsd": 1.5, "priced": True}


def test_transact_replaces_a_map_field(jobs, unique):
    rid = unique("transact-map")
    claimed(jobs, rid)
    put(jobs, rid, retries={"capacity": 2, "preemption": 1})

    put(jobs, rid, retries={"capacity": 3})

    assert jobs.job_store.get(rid)["retries"] == {"capacity": 3}


def test_transact_never_loses_a_concurrent_write(jobs, unique):
    """Interleaving: another writer changes the record between this decision's read and its
    write. Firestore refuses the stale write and this decision runs again on a fresh read;
    the fake serializes the two writers. Either way both marks are kept: no lost update."""
    import threading

    rid = unique("race")
    claimed(jobs, rid)
    put(jobs, rid, marks=[])
    other_done = threading.Event()
    writers: list[threading.Thread] = []

    def append(name: str, interleave: bool) -> None:
        def decide(raw: dict[str, Any]) -> Change:
            if interleave and not writers:
                writers.append(threading.Thread(target=append, args=("other", False)))
                writers[0].start()
                # Firestore: the other write lands now. The fake holds its lock here, so the
                # other writer waits for this one instead.
                other_done.wait(1.0)
            return Change(JobState.ACCEPTED, {"marks": [*raw.get("marks", []), name]})

        jobs.job_store.transact(rid, decide)
        if not interleave:
            other_done.set()

    append("first", interleave=True)
    writers[0].join(10)

    assert sorted(jobs.job_store.get(rid)["marks"]) == ["first", "other"]


def test_transact_writes_nothing_when_decide_says_none(jobs, unique):
    rid = unique("transact-none")
    claimed(jobs, rid)
    before = jobs.job_store.get(rid)

    assert jobs.apply(rid, lambda _r: None) is None

    assert jobs.job_store.get(rid) == before


def test_transact_on_a_missing_record_returns_none_without_deciding(jobs, unique):
    rid = unique("transact-missing")
    seen: list[dict[str, Any]] = []

    def decide(current: dict[str, Any]) -> Change:
        seen.append(current)
        return Change(JobState.ACCEPTED, {"state": "ACCEPTED"})

    assert jobs.apply(rid, decide) is None
    assert seen == []
    assert jobs.job_store.get(rid) is None


def test_transact_with_attempt_fields_only(jobs, unique):
    rid = unique("transact-attempt-only")
    submitted(jobs, rid)

    change = Change(JobState.QUEUED, record={}, attempt={"note": "only the attempt"})
    assert jobs.apply(rid, lambda _r: change) == change

    assert jobs.get_attempt(rid, 1)["note"] == "only the attempt"


def test_finish_through_transact_fills_the_outbox(jobs, unique):
    rid = unique("finish")
    submitted(jobs, rid)

    change = jobs.apply(rid, lambda r: finish(r, JobState.FAILED, at(30), "refused"))

    assert change is not None
    record = jobs.job_store.get(rid)
    assert record["state"] == "FAILED" and record["reason"] == "refused"
    assert "claim" not in record and "nextAttemptAt" not in record
    assert record["endedAt"] == at(30)
    assert record["outbox"] == [
        {"requestId": rid, "state": "FAILED", "attempt": 1, "reason": "refused"}
    ]
    assert record["outboxPending"] is True
    assert rid in jobs.with_outbox()
    assert jobs.apply(rid, lambda r: finish(r, JobState.CANCELLED, at(31), "late")) is None


def test_published_notifications_move_to_notified_and_stay_bounded(jobs, unique):
    rid = unique("notified")
    submitted(jobs, rid)
    sent = [{"requestId": rid, "state": "RETRYING", "attempt": n, "reason": "x"} for n in
            range(MAX_NOTIFIED + 3)]  # fmt: skip
    put(jobs, rid, outbox=sent[:-1], outboxPending=True)

    jobs.drop_from_outbox(rid, sent[:-2])  # one is still unpublished

    record = jobs.job_store.get(rid)
    assert record["outbox"] == [sent[-2]] and record["outboxPending"] is True
    assert record["notified"] == sent[:-2][-MAX_NOTIFIED:]
    put(jobs, rid, outbox=[sent[-1]])
    jobs.drop_from_outbox(rid, [sent[-1]])
    assert jobs.job_store.get(rid)["notified"] == [*sent[-MAX_NOTIFIED - 1 : -2], sent[-1]]


# --- JobRecords.by_job_id ------------------------------------------------------------


def test_find_by_job_id_finds_every_attempt_of_a_request(jobs, unique):
    rid = unique("find")
    first = submitted(jobs, rid)
    put(jobs, rid, state="RETRYING", nextAttemptAt=at(60))
    jobs.claim_retry(rid, 2, at(60), TTL)
    second = vertex_job(attempt=2)
    jobs.record_submission(submission(rid, second, attempt=2), at(61))

    assert jobs.by_job_id(first.job_id).request_id == rid
    assert jobs.by_job_id(second.job_id).request_id == rid
    assert jobs.by_job_id(vertex_job().job_id) is None


def test_request_ids_that_need_escaping_round_trip(jobs, unique):
    rid = unique("team/run 7%")
    job = submitted(jobs, rid)

    assert jobs.job_store.get(rid)["requestId"] == rid
    assert jobs.by_job_id(job.job_id).request_id == rid
    assert jobs.get_attempt(rid, 1)["vertexJob"] == job.name


# --- JobRecords.active --------------------------------------------------------------------


def test_active_lists_the_records_not_yet_ended(jobs, unique):
    accepted, queued, retrying = unique("accepted"), unique("queued"), unique("retrying")
    succeeded, cancelled = unique("succeeded"), unique("cancelled")
    claimed(jobs, accepted)
    submitted(jobs, queued)
    submitted(jobs, retrying)
    put(jobs, retrying, state="RETRYING")
    submitted(jobs, succeeded)
    put(jobs, succeeded, state="SUCCEEDED")
    jobs.create_tombstone(cancelled, tombstone(cancelled, NOW))

    found = jobs.job_store.active()
    active = {r.raw["requestId"]: r.raw for r in found}

    for rid in (accepted, queued, retrying):
        # Of the tick's fields only, never the request body or the notifications.
        whole = jobs.job_store.get(rid)
        assert active[rid] == {k: v for k, v in whole.items() if k in TICK_FIELDS}
        assert "request" in whole and "request" not in active[rid]
    assert all(r.partial for r in found)
    assert succeeded not in active and cancelled not in active


def test_active_reads_in_pages(jobs, unique, monkeypatch):
    from shared.adapters.firestore import queries

    monkeypatch.setattr(queries, "PAGE_SIZE", 2)  # five records: three pages of the query
    made = [unique(f"paged-{n}") for n in range(5)]
    for rid in made:
        claimed(jobs, rid)
    assert set(made) <= {r.raw["requestId"] for r in jobs.job_store.active()}


def test_a_partial_record_is_never_decided_on(jobs, unique):
    rid = unique("partial")
    submitted(jobs, rid)
    (partial,) = [r for r in jobs.job_store.active() if r.raw["requestId"] == rid]
    seen: list[JobRecord] = []

    def decide(record: JobRecord) -> None:
        seen.append(record)

    jobs.write(rid, decide, partial)
    assert seen and seen[0].request == json.loads(jobs.job_store.get(rid)["request"])


# --- JobRecords.watching, record_checkpoint (checkpoint uploads) ---------------------------


def watched_request(request_id: str, prefix: str, **options: Any) -> JobRequest:
    body = load("seed_request")
    body.update(requestId=request_id, checkpointUri=prefix, **options)
    return parse_request(body, {}, "message-1")


def test_watching_finds_the_active_records_of_one_prefix(jobs, unique):
    prefix = f"gs://bkt/{unique('ck')}/"
    running, ended, other = unique("running"), unique("ended"), unique("other")
    for rid, where in ((running, prefix), (ended, prefix), (other, prefix + "x/")):
        assert jobs.claim(watched_request(rid, where), NOW, TTL).token
    put(jobs, ended, state="SUCCEEDED")

    found = jobs.watching(prefix)

    assert [r.request_id for r in found] == [running]
    assert jobs.job_store.get(running)["checkpointPrefix"] == prefix


def test_record_checkpoint_moves_forward_only(jobs, unique):
    from shared.domain.model.checkpoint import Checkpoint

    rid, prefix = unique("ck"), "gs://bkt/ck/"
    jobs.claim(watched_request(rid, prefix, totalSteps=400), NOW, TTL)
    first = Checkpoint(prefix + "step-200/", 200, at(60))
    older = Checkpoint(prefix + "step-100/", 100, at(90))

    assert jobs.record_checkpoint(rid, first, at(61))
    assert not jobs.record_checkpoint(rid, older, at(91))
    assert not jobs.record_checkpoint(rid, first, at(92))  # a redelivery

    record = jobs.job_store.get(rid)
    assert record["latestCheckpoint"] == first.to_dict()
    assert record["progress"] == 0.5
    assert record["state"] == "ACCEPTED"


# --- JobRecords.take_turn, record_skipped (scheduled series) --------------------------------


def slot_request(series: str, day: int, concurrency: str = "forbid") -> JobRequest:
    body = load("seed_request")
    body.update(requestId=series, schedule={"slotSeconds": 86400, "concurrency": concurrency})
    return parse_request(body, {"scheduleTime": f"2026-03-0{day}T02:00:00Z"}, "message-1")


def test_take_turn_takes_a_new_series_and_keeps_it_for_its_holder(jobs, unique):
    series = unique("series") + "-{slot}"
    first = slot_request(series, 2)
    assert first.slot is not None

    taken = jobs.take_turn(first, first.slot, NOW, TTL)
    again = jobs.take_turn(first, first.slot, at(1), TTL)

    assert (taken.move.value, again.move.value) == ("run", "run")


def test_take_turn_waits_for_a_holder_without_a_record_then_takes_over(jobs, unique):
    series = unique("series") + "-{slot}"
    first, second = slot_request(series, 2), slot_request(series, 3)
    assert first.slot is not None and second.slot is not None
    jobs.take_turn(first, first.slot, NOW, TTL)

    waiting = jobs.take_turn(second, second.slot, at(1), TTL)
    taken = jobs.take_turn(second, second.slot, at(TTL + 1), TTL)
    stale = jobs.take_turn(first, first.slot, at(TTL + 2), TTL)

    assert (waiting.move.value, waiting.other) == ("wait", first.request_id)
    assert taken.move.value == "run"
    # The first, redelivered, finds the series taken by the second, not recorded yet: wait.
    assert (stale.move.value, stale.other) == ("wait", second.request_id)


@pytest.mark.parametrize(("concurrency", "move"), [("forbid", "skip"), ("replace", "replace")])
def test_take_turn_reads_the_holders_record(jobs, unique, concurrency, move):
    series = unique("series") + "-{slot}"
    first, second = slot_request(series, 2, concurrency), slot_request(series, 3, concurrency)
    assert first.slot is not None and second.slot is not None
    jobs.take_turn(first, first.slot, NOW, TTL)
    submitted(jobs, first.request_id)

    busy = jobs.take_turn(second, second.slot, at(10), TTL)
    put(jobs, first.request_id, state="CANCELLED")
    free = jobs.take_turn(second, second.slot, at(20), TTL)

    assert (busy.move.value, busy.other) == (move, first.request_id)
    assert free.move.value == "run"


def test_record_skipped_is_created_once_with_its_notification(jobs, unique):
    series = unique("series") + "-{slot}"
    second = slot_request(series, 3)

    assert jobs.record_skipped(second, "holder-1", NOW)
    assert not jobs.record_skipped(second, "holder-1", at(1))

    record = jobs.job_store.get(second.request_id)
    assert (record["state"], record["reason"], record["series"]) == ("SKIPPED", "holder-1", series)
    assert record["outbox"][0]["state"] == "SKIPPED"
    assert second.request_id in jobs.job_store.with_outbox()
    assert second.request_id not in {r.raw["requestId"] for r in jobs.job_store.active()}


# --- JobRecords.begin_read, renew_read, release_reader ------------------------------------


def test_read_leases_coalesce_hints(jobs, unique):
    rid = unique("hints")
    submitted(jobs, rid)
    window = 10.0

    assert jobs.begin_read(rid, at(100), window, at(99))[:2] == (HintAction.READ, None)
    assert (
        jobs.job_store.get(rid)["lastReadAt"] == at(100)
        and jobs.job_store.get(rid)["hintPending"] is False
    )
    # published well before the read began: that read saw it
    assert jobs.begin_read(rid, at(101), window, at(95))[:2] == (HintAction.COVERED, at(100))
    # inside the window: a second read begins at once (a second change soon after a read)
    assert jobs.begin_read(rid, at(101.5), window, at(101))[:2] == (HintAction.READ, at(100))
    assert jobs.job_store.get(rid)["previousReadAt"] == at(100)
    # the third becomes the trailing reader, the next ones wait on it
    assert jobs.begin_read(rid, at(102), window, at(101.8))[:2] == (HintAction.TRAIL, at(101.5))
    assert jobs.job_store.get(rid)["hintPending"] is True
    assert jobs.begin_read(rid, at(103), window, at(102))[:2] == (HintAction.PENDING, at(101.5))
    assert jobs.job_store.get(rid)["lastReadAt"] == at(101.5)

    jobs.renew_read(rid, at(110))
    record = jobs.job_store.get(rid)
    assert record["lastReadAt"] == at(110) and record["hintPending"] is False
    assert record["previousReadAt"] == at(101.5)  # the trailing read counts in its window
    # the window of the trailing read closed: the next hint reads again
    assert jobs.begin_read(rid, at(121), window, at(120))[:2] == (HintAction.READ, at(110))
    assert jobs.job_store.get(rid)["lastReadAt"] == at(121)


def test_release_reader_lets_the_next_hint_read_at_once(jobs, unique):
    rid = unique("reader")
    submitted(jobs, rid)
    jobs.begin_read(rid, at(100), 10.0, at(99))

    jobs.release_reader(rid)

    record = jobs.job_store.get(rid)
    assert record["lastReadAt"] is None and record["hintPending"] is False
    assert jobs.begin_read(rid, at(101), 10.0, at(100))[:2] == (HintAction.READ, None)


# --- JobRecords.due_submissions and claim_retry -------------------------------------------


def test_due_submissions_lists_records_whose_next_attempt_is_due(jobs, unique):
    due, exactly, later, unset, never = (
        unique(n) for n in ("due", "exactly", "later", "unset", "never")
    )
    for rid in (due, exactly, later, unset, never):
        submitted(jobs, rid)
    put(jobs, due, state="RETRYING", nextAttemptAt=at(50))
    put(jobs, exactly, state="RETRYING", nextAttemptAt=at(100))
    put(jobs, later, state="RETRYING", nextAttemptAt=at(101))
    put(jobs, unset, state="RETRYING", nextAttemptAt=None)

    found = set(jobs.due_submissions(at(100)))

    assert {due, exactly} <= found
    assert not {later, unset, never} & found


# name -> (record fields after a submitted attempt 1, attempt to claim, claimable)
RETRY_CASES: dict[str, tuple[dict[str, Any], int, bool]] = {
    "retrying-due": ({"state": "RETRYING", "nextAttemptAt": at(50)}, 2, True),
    "retrying-due-now": ({"state": "RETRYING", "nextAttemptAt": at(100)}, 2, True),
    "retrying-unscheduled": ({"state": "RETRYING", "nextAttemptAt": None}, 2, True),
    "retrying-not-due": ({"state": "RETRYING", "nextAttemptAt": at(101)}, 2, False),
    "retrying-held": (
        {"state": "RETRYING", "nextAttemptAt": at(50), "claim": lease("t", at(0))},
        2,
        False,
    ),
    "retrying-claim-expired": (
        {"state": "RETRYING", "nextAttemptAt": at(50), "claim": lease("t", at(-30))},
        2,
        True,
    ),
    "retrying-cancel-requested": (
        {"state": "RETRYING", "nextAttemptAt": at(50), "cancelRequested": True},
        2,
        False,
    ),
    "retrying-same-attempt": ({"state": "RETRYING", "nextAttemptAt": at(50)}, 1, False),
    "retrying-skipping-an-attempt": ({"state": "RETRYING", "nextAttemptAt": at(50)}, 3, False),
    "parked-own-attempt": (
        {"state": "QUEUED", "vertexJob": None, "reason": QUOTA_REASON, "nextAttemptAt": at(50)},
        1,
        True,
    ),
    "parked-next-attempt": (
        {"state": "QUEUED", "vertexJob": None, "reason": QUOTA_REASON, "nextAttemptAt": at(50)},
        2,
        False,
    ),
    "queued-with-a-job": ({"state": "QUEUED", "nextAttemptAt": at(50)}, 1, False),
    "running": ({"state": "RUNNING", "nextAttemptAt": at(50)}, 2, False),
    "failed": ({"state": "FAILED", "nextAttemptAt": at(50)}, 2, False),
}


@pytest.mark.parametrize("case", list(RETRY_CASES))
def test_claim_retry_follows_submission_claimable(jobs, unique, case):
    fields, attempt, claimable = RETRY_CASES[case]
    rid = unique("retry")
    submitted(jobs, rid)
    put(jobs, rid, **fields)
    before = jobs.job_store.get(rid)
    rule = submission_claimable(JobRecord.decode(before), attempt, at(100))
    assert rule is claimable  # the rule itself

    taken = jobs.claim_retry(rid, attempt, at(100), TTL)

    if claimable:
        assert taken is not None and taken.token
        assert taken.fresh  # the first claim of this attempt: its lookup may be skipped
        assert jobs.job_store.get(rid) == {
            **before,
            "claim": lease(taken.token, at(100), attempt),
            "updatedAt": at(100),
        }
        assert jobs.claim_retry(rid, attempt, at(101), TTL) is None  # now held
    else:
        assert taken is None
        assert jobs.job_store.get(rid) == before


def test_a_retry_claim_after_an_earlier_claim_of_its_attempt_is_not_fresh(jobs, unique):
    rid = unique("retry-again")
    submitted(jobs, rid)
    put(jobs, rid, state="RETRYING", attempt=1, nextAttemptAt=at(50))
    first = jobs.claim_retry(rid, 2, at(60), TTL)
    assert first is not None and first.fresh
    jobs.release(rid, first.token, at(61))  # e.g. its record step failed: a job may exist

    again = jobs.claim_retry(rid, 2, at(62), TTL)

    assert again is not None and not again.fresh  # so it looks up what the first made


def test_claim_retry_of_a_missing_record_is_none(jobs, unique):
    assert jobs.claim_retry(unique("retry-missing"), 2, NOW, TTL) is None


# --- JobRecords outbox and pending cancels ------------------------------------------------


def test_outbox_lists_and_drops_what_was_published(jobs, unique):
    rid, quiet = unique("outbox"), unique("quiet")
    claimed(jobs, quiet)
    first = {"requestId": rid, "state": "RETRYING", "attempt": 1, "reason": "r"}
    second = {"requestId": rid, "state": "FAILED", "attempt": 2, "reason": "f"}
    claimed(jobs, rid)
    put(jobs, rid, outbox=[first, second], outboxPending=True)

    assert rid in jobs.with_outbox() and quiet not in jobs.with_outbox()

    jobs.drop_from_outbox(rid, [first])
    assert (
        jobs.job_store.get(rid)["outbox"] == [second]
        and jobs.job_store.get(rid)["outboxPending"] is True
    )
    assert rid in jobs.with_outbox()

    jobs.drop_from_outbox(rid, [second, {"requestId": rid, "state": "never sent"}])
    assert (
        jobs.job_store.get(rid)["outbox"] == []
        and jobs.job_store.get(rid)["outboxPending"] is False
    )
    assert rid not in jobs.with_outbox()


def test_a_tombstone_waits_in_the_outbox(jobs, unique):
    rid = unique("tomb-outbox")
    jobs.create_tombstone(rid, tombstone(rid, NOW))

    assert rid in jobs.with_outbox()
    jobs.drop_from_outbox(rid, tombstone(rid, NOW)["outbox"])
    assert rid not in jobs.with_outbox()


def test_pending_cancels_are_listed_until_confirmed(jobs, unique):
    rid, quiet = unique("cancels"), unique("no-cancels")
    submitted(jobs, quiet)
    submitted(jobs, rid)
    names = ["projects/p/locations/us-central1/customJobs/1", "projects/p/x/customJobs/2"]

    assert jobs.apply(rid, lambda r: cancels_pending(r, names, at(10))) is not None

    assert (
        jobs.job_store.get(rid)["pendingCancels"] == names
        and jobs.job_store.get(rid)["cancelPending"] is True
    )
    assert rid in jobs.with_pending_cancels() and quiet not in jobs.with_pending_cancels()

    jobs.apply(rid, lambda r: cancels_confirmed(r, names[:1], at(11)))
    assert rid in jobs.with_pending_cancels()
    jobs.apply(rid, lambda r: cancels_confirmed(r, names[1:], at(12)))
    assert (
        jobs.job_store.get(rid)["pendingCancels"] == []
        and jobs.job_store.get(rid)["cancelPending"] is False
    )
    assert rid not in jobs.with_pending_cancels()


# --- DeploymentRecords --------------------------------------------------------------------
#
# Every write is one decision of the serving machine applied in one transaction on the record
# as stored (shared.app.repository.deployments); what is compared here is what the store
# holds after it, on the fake and on Firestore alike.

ENDPOINT = "projects/p/locations/us-central1/endpoints/123"
OPERATION = f"{ENDPOINT}/operations/7"
SETTINGS = ServingSettings()


def empty_endpoint() -> ObservedEndpoint:
    return ObservedEndpoint(ENDPOINT, (), {})


def spot_endpoint(request_id: str, available: int = 1) -> ObservedEndpoint:
    """The endpoint with the request's Spot model on it (one replica required), all traffic."""
    name = f"served [flexjobs {request_id}]"
    spot = ObservedModel(
        "9001", "m", name, MachineSpec("g2-standard-8", "NVIDIA_L4", 1), True, 1, available
    )
    return ObservedEndpoint(ENDPOINT, (spot,), {"9001": 100})


def accepted(deployments: DeploymentRecords, request_id: str) -> JobRequest:
    request = deploy_request(request_id)
    state = new_state(f"served [flexjobs {request_id}]", *policy_of(request.spec, {}), NOW)
    assert deployments.create(request, state, NOW)
    return request


def spot_claimed(deployments: DeploymentRecords, request_id: str) -> InFlight:
    """An accepted deployment whose first step claimed its Spot model's DeployModel; the
    claim."""
    accepted(deployments, request_id)
    stepped = deployments.step(request_id, empty_endpoint(), at(1), SETTINGS)
    assert stepped is not None and stepped.action.call is not None
    return stepped.action.call


def deployed_record(deployments: DeploymentRecords, request_id: str) -> None:
    """A deployment whose Spot model a read showed on the endpoint (DEPLOYED)."""
    claim = spot_claimed(deployments, request_id)
    deployments.answered(request_id, claim, OPERATION, at(2))
    stepped = deployments.step(request_id, spot_endpoint(request_id), at(10), SETTINGS)
    assert stepped is not None and stepped.action.state.phase is Phase.SERVING


def ids(records: list[dict[str, Any]] | list[Stored]) -> set[str]:
    return {str((r.raw if isinstance(r, Stored) else r)["requestId"]) for r in records}


def test_the_followed_list_reads_every_write_since_its_mark_and_saves_on_its_version(
    deployments, unique
):
    """Issue 41: every write of a deployment stamps it, so a sync from the list's mark reads
    it (as of a later read of the list), a count says how many have not ended, and the list
    is saved only on the version it was read at."""
    store = deployments.deployment_store
    first = store.read_followed()
    counted = store.count_alive(first.at)
    rid = unique("followed")
    request = deploy_request(rid)
    state = new_state(f"served [flexjobs {rid}]", *policy_of(request.spec, {}), NOW)
    assert deployments.create(request, state, NOW)

    later = store.read_followed()
    changed = store.changed_since(first.at, later.at, 100)
    assert rid in ids(changed)
    entry = next(s for s in changed if s.raw["requestId"] == rid)
    assert (
        set(entry.raw) <= set(FOLLOWED_FIELDS)
        and entry.raw["serving"] == (store.get(rid) or {})["serving"]
    )
    assert entry.key == doc_id(rid) and entry.partial
    assert store.count_alive(later.at) == counted + 1
    assert rid in ids(store.alive(later.at))
    # As of the first read, the record did not exist yet.
    assert rid not in ids(store.changed_since(first.at, first.at, 100))

    listed = built_followed([(entry.key, entry)], later.at, NOW)
    assert store.save_followed(listed, later.version) is True
    assert store.save_followed(listed, later.version) is False  # moved on by the first save
    saved = store.read_followed()
    assert saved.watch is not None and rid in ids(list(saved.watch.active.values()))


def test_a_deployment_is_created_once_with_its_machine_s_first_state(deployments, unique):
    rid = unique("deploy")
    request = deploy_request(rid)
    state = new_state(f"served [flexjobs {rid}]", *policy_of(request.spec, {}), NOW)

    assert deployments.create(request, state, NOW)
    assert not deployments.create(request, state, at(1))  # a redelivery: nothing written

    stored = deployments.deployment_store.get(rid)
    assert stored == new_deployment(request, state, NOW)
    assert stored["state"] == "ACCEPTED" and stored["serving"]["phase"] == "DEPLOYING"
    assert stored["serving"]["intent"]["kind"] == "SERVE"
    assert rid in ids(deployments.deployment_store.alive())
    assert rid in ids(deployments.deployment_store.on_endpoint(ENDPOINT))
    assert rid not in ids(deployments.deployment_store.with_outbox())


def test_a_step_claims_the_spot_deploy_once_before_it_is_sent(deployments, unique):
    rid = unique("deploy-claim")
    accepted(deployments, rid)

    first = deployments.step(rid, empty_endpoint(), at(1), SETTINGS)
    second = deployments.step(rid, empty_endpoint(), at(2), SETTINGS)

    assert first is not None and first.action.kind is ActionKind.CALL
    assert first.action.call is not None and first.action.call.kind is CallKind.DEPLOY_SPOT
    # The second decides on the claim the first wrote: nothing more is sent.
    assert second is not None and second.action.kind is not ActionKind.CALL
    pending = deployments.deployment_store.get(rid)["serving"]["pending"]
    assert pending["call"] == "DeployModel(spot)" and pending["operation"] is None
    assert deployments.deployment_store.get(rid)["state"] == "ACCEPTED"


def test_an_answered_spot_deploy_makes_the_record_deploying(deployments, unique):
    rid = unique("deploy-op")
    claim = spot_claimed(deployments, rid)

    deployments.answered(rid, claim, OPERATION, at(2))
    before = deployments.deployment_store.get(rid)
    other = replace(claim, at=at(99))
    deployments.answered(rid, other, "someone-else's", at(3))  # not this claim's: no write

    assert before["state"] == "DEPLOYING" and before["operation"] == OPERATION
    assert before["serving"]["pending"]["operation"] == OPERATION
    assert before["updatedAt"] == at(2)
    assert deployments.deployment_store.get(rid) == before


def test_a_read_that_shows_the_spot_model_makes_it_deployed_and_owes_deployed(deployments, unique):
    rid = unique("deploy-seen")
    deployed_record(deployments, rid)

    record = deployments.deployment_store.get(rid)
    assert record["state"] == "DEPLOYED" and record["deployedModelId"] == "9001"
    assert record["deployedAt"] == at(10) and record["updatedAt"] == at(10)
    assert record["serving"]["phase"] == "SERVING" and record["serving"]["pending"] is None
    assert [m["state"] for m in record["outbox"]] == ["DEPLOYED"]
    assert record["outbox"][0]["kind"] == "deployModel" and record["outboxPending"] is True
    assert rid in ids(deployments.deployment_store.with_outbox())
    assert rid in ids(deployments.deployment_store.alive())

    deployments.drop_from_outbox(rid, record["outbox"])
    after = deployments.deployment_store.get(rid)
    assert (after["outbox"], after["outboxPending"]) == ([], False)
    assert [m["state"] for m in after["notified"]] == ["DEPLOYED"]
    assert rid not in ids(deployments.deployment_store.with_outbox())


def test_a_step_on_the_same_read_writes_nothing(deployments, unique):
    rid = unique("deploy-same")
    deployed_record(deployments, rid)
    before = deployments.deployment_store.get(rid)

    again = deployments.step(rid, spot_endpoint(rid), at(70), SETTINGS)

    assert again is not None and again.action.kind is ActionKind.NOTHING
    assert deployments.deployment_store.get(rid) == before
    # A capacity change is written, accounted since the last one.
    deployments.step(rid, spot_endpoint(rid, available=0), at(130), SETTINGS)
    stored = ServingState.decode(deployments.deployment_store.get(rid)["serving"])
    assert stored is not None and stored.phase is Phase.DEFICIT
    assert [(c.at, c.capacity.spot) for c in stored.history][-2:] == [(at(10), 1), (at(130), 0)]
    assert stored.spot_node_seconds == 120


def test_a_spot_deploy_refused_for_good_fails_once(deployments, unique):
    rid = unique("deploy-fail")
    claim = spot_claimed(deployments, rid)

    deployments.refused(rid, claim, "model not found", at(3), retry_at=None)
    failed = deployments.deployment_store.get(rid)
    deployments.refused(rid, claim, "a later refusal", at(4), retry_at=None)

    assert failed["state"] == "FAILED" and "model not found" in failed["reason"]
    assert failed["endedAt"] == at(3) and failed["serving"]["phase"] == "FAILED"
    assert [m["state"] for m in failed["outbox"]] == ["FAILED"]
    assert deployments.deployment_store.get(rid) == failed
    assert rid not in ids(deployments.deployment_store.alive())
    assert deployments.step(rid, empty_endpoint(), at(5), SETTINGS) is not None
    assert deployments.deployment_store.get(rid) == failed  # ended: no read moves it


def test_a_spot_deploy_refused_for_quota_is_parked(deployments, unique):
    rid = unique("deploy-park")
    claim = spot_claimed(deployments, rid)

    deployments.refused(rid, claim, "quota exceeded", at(3), retry_at=at(63))

    record = deployments.deployment_store.get(rid)
    assert record["state"] == "ACCEPTED" and record["reason"] == "quota"
    assert record["serving"]["pending"] is None
    assert record["serving"]["retryAt"] == at(63).isoformat()
    early = deployments.step(rid, empty_endpoint(), at(30), SETTINGS)
    assert early is not None and early.action.kind is not ActionKind.CALL
    due = deployments.step(rid, empty_endpoint(), at(63), SETTINGS)
    assert due is not None and due.action.kind is ActionKind.CALL


def test_a_lost_call_keeps_its_claim_and_a_released_one_drops_it(deployments, unique):
    lost_rid, released_rid = unique("deploy-lost"), unique("deploy-released")
    lost_claim = spot_claimed(deployments, lost_rid)
    released_claim = spot_claimed(deployments, released_rid)

    deployments.lost(lost_rid, lost_claim, at(3))
    deployments.released(released_rid, released_claim, at(3))

    pending = deployments.deployment_store.get(lost_rid)["serving"]["pending"]
    assert pending["call"] == "DeployModel(spot)" and pending["unknown"] is True
    assert deployments.deployment_store.get(released_rid)["serving"]["pending"] is None
    again = deployments.step(released_rid, empty_endpoint(), at(4), SETTINGS)
    assert again is not None and again.action.kind is ActionKind.CALL


def test_an_undeploy_intent_is_written_once_and_lasts(deployments, unique):
    rid = unique("deploy-cancel")
    deployed_record(deployments, rid)

    told = deployments.tell(rid, Intent.UNDEPLOY, at(20))
    assert told is not None and told.phase is Phase.UNDEPLOYING
    assert deployments.tell(rid, Intent.UNDEPLOY, at(21)) is None
    assert deployments.tell(rid, Intent.RESUME, at(22)) is None  # an undeploy is the last word

    serving = deployments.deployment_store.get(rid)["serving"]
    assert serving["intent"] == {"kind": "UNDEPLOY", "at": at(20).isoformat()}
    assert serving["phase"] == "UNDEPLOYING"


def test_a_traffic_move_is_written_only_on_the_state_it_was_decided_from(deployments, unique):
    rid = unique("deploy-moved")
    deployed_record(deployments, rid)
    deployments.tell(rid, Intent.UNDEPLOY, at(20))
    other = ObservedModel("42", "m2", "hand", MachineSpec("g2-standard-8"), False, 1, 1)
    spot = spot_endpoint(rid).models[0]
    observed = ObservedEndpoint(ENDPOINT, (spot, other), {"9001": 100})

    stepped = deployments.step(rid, observed, at(30), SETTINGS)
    assert stepped is not None and stepped.action.kind is ActionKind.TRAFFIC
    assert stepped.action.split == {"42": 100}
    before = deployments.deployment_store.get(rid)
    assert before["updatedAt"] == at(20)  # a traffic move is written after its call

    # Another write lands first: the move's state is not written over it.
    deployments.drop_from_outbox(rid, before["outbox"])
    deployments.tell(rid, Intent.UNDEPLOY, at(31))
    assert deployments.moved(rid, stepped, at(32), at(31)) is True  # serving state unchanged
    moved = ServingState.decode(deployments.deployment_store.get(rid)["serving"])
    assert moved is not None and (moved.read_at, moved.endpoint_at) == (at(32), at(31))
    stale = replace(stepped, before=replace(stepped.before, hedges=7))
    kept = deployments.deployment_store.get(rid)
    assert deployments.moved(rid, stale, at(33), at(33)) is False
    assert deployments.deployment_store.get(rid) == kept


#: A Spot DeployModel's claim, for calls on a record that does not exist.
CLAIM = InFlight(CallKind.DEPLOY_SPOT, "served [flexjobs deploy-missing]", NOW, replicas=1)

MISSING_DEPLOYMENT_CALLS: dict[str, Callable[[DeploymentRecords, str], Any]] = {
    "tell": lambda d, rid: d.tell(rid, Intent.UNDEPLOY, NOW),
    "step": lambda d, rid: d.step(rid, empty_endpoint(), NOW, SETTINGS),
    "answered": lambda d, rid: d.answered(rid, CLAIM, OPERATION, NOW),
    "lost": lambda d, rid: d.lost(rid, CLAIM, NOW),
    "released": lambda d, rid: d.released(rid, CLAIM, NOW),
    "refused": lambda d, rid: d.refused(rid, CLAIM, "no", NOW, retry_at=None),
    "drop_from_outbox": lambda d, rid: d.drop_from_outbox(rid, [{"state": "HEDGED"}]),
}


@pytest.mark.parametrize("call", list(MISSING_DEPLOYMENT_CALLS))
def test_deployment_calls_on_a_missing_record_change_nothing(deployments, unique, call):
    rid = unique("deploy-missing")

    assert MISSING_DEPLOYMENT_CALLS[call](deployments, rid) is None

    assert deployments.deployment_store.get(rid) is None


# --- RejectionLog -----------------------------------------------------------------------


def test_a_rejection_round_trips_and_is_overwritten_on_redelivery(stores, unique):
    rid = unique("refused/with slash")
    first = {
        "requestId": rid,
        "messageId": "m-1",
        "errors": [{"path": "customJob", "message": "missing"}],
        "errorCount": 1,
        "source": "pubsub",
        "receivedAt": NOW,
        "payloadExcerpt": "{}",
        "payloadBytes": 2,
    }

    stores.rejections.record(rid, first)
    assert stores.read_rejection(rid) == first

    second = {"requestId": rid, "messageId": "m-2", "errors": [], "receivedAt": at(1)}
    stores.rejections.record(rid, second)
    assert stores.read_rejection(rid) == second
    assert stores.read_rejection(unique("never-refused")) is None


def test_a_rejection_is_stored_as_a_copy(stores, unique):
    rid = unique("refused-copy")
    errors = [{"path": "customJob", "message": "missing"}]

    stores.rejections.record(rid, {"requestId": rid, "errors": errors})
    errors.append({"path": "later", "message": "mutated"})

    assert stores.read_rejection(rid) == {
        "requestId": rid,
        "errors": [{"path": "customJob", "message": "missing"}],
    }


# --- the port's own primitives ----------------------------------------------------------


def test_create_is_a_conditional_put(jobs, unique):
    rid = unique("create")
    made = jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED"})
    assert made is not None and made.raw == {"requestId": rid, "state": "ACCEPTED"}
    assert jobs.job_store.create(rid, {"requestId": rid, "state": "QUEUED"}) is None
    assert jobs.job_store.get(rid)["state"] == "ACCEPTED"


def test_read_gives_the_record_with_its_version(jobs, unique):
    rid = unique("read")
    assert jobs.job_store.read(rid) is None
    made = jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED"})
    assert made is not None

    stored = jobs.job_store.read(rid)

    assert stored is not None and stored.raw == {"requestId": rid, "state": "ACCEPTED"}
    assert stored.version == made.version and not stored.partial
    # Its version is the one a known record's write must still find: it chains without a read.
    bump = Change(JobState.ACCEPTED, {"n": 1})
    done = jobs.job_store.transact(rid, lambda _raw: bump, stored)
    assert done is not None and done.change == bump and jobs.job_store.get(rid)["n"] == 1


def test_transact_sets_deletes_and_merges_into_the_named_attempt(jobs, unique):
    rid = unique("primitives")
    jobs.job_store.create(
        rid, {"requestId": rid, "state": "QUEUED", "attempt": 2, "claim": {"t": 1}}
    )
    change = Change(
        JobState.QUEUED,
        {"updatedAt": at(1)},
        {"workLostSeconds": 5.0},
        deletes=("claim",),
        attempt_no=1,
    )

    assert jobs.job_store.transact(rid, lambda current: change).change == change

    record = jobs.job_store.get(rid)
    assert "claim" not in record and record["updatedAt"] == at(1)
    assert jobs.get_attempt(rid, 1) == {"workLostSeconds": 5.0}
    assert jobs.get_attempt(rid, 2) is None


def test_transact_never_decides_on_a_missing_record(jobs, unique):
    seen = []
    assert jobs.job_store.transact(unique("missing"), seen.append) is None
    assert seen == []


def test_a_decision_that_raises_writes_nothing(jobs, unique):
    rid = unique("raises")
    jobs.job_store.create(rid, {"requestId": rid, "state": "QUEUED"})

    def refuse(current):
        raise SubmissionInProgress("held")

    with pytest.raises(SubmissionInProgress):
        jobs.job_store.transact(rid, refuse)
    assert jobs.job_store.get(rid) == {"requestId": rid, "state": "QUEUED"}


# --- known versions: a write decided on the record as last read or written -----------------


def test_a_write_on_a_known_version_chains_without_reads(jobs, unique):
    rid = unique("known")
    made = jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED", "n": 0})
    assert made is not None
    seen: list[dict[str, Any]] = []

    def bump(raw: dict[str, Any]) -> Change:
        seen.append(raw)
        return Change(JobState.ACCEPTED, {"n": raw["n"] + 1})

    first = jobs.job_store.transact(rid, bump, made)
    second = jobs.job_store.transact(rid, bump, first.record)

    assert [raw["n"] for raw in seen] == [0, 1]  # each decided once, on the known record
    assert second.record.raw["n"] == 2 and jobs.job_store.get(rid)["n"] == 2


def test_a_write_on_a_stale_version_is_decided_again_on_the_record(jobs, unique):
    rid = unique("stale")
    made = jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED", "marks": []})
    # Another writer lands after this caller's version was taken.
    jobs.job_store.transact(rid, lambda raw: Change(JobState.ACCEPTED, {"marks": ["other"]}))

    def mark(raw: dict[str, Any]) -> Change:
        return Change(JobState.ACCEPTED, {"marks": [*raw["marks"], "mine"]})

    done = jobs.job_store.transact(rid, mark, made)

    assert jobs.job_store.get(rid)["marks"] == ["other", "mine"]  # no update lost
    assert done.record.raw["marks"] == ["other", "mine"]


def test_a_no_write_decision_on_a_known_version_stands(jobs, unique):
    rid = unique("noop")
    made = jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED"})
    done = jobs.job_store.transact(rid, lambda raw: None, made)
    assert done.change is None and done.record.raw["requestId"] == rid


def test_a_known_version_of_a_deleted_record_is_never_written(jobs, unique, delete_record):
    rid = unique("deleted")
    made = jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED"})
    delete_record(rid)
    assert jobs.job_store.transact(rid, lambda raw: Change(JobState.QUEUED, {"x": 1}), made) is None
    assert jobs.job_store.get(rid) is None


def test_update_attempt_merges_one_attempt_document(jobs, unique):
    rid = unique("attempt")
    jobs.job_store.create(rid, {"requestId": rid, "state": "RETRYING", "attempt": 2})
    jobs.attempt_store.update_attempt(rid, 1, {"state": "FAILED", "times": {"a": 1}})
    jobs.attempt_store.update_attempt(rid, 1, {"workLostSeconds": 5.0, "times": {"b": 2}})
    assert jobs.get_attempt(rid, 1) == {
        "state": "FAILED",
        "workLostSeconds": 5.0,
        "times": {"a": 1, "b": 2},
    }


def test_a_decision_hands_back_its_result_with_the_write(jobs, unique):
    rid = unique("decided")
    assert jobs.job_store.create(rid, {"requestId": rid, "state": "ACCEPTED", "n": 0})
    bump = Change(JobState.ACCEPTED, {"n": 1})

    written = jobs.job_store.transact(rid, lambda raw: Decided(bump, ("was", raw["n"])))
    kept = jobs.job_store.transact(rid, lambda raw: Decided(None, ("is", raw["n"])))

    assert written is not None and written.change == bump and written.result == ("was", 0)
    assert kept is not None and kept.change is None and kept.result == ("is", 1)
    assert jobs.job_store.transact(rid, lambda raw: bump).result is None  # no result given


def test_a_deployment_decision_hands_back_its_result_with_the_write(deployments, unique):
    rid = unique("deploy-decided")
    accepted(deployments, rid)
    store = deployments.deployment_store
    change = DeploymentChange({"note": "a"})

    written = store.transact(rid, lambda raw: Decided(change, raw["state"]))
    kept = store.transact(rid, lambda raw: Decided(None, raw["note"]))

    assert written is not None and written.change == change and written.result == "ACCEPTED"
    assert kept is not None and kept.change is None and kept.result == "a"
    assert written.record.raw["note"] == "a"
    assert store.transact(unique("missing"), lambda raw: Decided(change, 1)) is None
