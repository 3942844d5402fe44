"""The intake path end to end: Pub/Sub emulator → function → simulator + Firestore emulator."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared import bootstrap
from shared.app import handlers
from shared.app.commands import SubmitJob
from shared.domain.model.delivery import Delivery
from shared.kernel.config import Settings
from tests.events import load
from tests.fakes import key_labels
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def request(request_id: str) -> dict:
    body = load("seed_request")
    body["requestId"] = request_id
    return body


def record(db, request_id: str) -> dict | None:
    snap = db.collection("jobs").document(request_id).get()
    return snap.to_dict() if snap.exists else None


def creates(stack, label: str | None = None, ok_only: bool = True) -> list[dict]:
    calls = stack.simulator.calls(method="CreateCustomJob")
    if ok_only:
        calls = [c for c in calls if c["code"] == "OK"]
    if label is not None:
        calls = [
            c for c in calls if c["request"]["customJob"]["labels"]["flexjobs-request"] == label
        ]
    return calls


def test_seed_example_yields_one_flex_start_job_and_its_record(stack, db):
    stack.publish_request(load("seed_request"))

    doc = wait_for(lambda: (r := record(db, "seed-1")) and r.get("vertexJob") and r, what="record")
    assert doc["state"] in {"QUEUED", "RUNNING", "SUCCEEDED"}
    assert doc["requestId"] == "seed-1"
    assert doc["kind"] == "customJob"
    assert doc["attempt"] == 1
    assert doc["strategy"] == "FLEX_START"
    assert doc["createdAt"] <= doc["updatedAt"]
    (call,) = creates(stack)
    job = call["request"]["customJob"]
    assert job["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"
    assert job["jobSpec"]["scheduling"]["maxWaitDuration"] == "1800s"
    assert key_labels(job["labels"]) == {"flexjobs-request": "seed-1", "flexjobs-attempt": "1"}
    attempt = db.collection("jobs").document("seed-1").collection("attempts").document("1").get()
    assert attempt.to_dict()["vertexJob"] == doc["vertexJob"]


def test_fifty_requests_published_three_times_concurrently_yield_fifty_jobs(stack, db, unique):
    ids = [unique(f"redeliver-{i:02d}") for i in range(50)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda rid: stack.publish_request(request(rid)), ids * 3))

    def all_recorded():
        docs = [record(db, rid) for rid in ids]
        return all(d and d.get("vertexJob") for d in docs) and docs

    docs = wait_for(all_recorded, timeout=180, what="50 records with their Vertex job")
    time.sleep(3)  # let any straggling redelivery land before counting
    assert len(creates(stack)) == 50
    assert len({d["vertexJob"] for d in docs}) == 50
    assert len(list(db.collection("jobs").stream())) == 50


class DiesAfterCreate:
    """Wraps the real store; the first record write dies like a killed process would."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def record_submission(self, token, submission, now, known=None):
        raise KeyboardInterrupt("process killed between CreateCustomJob and the record")


def test_crash_between_create_and_record_still_yields_one_job(stack, db, unique):
    rid = unique("crash")
    real = bootstrap.build_intake(Settings.from_env())
    real.settings = dataclasses.replace(real.settings, claim_ttl_seconds=5)
    crashing = dataclasses.replace(real, jobs=DiesAfterCreate(real.jobs))
    message = Delivery(data=json.dumps(request(rid)).encode(), message_id="m-crash")
    with pytest.raises(KeyboardInterrupt):
        handlers.submit_job(SubmitJob(message=message), crashing)
    assert len(creates(stack, label=rid)) == 1
    assert record(db, rid)["state"] == "ACCEPTED"

    # The redelivery through Pub/Sub waits out the dead claim, then adopts the job by label.
    stack.publish_request(request(rid))
    doc = wait_for(lambda: (r := record(db, rid)) and r.get("vertexJob") and r, what="adoption")
    assert len(creates(stack, label=rid)) == 1
    (job,) = [j for j in stack.simulator.jobs() if j["labels"]["flexjobs-request"] == rid]
    assert doc["vertexJob"] == job["name"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"this is not json", "not JSON"),
        (b"[1, 2, 3]", "JSON object"),
        (json.dumps({"requestId": "no-kind-REPLACE"}).encode(), "customJob"),
    ],
)
def test_bad_input_is_acknowledged_logged_and_creates_nothing(stack, db, unique, data, reason):
    data = data.replace(b"REPLACE", unique("x").encode())
    message_id = stack.publish_request(data)
    rejection_id = json.loads(data)["requestId"] if b"requestId" in data else message_id

    doc = wait_for(
        lambda: (s := db.collection("rejections").document(rejection_id).get()).exists and s,
        what="the rejection document",
    ).to_dict()
    assert any(reason in e["message"] for e in doc["errors"])
    assert doc["source"] == "pubsub"
    time.sleep(4)  # long enough for a redelivery (min backoff 1 s) had it not been acknowledged
    logs = stack.function_logs("handle_job_request")
    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    mine = [
        line
        for line in lines
        if line.get("logging.googleapis.com/labels", {}).get("requestId") == rejection_id
    ]
    assert [line["message"] for line in mine] == ["request rejected"]
    assert mine[0]["severity"] == "WARNING"
    assert creates(stack, ok_only=False) == []
    assert list(db.collection("jobs").stream()) == []


def test_vertex_unavailable_is_redelivered_then_creates_once(stack, db, unique):
    rid = unique("outage")
    stack.simulator.inject_faults(code="UNAVAILABLE", count=1_000_000)
    stack.publish_request(request(rid))
    wait_for(
        lambda: len([c for c in stack.simulator.calls() if c["code"] == "UNAVAILABLE"]) >= 8,
        what="several refused calls (redeliveries)",
    )
    assert (record(db, rid) or {}).get("vertexJob") is None

    stack.simulator.clear_faults()
    doc = wait_for(
        lambda: (r := record(db, rid)) and r.get("vertexJob") and r, timeout=90, what="job"
    )
    assert doc["state"] in {"QUEUED", "RUNNING", "SUCCEEDED"}
    time.sleep(3)
    assert len(creates(stack, label=rid)) == 1
