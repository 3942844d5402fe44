"""AUTO across regions end to end: a job allowed two regions leaves the one whose Spot
preempted it and then had no capacity, for the other, resuming from its checkpoint there; on
an embedded stack of its own (real time, the policy's constants scaled by 60, as in
``test_auto_capacity.py``).

The simulator serves every location under one endpoint (each call names its parent,
``projects/P/locations/L``), with capacity per (location, accelerator): the request's
location is emptied of A100s while the other keeps its default pool.

One preemption alone does not move a job: the rule's prior weighs several Spot lifetimes, so
one early preemption makes Spot there only a little dearer (by design, the same as within one
region). So the script is the one that makes a region's Spot bad: attempt 1 is preempted after
a checkpoint, just as its region's pool empties; the attempt that follows there waits in vain
and is given up; the next is created in the other region, from attempt 1's checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flexjobs_local.stack import LocalStack, StackConfig
from tests.integration.helpers import running_stack, wait_for
from tests.integration.test_auto_capacity import (
    ACCELERATOR,
    PLACEMENT_SECONDS,
    TIME_SCALE,
    auto_request,
)
from tests.integration.test_lifecycle import BUCKET, attempts, record

pytestmark = pytest.mark.integration

OTHER = "us-east1"
DEADLINE_SECONDS = 240
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def regions_stack() -> Iterator[LocalStack]:
    config = StackConfig(
        time_factor=1.0,
        queue_seconds=PLACEMENT_SECONDS,
        tick_seconds=1.0,
        function_env={
            "FLEXJOBS_AUTO_TIME_SCALE": str(TIME_SCALE),
            "FLEXJOBS_BACKOFF_BASE_SECONDS": "0",
            "FLEXJOBS_HINT_COALESCE_SECONDS": "1",
        },
    )
    with running_stack(config) as stack:
        yield stack


@pytest.fixture
def db(regions_stack: LocalStack) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=regions_stack.config.project)


def test_a_job_preempted_where_spot_went_bad_moves_to_the_other_region_and_resumes(
    regions_stack: LocalStack, db: Any
) -> None:
    stack = regions_stack
    sim = stack.simulator
    home = stack.config.location
    assert home != OTHER
    rid = "auto-regions"
    deadline = datetime.now(UTC) + timedelta(seconds=DEADLINE_SECONDS)
    body = auto_request(rid, deadline)
    body.update(location=home, regions=[OTHER], checkpointSizeGb=0.01)
    stack.publish_request(body)

    # 1. Attempt 1 runs on Spot in the request's location and records a checkpoint.
    first = str(wait_for(lambda: record(db, rid).get("vertexJob"), 60, "attempt 1"))
    assert f"/locations/{home}/" in first
    sim.wait_for_job(first, "JOB_STATE_RUNNING", timeout=60)
    # A checkpoint falls due every 5 s; the wait is long for a loaded CI machine (the upload
    # goes through the storage bridge, Eventarc's stand-in, to the upload function), and a
    # timeout says where the checkpoint stopped.
    try:
        wait_for(
            lambda: ((record(db, rid).get("latestCheckpoint") or {}).get("step") or 0) > 0,
            120,
            "a checkpoint of attempt 1 recorded from its upload",
        )
    except AssertionError as late:
        raise AssertionError(f"{late}\n{_where_the_checkpoint_stopped(stack, db, rid)}") from None
    saved = record(db, rid)["latestCheckpoint"]
    # 2. Its region's Spot goes bad: the pool empties and attempt 1 is preempted.
    sim.set_capacity(home, ACCELERATOR, 0)
    sim.preempt(first)

    # 3. A later attempt is created in the other region, and the job ends there.
    def moved() -> dict[str, Any] | None:
        r = record(db, rid)
        return r if r.get("location") == OTHER and r.get("vertexJob") else None

    at_other = wait_for(moved, 120, f"an attempt created in {OTHER}")
    final = wait_for(
        lambda: (r := record(db, rid)).get("state") in TERMINAL and r,
        DEADLINE_SECONDS + 60,
        "the end",
    )
    docs = attempts(db, rid)
    summary = [
        (n, d.get("location"), d.get("strategy"), (d.get("capacity") or {}).get("regionReason"))
        for n, d in sorted(docs.items())
    ]
    print("attempts:", *summary, sep="\n  ")  # shown with -s, and on a failure
    assert final["state"] == "SUCCEEDED", summary
    assert final["endedAt"] <= deadline, (final["endedAt"], deadline, summary)

    # Every attempt before the move ran in the request's location, every one after in the
    # other; the move came after the preemption, and each attempt names its region.
    moved_at = at_other["attempt"]
    assert moved_at >= 2, summary
    for n, doc in docs.items():
        assert doc["location"] == (home if n < moved_at else OTHER), summary
        assert f"/locations/{doc['location']}/" in doc["vertexJob"], summary
    assert docs[1]["errorClass"] == "preempted"
    arrived = docs[moved_at]
    assert arrived["capacity"]["location"] == OTHER
    assert arrived["capacity"]["regionReason"].startswith(f"moves to {OTHER}"), summary
    # It resumed from a checkpoint the job wrote in the first region (the URI is the job's).
    assert arrived["resumedFrom"], summary
    assert arrived["resumedFrom"].startswith(f"gs://{BUCKET}/{rid}/"), (saved, arrived)
    assert arrived["resumedFrom"] >= saved["uri"], (saved, arrived)  # that one, or a later one
    assert final["location"] == OTHER
    assert final["locationsUsed"] == [home, OTHER]
    # No job of the request is left holding GPUs in either region.
    mine = [j for j in sim.jobs() if j.get("labels", {}).get("flexjobs-request") == rid]
    assert len(mine) == len(docs)
    assert all(j["state"] in {f"JOB_STATE_{s}" for s in TERMINAL} for j in mine)


def _where_the_checkpoint_stopped(stack: LocalStack, db: Any, rid: str) -> str:
    """The record, the simulator's jobs of ``rid`` and the functions' log lines naming it."""
    jobs = [
        (j["name"], j["state"], j.get("_sim", {}))
        for j in stack.simulator.jobs()
        if j.get("labels", {}).get("flexjobs-request") == rid
    ]
    lines = [
        f"{target}: {line}"
        for target in stack.config.functions
        for line in stack.function_logs(target).splitlines()
        if rid in line or "checkpoint" in line
    ]
    return "\n".join([f"record: {record(db, rid)}", f"jobs: {jobs}", *lines[-60:]])
