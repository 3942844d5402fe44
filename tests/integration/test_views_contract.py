"""The JobViews contract: the same cases on the in-memory fake and on the Firestore emulator.

Records are written through the stores' own ``create`` (and attempts through
:class:`shared.app.repository.jobs.JobRecords`), then read through the views, so the fake's queries
are held to what Firestore answers: the order (``createdAt`` then document id, both descending),
the cursor, the filters, the bounds and the fields selected.

The Firestore side shares the session's emulator with other tests and never resets it. Each
test writes its records far in the future, later than any earlier test's (``epoch``), and
reads with ``since`` at that time, so the whole-collection queries see only its own records;
counts are compared before and after.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.app.ports import DeploymentStore
from shared.app.repository.jobs import JobRecords
from shared.status.listing import (
    ATTEMPT_FIELDS,
    DEPLOYMENT_LIST_FIELDS,
    JOB_FIELDS,
    LIST_FIELDS,
    TOTAL_FIELDS,
    Cursor,
    Listing,
)
from shared.status.ports import JobViews
from tests.fakes import (
    InMemoryDeploymentStore,
    InMemoryJobDatabase,
    InMemoryJobViews,
    in_memory_records,
)

pytestmark = pytest.mark.integration

LOCATION = "us-central1"
_epochs = itertools.count(1)


@dataclass
class Views:
    backend: str
    # What writes the records the views read: its job stores, and the summary's.
    records: JobRecords
    deployments: DeploymentStore
    views: JobViews


@pytest.fixture(params=["memory", "firestore"])
def views(request: pytest.FixtureRequest) -> Views:
    if request.param == "memory":
        database, deployments = InMemoryJobDatabase(), InMemoryDeploymentStore()
        records = in_memory_records(LOCATION, database)
        return Views("memory", records, deployments, InMemoryJobViews(database, deployments))
    from shared.adapters.firestore.database import Firestore
    from shared.adapters.firestore.deployment_store import FirestoreDeploymentStore
    from shared.adapters.firestore.views import FirestoreJobViews
    from shared.bootstrap import Ports, job_records
    from shared.kernel.config import Settings

    # Only the Firestore side needs the emulator stack: `-k memory` runs without it.
    client = request.getfixturevalue("firestore_client")
    project = request.getfixturevalue("local_stack").config.project
    settings = Settings(project=project, location=LOCATION)
    database = Firestore(settings, client=client)
    return Views(
        "firestore",
        job_records(settings, Ports(firestore=database)),
        FirestoreDeploymentStore(database),
        FirestoreJobViews(database, timeout=30),
    )


@pytest.fixture(scope="session")
def firestore_client(local_stack: Any) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=local_stack.config.project)


@pytest.fixture
def epoch() -> datetime:
    """A time later than every record written so far: this test's own stretch of time."""
    return datetime(2200, 1, 1, tzinfo=UTC) + timedelta(days=next(_epochs) * 100)


@pytest.fixture
def rid() -> Any:
    run = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{run}"


def job(request_id: str, created: datetime, state: str = "QUEUED", **fields: Any) -> dict:
    return {
        "requestId": request_id,
        "displayName": f"name of {request_id}",
        "kind": "customJob",
        "state": state,
        "attempt": 1,
        "createdAt": created,
        # Not shown on any page: never read.
        "request": '{"big": "body"}',
        "claim": {"token": "t", "expiresAt": created},
        **fields,
    }


def put(views: Views, *records: dict) -> None:
    for record in records:
        assert views.records.job_store.create(record["requestId"], record)


def ids(rows: list[dict]) -> list[str]:
    return [r["requestId"] for r in rows]


def test_a_page_is_newest_first_with_ties_by_document_id(views, epoch, rid):
    same = epoch + timedelta(hours=1)
    put(
        views,
        job(rid("a"), same),
        job(rid("c"), same),
        job(rid("b"), same),
        job(rid("old"), epoch),
        job(rid("new"), epoch + timedelta(hours=2)),
    )
    page = views.views.jobs(Listing(since=epoch))
    assert ids(page.rows) == [rid("new"), rid("c"), rid("b"), rid("a"), rid("old")]
    assert page.next is None


def test_a_cursor_resumes_exactly_after_the_last_row(views, epoch, rid):
    same = epoch + timedelta(hours=1)
    put(views, *(job(rid(n), same) for n in "abcde"), job(rid("z"), epoch))
    seen, after = [], None
    while True:
        page = views.views.jobs(Listing(since=epoch, size=2, after=after))
        seen.append(ids(page.rows))
        if page.next is None:
            break
        assert page.next == Cursor(same if len(seen) < 3 else epoch, page.rows[-1]["requestId"])
        after = page.next
    assert seen == [[rid("e"), rid("d")], [rid("c"), rid("b")], [rid("a"), rid("z")]]


def test_a_page_reads_only_the_fields_it_shows(views, epoch, rid):
    put(views, job(rid("a"), epoch, gpuSeconds=3600.0, cost={"costUsd": 1.5, "priced": True}))
    (row,) = views.views.jobs(Listing(since=epoch)).rows
    assert set(row) <= set(LIST_FIELDS) and "request" not in row and "claim" not in row
    assert row["gpuSeconds"] == 3600.0 and row["cost"] == {"costUsd": 1.5, "priced": True}
    assert row["createdAt"] == epoch


def test_states_and_age_filter_the_page(views, epoch, rid):
    put(
        views,
        job(rid("q-old"), epoch, "QUEUED"),
        job(rid("run"), epoch + timedelta(hours=1), "RUNNING"),
        job(rid("q-new"), epoch + timedelta(hours=2), "QUEUED"),
        job(rid("done"), epoch + timedelta(hours=3), "SUCCEEDED"),
    )
    jobs = views.views.jobs
    assert ids(jobs(Listing(states=("QUEUED",), since=epoch)).rows) == [rid("q-new"), rid("q-old")]
    assert ids(jobs(Listing(states=("RUNNING", "SUCCEEDED"), since=epoch)).rows) == [
        rid("done"),
        rid("run"),
    ]
    later = epoch + timedelta(minutes=30)
    assert ids(jobs(Listing(states=("QUEUED", "RUNNING"), since=later)).rows) == [
        rid("q-new"),
        rid("run"),
    ]
    first = jobs(Listing(states=("QUEUED", "RUNNING"), since=epoch, size=1))
    second = jobs(Listing(states=("QUEUED", "RUNNING"), since=epoch, size=1, after=first.next))
    assert ids(first.rows + second.rows) == [rid("q-new"), rid("run")]


def test_one_job_with_its_fields_and_attempts(views, epoch, rid):
    request_id = rid("team/run 1%")  # a requestId that needs escaping as a document id
    put(views, job(request_id, epoch, "RETRYING", notified=[{"state": "RETRYING"}]))
    for n in (1, 2, 10):
        views.records.update_attempt(request_id, n, {"attempt": n, "state": "FAILED", "note": "x"})

    found = views.views.job(request_id)
    assert found is not None and set(found) <= set(JOB_FIELDS)
    assert found["requestId"] == request_id and "request" not in found
    assert found["notified"] == [{"state": "RETRYING"}]
    # By key, in attempt order; those that do not exist (3 to 9) are left out.
    attempts = views.views.attempts(request_id, range(1, 11))
    assert [a["attempt"] for a in attempts] == [1, 2, 10]
    assert all(set(a) <= set(ATTEMPT_FIELDS) and "note" not in a for a in attempts)
    assert views.views.attempts(request_id, range(1, 3)) == attempts[:2]
    assert views.views.job(rid("missing")) is None
    assert views.views.attempts(rid("missing"), range(1, 4)) == []
    assert views.views.attempts(request_id, range(1, 1)) == []


def test_counts_by_state(views, epoch, rid):
    before = views.views.count("RETRYING")
    put(views, *(job(rid(f"r{n}"), epoch, "RETRYING") for n in range(3)), job(rid("q"), epoch))
    assert views.views.count("RETRYING") == before + 3


def test_jobs_ended_since_newest_end_first_and_bounded(views, epoch, rid):
    ends = {"a": 3, "b": 1, "c": 2, "d": -1}
    put(
        views,
        *(
            job(rid(n), epoch, "SUCCEEDED", endedAt=epoch + timedelta(hours=h), gpuSeconds=60.0)
            for n, h in ends.items()
        ),
    )
    ended = views.views.ended_since(epoch, limit=10)
    assert [r["endedAt"] for r in ended] == [epoch + timedelta(hours=h) for h in (3, 2, 1)]
    assert all(set(r) <= set(TOTAL_FIELDS) and r["gpuSeconds"] == 60.0 for r in ended)
    assert len(views.views.ended_since(epoch, limit=2)) == 2


def test_deployments_page_and_one_deployment(views, epoch, rid):
    for n, hours in (("a", 0), ("b", 1), ("c", 2)):
        record = {
            "requestId": rid(n),
            "kind": "deployModel",
            "state": "DEPLOYED",
            "endpoint": "projects/p/locations/l/endpoints/1",
            "spot": True,
            "createdAt": epoch + timedelta(hours=hours),
            "request": "{}",
        }
        assert views.deployments.create(rid(n), record)
    # Deployments have no filters: the first page may hold other tests' (older) records.
    first = views.views.deployments(Listing(size=2))
    assert ids(first.rows) == [rid("c"), rid("b")]
    assert all(set(r) <= set(DEPLOYMENT_LIST_FIELDS) for r in first.rows)
    second = views.views.deployments(Listing(size=1, after=first.next))
    assert ids(second.rows) == [rid("a")]
    found = views.views.deployment(rid("b"))
    assert found is not None and found["state"] == "DEPLOYED" and "request" not in found
    assert views.views.deployment(rid("missing")) is None


def test_the_admission_summary_is_read_as_the_tick_wrote_it(views, epoch, rid):
    summary = {
        "at": epoch,
        "queues": [
            {
                "name": rid("queue"),
                "waiting": 1,
                "line": [{"requestId": rid("w"), "position": 1, "estimatedStart": None}],
            }
        ],
        "projectQuota": [],
        "quotaUnreadable": None,
    }
    views.records.admissions.write_summary(summary)
    assert views.views.admission_summary() == summary
    later = {**summary, "at": epoch + timedelta(minutes=1), "queues": []}
    views.records.admissions.write_summary(later)  # whole: what the last tick wrote, nothing older
    assert views.views.admission_summary() == later
