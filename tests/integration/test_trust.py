"""Ambiguous and refused creates through the real stack: Pub/Sub emulator → function →
Vertex simulator (over gRPC) + Firestore emulator.

The simulator can lose a create's reply after making the job (``when="after"``), exactly the
case of a timed-out call that still happened, and refuse creates for quota.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import wait_for
from tests.integration.test_intake import creates, record, request

pytestmark = pytest.mark.integration


def test_a_timed_out_create_that_lands_later_yields_one_job_recorded(stack, db, unique):
    rid = unique("late-create")
    # The caller sees DEADLINE_EXCEEDED at once; Vertex makes the job 3 s later. Pub/Sub
    # redelivers after about a second: a released claim would let that redelivery look up
    # before the job exists, and create a second one.
    stack.simulator.inject_faults(
        "DEADLINE_EXCEEDED", count=1, methods=["CreateCustomJob"], when="late", late_seconds=3
    )

    stack.publish_request(request(rid))

    doc = wait_for(
        lambda: (r := record(db, rid)) and r.get("vertexJob") and r, timeout=90, what="the job"
    )
    time.sleep(4)  # past any redelivery, and past a tick's worth of settling
    mine = [j for j in stack.simulator.jobs() if j["labels"].get("flexjobs-request") == rid]
    assert [j["name"] for j in mine] == [doc["vertexJob"]]
    # The claim (TTL 5 s here) held the redelivery until the late job existed: it was adopted.
    assert [c["code"] for c in creates(stack, label=rid, ok_only=False)] == ["DEADLINE_EXCEEDED"]


def test_a_create_refused_for_quota_is_parked_then_submitted_by_the_tick(stack, db, unique):
    rid = unique("quota")
    stack.simulator.inject_faults("RESOURCE_EXHAUSTED", count=1, methods=["CreateCustomJob"])

    stack.publish_request(request(rid))

    parked = wait_for(
        lambda: (r := record(db, rid)) and r.get("reason") == "quota" and r, what="parked"
    )
    assert (parked["state"], parked["vertexJob"]) == ("QUEUED", None)
    time.sleep(3)  # acknowledged: no redelivery creates it behind the tick's back
    assert creates(stack, label=rid) == []

    stack.publish("scheduler-ticks", b"tick")

    doc = wait_for(
        lambda: (r := record(db, rid)) and r.get("vertexJob") and r, timeout=60, what="the job"
    )
    assert doc["reason"] is None and doc["attempt"] == 1
    assert len(creates(stack, label=rid)) == 1
