"""Ingress end to end: uploads through the storage emulator and the stack's Eventarc bridge,
and Cloud Scheduler-style publishes through the Pub/Sub emulator, into the simulator and the
Firestore emulator."""

from __future__ import annotations

import json
import time

import pytest

from shared.domain.model.ids import doc_id
from tests.events import bad_seed_line, load, seed_line
from tests.integration.helpers import upload_id, wait_for

pytestmark = pytest.mark.integration

LOCATION = "us-central1"


def record(db, request_id: str) -> dict | None:
    snap = db.collection("jobs").document(doc_id(request_id)).get()
    return snap.to_dict() if snap.exists else None


def rejection(db, rejection_id: str) -> dict | None:
    snap = db.collection("rejections").document(doc_id(rejection_id)).get()
    return snap.to_dict() if snap.exists else None


def creates(stack) -> list[dict]:
    return [c for c in stack.simulator.calls(method="CreateCustomJob") if c["code"] == "OK"]


def bad_line() -> str:
    return bad_seed_line(("jobSpec", "workerPoolSpecs", 0, "machineSpec", "acceleratorCount"), 3)


def upload_events(stack, name: str) -> list[dict]:
    return [e for e in stack.storage_events() if e["body"]["name"] == name]


# -- request files ------------------------------------------------------------------------


def test_an_uploaded_jsonl_becomes_jobs_and_a_rejection(stack, db, unique):
    name = f"{stack.config.upload_prefix}{unique('batch')}.jsonl"
    lines = [seed_line(), bad_line(), seed_line()]
    generation = stack.upload(name, "\n".join(lines) + "\n")
    ids = {n: upload_id(stack, name, lines[n - 1], n) for n in (1, 2, 3)}

    def both() -> list[dict] | None:
        docs = [record(db, ids[n]) for n in (1, 3)]
        return docs if all(d and d.get("vertexJob") for d in docs) else None

    docs = wait_for(both, what="the upload's two jobs")
    for doc, n in zip(docs, (1, 3), strict=True):
        assert doc["source"] == "gcs"
        assert doc["object"] == f"gs://{stack.config.bucket}/{name}#{generation}"
        assert doc["line"] == n
    refused = wait_for(lambda: rejection(db, ids[2]), what="the bad line's rejection")
    assert refused["source"] == "gcs" and refused["line"] == 2
    assert "acceleratorCount" in refused["errors"][0]["path"]
    wait_for(lambda: len(creates(stack)) == 2, what="two creates")

    # Eventarc delivers at least once: the same event again makes nothing new.
    (event,) = wait_for(lambda: upload_events(stack, name), what="the delivered event")
    assert event["headers"]["ce-type"] == "google.cloud.storage.object.v1.finalized"
    assert stack.redeliver(event) < 300
    time.sleep(1)
    assert len(creates(stack)) == 2
    assert record(db, ids[1])["vertexJob"] == docs[0]["vertexJob"]


def test_a_reupload_of_the_same_bytes_runs_nothing_and_a_request_id_in_the_file_wins(
    stack, db, unique
):
    name = f"{stack.config.upload_prefix}{unique('one')}.json"
    mine = unique("mine")
    first = stack.upload(name, seed_line())
    second = stack.upload(name, seed_line())  # a new generation of the same bytes
    stack.upload(f"{stack.config.upload_prefix}{unique('named')}.json", seed_line(mine))
    wait_for(
        lambda: record(db, upload_id(stack, name, seed_line())) and record(db, mine),
        what="the file's request and the named request",
    )
    assert first != second
    wait_for(lambda: len(upload_events(stack, name)) == 2, what="both generations delivered")
    time.sleep(1)
    assert len(creates(stack)) == 2  # one per request, not one per generation


def test_a_gcloud_yaml_upload_becomes_a_custom_job(stack, db, unique):
    name = f"{stack.config.upload_prefix}{unique('train')}.yaml"
    text = (
        "displayName: yaml-upload\n"
        "workerPoolSpecs:\n"
        "  machineSpec: {machineType: a2-highgpu-1g, acceleratorType: NVIDIA_TESLA_A100,"
        " acceleratorCount: 1}\n"
        "  replicaCount: 1\n"
        "  containerSpec: {imageUri: python:3.10, command: [sleep], args: ['5']}\n"
    )
    generation = stack.upload(name, text)
    assert generation
    doc = wait_for(lambda: record(db, upload_id(stack, name, text)), what="record")
    assert doc["displayName"] == "yaml-upload"
    assert doc["strategy"] == "FLEX_START"


# -- checkpoint progress ------------------------------------------------------------------


def test_a_checkpoint_marker_upload_records_progress_with_no_vertex_call(stack, db, unique):
    rid, folder = unique("ck"), unique("ckpts")
    prefix = f"{stack.checkpoint_uri}{folder}/"
    bucket = stack.config.checkpoint_bucket
    stack.simulator.set_hints(enabled=False)
    stack.simulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", 0)  # it stays QUEUED
    stack.publish_request(json.loads(seed_line(rid, checkpointUri=prefix, totalSteps=400)))
    doc = wait_for(lambda: (r := record(db, rid)) and r.get("vertexJob") and r, what="record")
    assert doc["checkpointPrefix"] == prefix
    calls = len(stack.simulator.calls())

    stack.upload(f"{folder}/step-00000300/state.bin", b"half written: no marker yet", bucket=bucket)
    stack.upload(f"{folder}/step-00000100/state.bin", b"weights", bucket=bucket)
    stack.upload(f"{folder}/step-00000100/commit_success.txt", b"ok", bucket=bucket)

    doc = wait_for(
        lambda: (r := record(db, rid)) and r.get("latestCheckpoint") and r, what="progress"
    )
    assert doc["latestCheckpoint"]["uri"] == f"{prefix}step-00000100/"
    assert doc["latestCheckpoint"]["step"] == 100
    assert doc["progress"] == 0.25
    wait_for(lambda: len(upload_events(stack, f"{folder}/step-00000300/state.bin")) == 1)
    time.sleep(1)
    assert record(db, rid)["latestCheckpoint"]["step"] == 100  # the half-written step never
    assert len(stack.simulator.calls()) == calls  # no Vertex call at all


# -- scheduled requests -------------------------------------------------------------------


def scheduled(series: str, concurrency: str) -> dict:
    body = load("seed_request")
    body["requestId"] = f"{series}-{{slot}}"
    body["schedule"] = {"slotSeconds": 86400, "concurrency": concurrency}
    return body


def test_three_publishes_in_one_slot_make_one_job(stack, db, unique):
    series = unique("nightly")
    for at in ("2026-11-28T02:00:00Z", "2026-11-28T02:00:01Z", "2026-11-28T02:05:00Z"):
        stack.publish_request(scheduled(series, "allow"), scheduleTime=at)
    rid = f"{series}-20261128T000000Z"
    doc = wait_for(lambda: (r := record(db, rid)) and r.get("vertexJob") and r, what="record")
    time.sleep(2)
    assert len(creates(stack)) == 1
    assert doc["series"] == f"{series}-{{slot}}"


def test_forbid_skips_the_next_slot_while_the_first_is_active(stack, db, unique, notifications):
    series = unique("nightly")
    stack.simulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", 0)  # the first run waits
    first, second = f"{series}-20261128T000000Z", f"{series}-20261129T000000Z"
    stack.publish_request(scheduled(series, "forbid"), scheduleTime="2026-11-28T02:00:00Z")
    wait_for(lambda: (r := record(db, first)) and r.get("vertexJob"), what="the first run")

    stack.publish_request(scheduled(series, "forbid"), scheduleTime="2026-11-29T02:00:00Z")

    doc = wait_for(lambda: record(db, second), what="the skipped slot")
    assert (doc["state"], doc["reason"]) == ("SKIPPED", first)
    assert len(creates(stack)) == 1
    skipped = wait_for(lambda: notifications(second), what="the SKIPPED notification")
    assert skipped[0]["state"] == "SKIPPED"


def test_replace_cancels_the_active_run_and_starts_the_new_slot(stack, db, unique):
    series = unique("nightly")
    stack.simulator.set_capacity(LOCATION, "NVIDIA_TESLA_A100", 0)
    first, second = f"{series}-20261128T000000Z", f"{series}-20261129T000000Z"
    stack.publish_request(scheduled(series, "replace"), scheduleTime="2026-11-28T02:00:00Z")
    old = wait_for(lambda: (r := record(db, first)) and r.get("vertexJob"), what="first run")

    stack.publish_request(scheduled(series, "replace"), scheduleTime="2026-11-29T02:00:00Z")

    new = wait_for(lambda: (r := record(db, second)) and r.get("vertexJob"), what="new slot")
    assert record(db, first)["state"] == "CANCELLED"
    assert stack.simulator.job(old)["state"] == "JOB_STATE_CANCELLED"
    assert new != old
    assert len(creates(stack)) == 2
