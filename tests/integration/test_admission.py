"""Admission queues on the embedded stack: a preemptible quota of 8 A100s in the simulator
(Vertex's RESOURCE_EXHAUSTED past it), a queue file of two queues of 4 each, and six
4-GPU FLEX_START requests. They are admitted two at a time, each queue's in arrival order,
and Vertex refuses none; on a stack of its own (the queue file is the functions' env).

Arrival is intake's, not the publisher's: Pub/Sub may deliver a batch in any order, so the
test publishes each request once the one before it has a record.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from flexjobs_local.stack import LocalStack, StackConfig
from tests.events import load
from tests.integration.helpers import running_stack, wait_for
from tests.integration.test_lifecycle import BUCKET, record

pytestmark = pytest.mark.integration

A100 = "NVIDIA_TESLA_A100"
QUOTA = 8
GPUS_EACH = 4
QUEUES = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 8}
queues:
  - name: team-a
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
  - name: team-b
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
"""
ORDER = ["a1", "b1", "a2", "b2", "a3", "b3"]


@pytest.fixture(scope="module")
def queued_stack() -> Iterator[LocalStack]:
    config = StackConfig(
        tick_seconds=2.0,
        default_capacity=64,
        function_env={"FLEXJOBS_QUEUES": QUEUES, "FLEXJOBS_BACKOFF_BASE_SECONDS": "0"},
    )
    with running_stack(config) as stack:
        yield stack


@pytest.fixture
def db(queued_stack: LocalStack) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=queued_stack.config.project)


def request(rid: str, queue: str | None = None) -> dict[str, Any]:
    """A FLEX_START job of 4 A100s in ``queue`` (default: ``rid``'s team's), 10 simulated
    minutes long."""
    body = copy.deepcopy(load("seed_request"))
    body["requestId"] = rid
    body["queue"] = queue or f"team-{rid[0]}"
    job = body["customJob"]
    pool = job["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"] = {
        "machineType": "a2-highgpu-4g",
        "acceleratorType": A100,
        "acceleratorCount": GPUS_EACH,
    }
    pool["containerSpec"] = {
        "imageUri": "python:3.10",
        "command": ["python", "train.py"],
        "env": [{"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": "600"}],
    }
    job["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": f"gs://{BUCKET}/{rid}"}
    return body


def test_six_requests_are_admitted_two_at_a_time_and_none_is_refused(
    queued_stack: LocalStack, db: Any
) -> None:
    stack, sim = queued_stack, queued_stack.simulator
    sim.set_quota(stack.config.location, A100, "preemptible", QUOTA)
    for rid in ORDER:
        stack.publish_request(request(rid))
        wait_for(lambda rid=rid: record(db, rid).get("admission"), 60, f"{rid}'s record")

    most_in_flight = 0

    def all_ended() -> bool:
        nonlocal most_in_flight
        live = [j for j in sim.jobs("CustomJob") if j["state"] not in _ENDED]
        most_in_flight = max(most_in_flight, GPUS_EACH * len(live))
        return all(record(db, rid).get("state") == "SUCCEEDED" for rid in ORDER)

    wait_for(all_ended, 240, "every request admitted, run and ended")

    creates = sim.calls("CreateCustomJob")
    refused = [c for c in creates if c["code"] != "OK"]
    assert refused == []  # Vertex refused no create for quota
    created = [c["request"]["customJob"]["labels"]["flexjobs-request"] for c in creates]
    assert sorted(created) == sorted(ORDER)  # each created once
    # The first two to arrive fit at once; each queue's others follow in arrival order.
    assert set(created[:2]) == {"a1", "b1"}
    for queue in "ab":
        assert [rid for rid in created if rid[0] == queue] == [f"{queue}{n}" for n in (1, 2, 3)]
    assert most_in_flight <= QUOTA
    records = {rid: record(db, rid) for rid in ORDER}
    for earlier, later in [("a1", "a2"), ("a2", "a3"), ("b1", "b2"), ("b2", "b3")]:
        # Each queue in arrival order. (Its next waited for its previous to end: the
        # simulator refuses a create past the quota, and refused none.)
        assert (
            records[later]["admission"]["admittedAt"] > records[earlier]["admission"]["admittedAt"]
        )
    # Ended, so out of the ledger and the line; when each was admitted is kept.
    assert all(r["admission"]["stage"] == "ENDED" for r in records.values())

    # The tick's summary, what `flexjobs queues` and the page read: nothing waits any more.
    # (The records' times are the simulator's, which runs ahead; the tick's are the wall's.)
    ended = datetime.now(UTC)

    def settled_summary() -> dict[str, Any] | None:
        snap = db.collection("admission").document("summary").get()
        summary = snap.to_dict() if snap.exists else None
        return summary if summary is not None and summary["at"] >= ended else None

    summary = wait_for(settled_summary, 60, "a tick's summary after the last end")
    by_name = {q["name"]: q for q in summary["queues"]}
    assert by_name["team-a"]["waiting"] == by_name["team-b"]["waiting"] == 0
    # The simulator's quota, read through Cloud Quotas by the tick (the file names none).
    assert [(p["limit"], p["source"]) for p in summary["projectQuota"]] == [(QUOTA, "observed")]


_ENDED = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
