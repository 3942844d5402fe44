"""The job lifecycle end to end: hints, reconcile, recovery from checkpoints, budgets, cancel.

All through the embedded stack: the simulator publishes ml_job hints to the events topic,
writes step checkpoints to the storage emulator, and preempts on command.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from flexjobs_local.stack import StackConfig
from tests.events import load
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

BUCKET = StackConfig().checkpoint_bucket  # where jobs write outputs, apart from requests


def spot_request(rid: str, *, run_seconds: int = 3600, every: int = 60, **extra) -> dict:
    """A 1-GPU SPOT job that checkpoints every ``every`` simulated seconds."""
    body = load("seed_request")
    body["requestId"] = rid
    body.update(extra)
    job = body["customJob"]
    job["displayName"] = rid
    pool = job["jobSpec"]["workerPoolSpecs"][0]
    pool["containerSpec"] = {
        "imageUri": "python:3.10",
        "command": ["python", "train.py"],
        "env": [
            {"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(run_seconds)},
            {"name": "FLEXJOBS_SIM_CHECKPOINT_EVERY", "value": str(every)},
        ],
    }
    job["jobSpec"]["scheduling"] = {"strategy": "SPOT"}
    job["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": f"gs://{BUCKET}/{rid}"}
    return body


def record(db, rid: str) -> dict:
    snap = db.collection("jobs").document(rid).get()
    return snap.to_dict() if snap.exists else {}


def attempts(db, rid: str) -> dict[int, dict]:
    docs = db.collection("jobs").document(rid).collection("attempts").stream()
    return {int(d.id): d.to_dict() for d in docs}


def creates(stack, rid: str) -> list[dict]:
    return [
        c
        for c in stack.simulator.calls(method="CreateCustomJob")
        if c["code"] == "OK" and c["request"]["customJob"]["labels"]["flexjobs-request"] == rid
    ]


def env_of(call: dict) -> dict[str, str]:
    pool = call["request"]["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    return {e["name"]: e.get("value", "") for e in pool["containerSpec"].get("env", [])}


def state_is(db, rid: str, *states: str, attempt: int | None = None):
    def check():
        r = record(db, rid)
        ok = r.get("state") in states and (attempt is None or r.get("attempt") == attempt)
        return r if ok else None

    return check


def running_with_checkpoint(stack, db, rid: str, attempt: int) -> dict:
    """Wait until attempt ``attempt`` runs and has written a checkpoint beyond where it began."""
    current = wait_for(
        state_is(db, rid, "QUEUED", "RUNNING", attempt=attempt),
        timeout=90,
        what=f"attempt {attempt} submitted",
    )
    name = current["vertexJob"]
    stack.simulator.wait_for_job(name, "JOB_STATE_RUNNING", timeout=60)

    def progressed():
        sim = stack.simulator.job(name)["_sim"]
        began = sim.get("resumedStep") or 0
        return sim if [s for s in sim.get("checkpointSteps", []) if s > began] else None

    return wait_for(progressed, timeout=90, what=f"a checkpoint from attempt {attempt}")


def test_spot_job_preempted_three_times_resumes_from_checkpoints_and_succeeds(stack, db, unique):
    rid = unique("spot3")
    stack.publish_request(spot_request(rid))
    half_written: list[int] = []
    for attempt in (1, 2, 3):
        running_with_checkpoint(stack, db, rid, attempt)
        name = record(db, rid)["vertexJob"]
        stack.simulator.preempt(name)
        stack.simulator.flush()
        sim = stack.simulator.job(name)["_sim"]
        if sim.get("halfWrittenStep"):
            half_written.append(sim["halfWrittenStep"])
        wait_for(state_is(db, rid, "QUEUED", "RUNNING", attempt=attempt + 1), timeout=90,
                 what=f"attempt {attempt + 1}")  # fmt: skip

    stack.simulator.advance(4000)  # let the last attempt finish its remaining run time now
    final = wait_for(state_is(db, rid, "SUCCEEDED"), timeout=120, what="SUCCEEDED")
    assert final["attempt"] == 4
    calls = creates(stack, rid)
    assert [env_of(c)["FLEXJOBS_ATTEMPT"] for c in calls] == ["1", "2", "3", "4"]
    assert len({env_of(c)["FLEXJOBS_RUN_ID"] for c in calls}) == 1
    assert "FLEXJOBS_RESUME_FROM" not in env_of(calls[0])
    docs = attempts(db, rid)
    steps = []
    for n in (2, 3, 4):
        resume = env_of(calls[n - 1])["FLEXJOBS_RESUME_FROM"]
        assert resume.startswith(f"gs://{BUCKET}/{rid}/checkpoints/step-")
        assert docs[n]["resumedFrom"] == resume
        step = int(resume.rstrip("/").rsplit("-", 1)[-1])
        # The latest complete checkpoint of the attempt before: never a half-written one.
        previous = stack.simulator.job(docs[n - 1]["vertexJob"])["_sim"]
        assert step == max(previous["checkpointSteps"])
        assert step not in half_written
        steps.append(step)
    assert steps == sorted(steps) and len(set(steps)) == 3
    for n in (1, 2, 3):
        assert docs[n]["state"] == "FAILED"
        assert docs[n]["errorClass"] == "preempted"
        assert docs[n]["gpuSeconds"] > 0
    assert docs[4]["state"] == "SUCCEEDED"
    assert final["retries"] == {"preemption": 3}
    # Where the last attempt resumed, or one of its own checkpoints recorded from their uploads
    # while it was still active (handle_upload): never one of another attempt's.
    own = stack.simulator.job(docs[4]["vertexJob"])["_sim"]["checkpointSteps"]
    assert final["latestCheckpoint"]["step"] in {steps[-1], *own}
    assert final["latestCheckpoint"]["step"] >= steps[-1]
    assert final["gpuSeconds"] == pytest.approx(sum(d["gpuSeconds"] for d in docs.values()))
    assert final["runningSeconds"] > 0
    assert final["cost"]["priced"] is True
    assert final["cost"]["savingsUsd"] > 0  # SPOT against on-demand


def test_budget_exhausted_after_seven_preemptions_fails_with_reason(
    stack, db, unique, notifications
):
    rid = unique("budget")
    stack.publish_request(spot_request(rid, run_seconds=100_000, retryPolicy={"preemption": 6}))
    for attempt in range(1, 8):
        current = wait_for(
            state_is(db, rid, "QUEUED", "RUNNING", attempt=attempt), timeout=90, what=f"#{attempt}"
        )
        stack.simulator.wait_for_job(current["vertexJob"], "JOB_STATE_RUNNING", timeout=60)
        stack.simulator.preempt(current["vertexJob"])
    final = wait_for(state_is(db, rid, "FAILED"), timeout=90, what="FAILED")
    assert final["attempt"] == 7
    assert "preemption budget exhausted (6 of 6" in final["reason"]
    assert "preempted" in final["reason"]
    assert len(creates(stack, rid)) == 7
    sent = wait_for(lambda: [m for m in notifications(rid) if m["state"] == "FAILED"], what="note")
    assert sent[0]["attempt"] == 7 and "budget exhausted" in sent[0]["reason"]
    assert len([m for m in notifications(rid) if m["state"] == "RETRYING"]) == 6


def test_user_error_fails_without_retry(stack, db, unique, notifications):
    rid = unique("user")
    stack.publish_request(spot_request(rid, run_seconds=100_000))
    wait_for(state_is(db, rid, "RUNNING"), timeout=90, what="RUNNING")
    stack.simulator.fail(record(db, rid)["vertexJob"], "user")
    final = wait_for(state_is(db, rid, "FAILED"), timeout=60, what="FAILED")
    assert "exited with a non-zero status" in final["reason"]
    assert attempts(db, rid)[1]["errorClass"] == "user-error"
    time.sleep(2)
    assert len(creates(stack, rid)) == 1
    assert [m["state"] for m in notifications(rid)] == ["FAILED"]


def test_max_wait_expiry_is_retried_then_falls_back(stack, db, unique):
    rid = unique("fallback")
    stack.simulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", 0)
    body = load("seed_request")
    body.update(
        requestId=rid,
        retryPolicy={"capacity": 3},
        fallback=[{"afterCapacityFailures": 2, "strategy": "STANDARD"}],
    )
    body["customJob"]["jobSpec"]["scheduling"]["maxWaitDuration"] = "120s"
    stack.publish_request(body)
    third = wait_for(state_is(db, rid, "QUEUED", attempt=3), timeout=120, what="attempt 3")
    strategies = [
        c["request"]["customJob"]["jobSpec"]["scheduling"].get("strategy")
        for c in creates(stack, rid)
    ]
    assert strategies == ["FLEX_START", "FLEX_START", "STANDARD"]
    docs = attempts(db, rid)
    assert [docs[n]["errorClass"] for n in (1, 2)] == ["max-wait-expired"] * 2
    assert third["retries"] == {"capacity": 2}
    assert third["strategy"] == "STANDARD"
    stack.simulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", 8)
    wait_for(state_is(db, rid, "SUCCEEDED"), timeout=90, what="SUCCEEDED on STANDARD")


def _ml_job_hint(project: str, name: str, text: str) -> dict:
    entry = load("ml_job_log_entry")
    job_id = name.rsplit("/", 1)[-1]
    entry["resource"]["labels"].update(job_id=job_id, project_id=project)
    entry["logName"] = f"projects/{project}/logs/ml.googleapis.com%2F{job_id}"
    entry["textPayload"] = text
    return entry


def _normalised(db, rid: str) -> dict:
    r = record(db, rid)
    a = attempts(db, rid)[1]
    return {
        "state": r["state"],
        "attempt": r["attempt"],
        "gpuSeconds": r["gpuSeconds"],
        "attemptState": a["state"],
        "runningSeconds": a["runningSeconds"],
    }


def test_hint_storm_shuffled_with_stale_hints_gives_the_clean_record(stack, db, unique):
    clean, storm = unique("clean"), unique("storm")
    stack.publish_request(spot_request(clean, run_seconds=300))
    wait_for(state_is(db, clean, "SUCCEEDED"), timeout=90, what="clean SUCCEEDED")

    stack.simulator.set_hints(enabled=False)
    stack.publish_request(spot_request(storm, run_seconds=300))
    name = wait_for(lambda: record(db, storm).get("vertexJob"), what="storm job")
    project = stack.config.project
    hints = [
        _ml_job_hint(project, name, text)
        for text in ("Job is queued.", "Job is running.", "Job completed successfully.")
    ]
    hints += [{"jobName": name}, load("audit_log_entry") | {"protoPayload": {"resourceName": name}}]
    stack.simulator.wait_for_job(name, "JOB_STATE_SUCCEEDED", timeout=60)
    storm_hints = hints * 5
    random.Random(4).shuffle(storm_hints)
    stale = [_ml_job_hint(project, name, "Job is running.")] * 3  # after the end: stale
    for hint in storm_hints + stale:
        stack.publish(stack.config.events_topic, hint)
    wait_for(state_is(db, storm, "SUCCEEDED"), timeout=90, what="storm SUCCEEDED")
    time.sleep(5)  # let deferred redeliveries of the storm land: nothing may change
    assert _normalised(db, storm) == _normalised(db, clean)


def test_two_hundred_hints_cause_at_most_five_vertex_reads(stack, db, unique):
    stack.simulator.set_hints(enabled=False)
    rid = unique("storm200")
    stack.publish_request(spot_request(rid, run_seconds=100_000))
    name = wait_for(lambda: record(db, rid).get("vertexJob"), what="the job")
    hint = _ml_job_hint(stack.config.project, name, "Job is running.")
    stack.simulator.clear_calls()
    # A log sink delivers a training job's lines in bursts: publish the 200 without waiting.
    publisher, _ = stack.pubsub_clients()
    topic = publisher.topic_path(stack.config.project, stack.config.events_topic)
    futures = [publisher.publish(topic, json.dumps(hint).encode()) for _ in range(200)]
    for future in futures:
        future.result(timeout=60)
    wait_for(state_is(db, rid, "RUNNING"), timeout=60, what="RUNNING via hints")
    time.sleep(8)  # every hint delivered, deferred ones redelivered
    reads = [
        c for c in stack.simulator.calls(method="GetCustomJob") if c["request"]["name"] == name
    ]
    assert 1 <= len(reads) <= 5


def test_vertex_unavailable_changes_no_state_and_starts_no_retry(stack, db, unique):
    rid = unique("outage")
    stack.publish_request(spot_request(rid, run_seconds=100_000))
    running = wait_for(state_is(db, rid, "RUNNING"), timeout=90, what="RUNNING")
    stack.simulator.inject_faults(
        code="UNAVAILABLE", count=1_000_000, methods=["GetCustomJob", "ListCustomJobs"]
    )
    stack.simulator.preempt(running["vertexJob"])
    stack.publish(stack.config.events_topic, {"jobName": running["vertexJob"]})
    stack.publish("scheduler-ticks", {"tick": "now"})
    wait_for(
        lambda: len([c for c in stack.simulator.calls() if c["code"] == "UNAVAILABLE"]) >= 4,
        what="failed reads",
    )
    time.sleep(3)
    assert record(db, rid)["state"] == "RUNNING"
    assert len(creates(stack, rid)) == 1

    stack.simulator.clear_faults()
    stack.publish("scheduler-ticks", {"tick": "now"})
    wait_for(state_is(db, rid, "QUEUED", "RUNNING", attempt=2), timeout=90, what="the retry")
    assert len(creates(stack, rid)) == 2


def test_cancel_while_queued(stack, db, unique, notifications):
    rid = unique("cancelq")
    stack.simulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", 0)
    stack.publish_request(spot_request(rid))
    name = wait_for(lambda: record(db, rid).get("vertexJob"), what="the job")
    stack.publish_request({"cancel": rid})
    final = wait_for(state_is(db, rid, "CANCELLED"), timeout=60, what="CANCELLED")
    assert final["cancelRequested"] is True
    stack.simulator.wait_for_job(name, "JOB_STATE_CANCELLED", timeout=30)
    time.sleep(2)
    assert len(creates(stack, rid)) == 1
    assert [m["state"] for m in notifications(rid)] == ["CANCELLED"]


def test_cancel_while_running(stack, db, unique):
    rid = unique("cancelr")
    stack.publish_request(spot_request(rid, run_seconds=100_000))
    running = wait_for(state_is(db, rid, "RUNNING"), timeout=90, what="RUNNING")
    stack.publish_request({"cancel": rid})
    wait_for(state_is(db, rid, "CANCELLED"), timeout=60, what="CANCELLED")
    stack.simulator.wait_for_job(running["vertexJob"], "JOB_STATE_CANCELLED", timeout=30)
    stack.publish("scheduler-ticks", {"tick": "now"})
    time.sleep(3)
    assert record(db, rid)["state"] == "CANCELLED"
    assert len(creates(stack, rid)) == 1
