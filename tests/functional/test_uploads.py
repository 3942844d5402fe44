"""handle_upload driven through functions-framework with real CloudEvents and fakes.

Both deliveries of a Cloud Storage finalize: Eventarc's storage CloudEvent (binary content
mode, as Eventarc posts it) and a bucket's Pub/Sub notification (a Pub/Sub push body, and the
same as an Eventarc Pub/Sub CloudEvent).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent
from functions_framework import create_app

from shared import bootstrap
from shared.app import handlers
from shared.app.context import Uploads
from shared.domain.request.files import StoredObject
from shared.kernel.errors import StoreUnavailable
from tests.events import (
    bad_seed_line,
    gcs_notification,
    load,
    object_resource,
    seed_line,
    storage_cloud_event,
)
from tests.fakes import InMemoryStoredObjects
from tests.functional.conftest import SOURCE

BUCKET = "flexjobs-uploads"
# Where the jobs' checkpoints go: a bucket of their own, never the request bucket.
CKPT_BUCKET = "flexjobs-checkpoints"
GEN = "1764504000123456"


def default_id(name: str, data: bytes | str | None, line: int | None = None) -> str:
    """The requestId an upload gives a message that names none: from its bytes (a line's in a
    ``.jsonl``), or from the generation for a file that was never read."""
    raw = data.encode() if isinstance(data, str) else data
    return StoredObject(BUCKET, name, GEN).request_id(raw, line)


@pytest.fixture
def uploads(intake, checkpoints) -> Iterator[Uploads]:
    wired = Uploads(intake=intake, objects=InMemoryStoredObjects(), checkpoints=checkpoints)
    bootstrap.override_uploads(wired)
    yield wired
    bootstrap.override_uploads(None)


@pytest.fixture
def client():
    return create_app("handle_upload", SOURCE, "cloudevent").test_client()


def put(uploads: Uploads, name: str, data: bytes | str, generation: str = GEN, **fields):
    """Store an object in the fake bucket; returns its resource (for the event)."""
    raw = data.encode() if isinstance(data, str) else data
    uploads.objects.put(BUCKET, name, generation, raw)
    return object_resource(name, generation, len(raw), **fields)


def eventarc(client, resource, event_type="finalized"):
    headers, body = to_binary(storage_cloud_event(resource, event_type))
    return client.post("/", headers=headers, data=body)


def notification(client, resource, **kwargs):
    return client.post("/", json=gcs_notification(resource, **kwargs))


def bad_line() -> str:
    return bad_seed_line(("jobSpec", "workerPoolSpecs", 0, "replicaCount"), "two")


def records(intake) -> dict[str, dict]:
    return dict(intake.jobs.job_store.database.jobs)


# -- request files ------------------------------------------------------------------------


def test_jsonl_makes_a_job_per_line_and_rejects_the_bad_line_alone(intake, uploads, client):
    text = f"{seed_line()}\n{bad_line()}\n\n{seed_line()}\n"
    resource = put(uploads, "requests/nightly.jsonl", text)

    assert eventarc(client, resource).status_code == 200

    jobs = records(intake)
    name, lines = "requests/nightly.jsonl", text.split("\n")
    one, four = (default_id(name, lines[n - 1], n) for n in (1, 4))
    assert set(jobs) == {one, four}
    for rid, line in ((one, 1), (four, 4)):
        assert jobs[rid]["source"] == "gcs"
        assert jobs[rid]["object"] == f"gs://{BUCKET}/requests/nightly.jsonl#{GEN}"
        assert jobs[rid]["line"] == line
        assert jobs[rid]["state"] == "QUEUED"
    assert len(intake.backend.created) == 2
    rejection = intake.rejections.documents[default_id(name, lines[1], 2)]
    assert rejection["source"] == "gcs"
    assert rejection["line"] == 2
    assert rejection["object"] == f"gs://{BUCKET}/requests/nightly.jsonl#{GEN}"
    assert rejection["errors"][0]["path"].endswith("replicaCount")


def test_the_same_event_twice_makes_one_job_per_request(intake, uploads, client):
    resource = put(uploads, "requests/a.jsonl", f"{seed_line()}\n{seed_line()}\n")
    for _ in range(2):
        assert eventarc(client, resource).status_code == 200
    assert len(intake.backend.created) == 2
    assert len(records(intake)) == 2


def test_a_new_generation_of_the_same_bytes_runs_nothing_again(intake, uploads, client):
    # Issue 20: GCS finalizes a new generation on a rewrite (a storage-class change), a copy,
    # a soft-delete restore or a re-upload of the same bytes; none of them may run it again.
    eventarc(client, put(uploads, "requests/a.json", seed_line(), generation="1"))
    eventarc(client, put(uploads, "requests/a.json", seed_line(), generation="2"))
    assert set(records(intake)) == {default_id("requests/a.json", seed_line())}
    assert len(intake.backend.created) == 1
    first = f"{seed_line()}\n{seed_line('own-id')}\n"
    eventarc(client, put(uploads, "requests/b.jsonl", first, generation="1"))
    eventarc(client, put(uploads, "requests/b.jsonl", first, generation="2"))
    assert len(intake.backend.created) == 3  # a.json, and b.jsonl's two lines, once each


def test_changed_bytes_make_new_requests_only_where_they_changed(intake, uploads, client):
    lines = [seed_line(), bad_seed_line(("displayName",), "job-x")]
    eventarc(client, put(uploads, "requests/a.jsonl", "\n".join(lines), generation="1"))
    lines.append(bad_seed_line(("displayName",), "job-y"))  # one line more, the others kept
    eventarc(client, put(uploads, "requests/a.jsonl", "\n".join(lines), generation="2"))
    assert set(records(intake)) == {
        default_id("requests/a.jsonl", line, number) for number, line in enumerate(lines, 1)
    }
    assert len(intake.backend.created) == 3


def test_a_request_id_in_the_file_wins(intake, uploads, client):
    eventarc(client, put(uploads, "requests/a.json", seed_line("mine-1"), generation="1"))
    eventarc(client, put(uploads, "requests/a.json", seed_line("mine-1"), generation="2"))
    assert set(records(intake)) == {"mine-1"}
    assert len(intake.backend.created) == 1


def test_a_bucket_notification_push_body_is_handled_the_same(intake, uploads, client):
    resource = put(uploads, "requests/one.json", seed_line())
    assert notification(client, resource).status_code == 200
    assert notification(client, resource).status_code == 200  # redelivered
    rid = default_id("requests/one.json", seed_line())
    assert set(records(intake)) == {rid}
    assert records(intake)[rid]["object"] == f"gs://{BUCKET}/requests/one.json#{GEN}"
    assert len(intake.backend.created) == 1


def test_a_notification_without_payload_is_read_by_its_attributes(intake, uploads, client):
    resource = put(uploads, "requests/one.json", seed_line())
    assert notification(client, resource, payload=False).status_code == 200
    assert len(intake.backend.created) == 1


def test_a_notification_as_an_eventarc_pubsub_cloud_event(intake, uploads, client):
    resource = put(uploads, "requests/one.json", seed_line())
    event = CloudEvent(
        {
            "type": "google.cloud.pubsub.topic.v1.messagePublished",
            "source": "//pubsub.googleapis.com/projects/p/topics/gcs-uploads",
            "id": "11223344556677",
        },
        gcs_notification(resource),
    )
    headers, body = to_binary(event)
    assert client.post("/", headers=headers, data=body).status_code == 200
    assert len(intake.backend.created) == 1


def test_a_gcloud_yaml_becomes_a_custom_job(intake, uploads, client):
    yaml_text = (
        "workerPoolSpecs:\n"
        "  machineSpec: {machineType: a2-highgpu-1g, acceleratorType: NVIDIA_TESLA_A100,"
        " acceleratorCount: 1}\n"
        "  replicaCount: 1\n"
        "  containerSpec: {imageUri: python:3.10}\n"
        "scheduling: {strategy: FLEX_START, maxWaitDuration: 7200s}\n"
    )
    eventarc(client, put(uploads, "requests/train.yaml", yaml_text))
    (request, _labels), *_ = intake.backend.created
    assert request.kind == "customJob"
    assert request.request_id == default_id("requests/train.yaml", yaml_text)
    assert request.spec["jobSpec"]["scheduling"]["maxWaitDuration"] == "7200s"


def test_an_unreadable_file_gets_one_rejection(intake, uploads, client):
    resource = put(uploads, "requests/broken.yaml", "workerPoolSpecs: [unclosed\n")
    assert eventarc(client, resource).status_code == 200
    rid = default_id("requests/broken.yaml", "workerPoolSpecs: [unclosed\n")
    assert list(intake.rejections.documents) == [rid]
    assert intake.rejections.documents[rid]["source"] == "gcs"
    assert "YAML" in intake.rejections.documents[rid]["errors"][0]["message"]
    assert intake.notifier.messages[-1]["state"] == "REJECTED"


def test_a_file_that_is_not_utf8_gets_one_rejection(intake, uploads, client):
    resource = put(uploads, "requests/x.jsonl", b"\xff\xfe{}\n{}\n")
    eventarc(client, resource)
    assert list(intake.rejections.documents) == [
        default_id("requests/x.jsonl", b"\xff\xfe{}\n{}\n")
    ]
    assert not intake.backend.created


def test_a_file_over_the_limit_is_refused_unread(intake, uploads, client):
    resource = put(uploads, "requests/big.jsonl", seed_line())
    resource["size"] = str(8 * 1024 * 1024 + 1)
    assert eventarc(client, resource).status_code == 200
    assert uploads.objects.reads == []
    (rejection,) = intake.rejections.documents.values()
    assert "FLEXJOBS_MAX_UPLOAD_BYTES" in rejection["errors"][0]["message"]


def test_a_file_growing_past_the_limit_is_refused_after_limit_bytes(intake, uploads, client):
    uploads.intake.settings = dataclasses.replace(uploads.intake.settings, max_upload_bytes=10)
    resource = put(uploads, "requests/big.json", seed_line())
    resource.pop("size")  # a notification without a payload says nothing of the size
    eventarc(client, resource)
    (rejection,) = intake.rejections.documents.values()
    assert "over 10 bytes" in rejection["errors"][0]["message"]
    assert not intake.backend.created


def test_a_generation_that_is_gone_gets_one_rejection(intake, uploads, client):
    resource = object_resource("requests/gone.json", GEN, 100)
    assert eventarc(client, resource).status_code == 200
    (rejection,) = intake.rejections.documents.values()
    assert "cannot be read" in rejection["errors"][0]["message"]


def test_a_storage_outage_is_redelivered_and_records_nothing(intake, uploads, client):
    resource = put(uploads, "requests/a.json", seed_line())
    uploads.objects.fail_with = StoreUnavailable("GCS is down")
    assert eventarc(client, resource).status_code == 500
    assert not intake.rejections.documents and not records(intake)
    uploads.objects.fail_with = None
    assert eventarc(client, resource).status_code == 200
    assert len(records(intake)) == 1


def test_a_transient_fault_on_one_line_still_submits_the_others(intake, uploads, client):
    resource = put(uploads, "requests/a.jsonl", f"{seed_line()}\n{seed_line('r-2')}\n")
    original = intake.jobs.claim

    def claim(request, now, ttl):
        if request.request_id == "r-2":
            raise StoreUnavailable("Firestore blinked")
        return original(request, now, ttl)

    intake.jobs.claim = claim  # type: ignore[method-assign]
    assert eventarc(client, resource).status_code == 500
    assert set(records(intake)) == {default_id("requests/a.jsonl", seed_line(), 1)}
    intake.jobs.claim = original  # type: ignore[method-assign]
    assert eventarc(client, resource).status_code == 200
    assert len(records(intake)) == 2
    assert len(intake.backend.created) == 2


@pytest.mark.parametrize(
    ("name", "event_type"),
    [
        ("elsewhere/a.json", "finalized"),
        ("requests/readme.txt", "finalized"),
        ("requests/", "finalized"),
        ("requests/a.json", "deleted"),
        ("requests/a.json", "metadataUpdated"),
        ("requests/a.json", "archived"),
    ],
)
def test_anything_else_is_acknowledged_and_ignored(intake, uploads, client, name, event_type):
    resource = put(uploads, name, seed_line())
    assert eventarc(client, resource, event_type).status_code == 200
    assert uploads.objects.reads == []
    assert not records(intake) and not intake.rejections.documents


def test_a_notification_of_a_delete_is_ignored(intake, uploads, client):
    resource = put(uploads, "requests/a.json", seed_line())
    assert notification(client, resource, event_type="OBJECT_DELETE").status_code == 200
    assert uploads.objects.reads == []


def test_a_finalize_that_names_no_object_is_acknowledged(intake, uploads, client):
    resource = put(uploads, "requests/a.json", seed_line())
    event = storage_cloud_event(resource)
    event.data = {"kind": "storage#object"}
    event["subject"] = "objects/"
    headers, body = to_binary(event)
    assert client.post("/", headers=headers, data=body).status_code == 200
    assert uploads.objects.reads == []


# -- checkpoint progress ------------------------------------------------------------------

CKPT = f"gs://{CKPT_BUCKET}/runs/r1/checkpoints/"


def running_job(intake, tracker, request_id="ck-1", **extra):
    """Submit a request writing checkpoints under CKPT and move its job to RUNNING."""
    from shared.app.commands import SubmitJob
    from shared.domain.model.delivery import Delivery

    body = {**load("seed_request"), "requestId": request_id, "checkpointUri": CKPT, **extra}
    message = Delivery(json.dumps(body).encode(), message_id=request_id)
    handlers.submit_job(SubmitJob(message=message), intake)
    name = intake.jobs.get(request_id).vertex_job
    intake.backend.update(name, state="JOB_STATE_RUNNING", start_time=tracker.clock())
    return name


def checkpoint_object(uploads, name: str, at: str, size: int = 2, **fields):
    """Write one object of the checkpoint bucket, as a training job would; its resource."""
    uploads.checkpoints.put(f"gs://{CKPT_BUCKET}/{name}", datetime.fromisoformat(at), size)
    return object_resource(name, GEN, size, bucket=CKPT_BUCKET, customTime=at, **fields)


def marker(uploads, step: int, leaf="commit_success.txt", at="2026-11-30T12:30:00Z", data=True):
    """A step directory written by training: its data (unless ``data`` is False), then the
    marker ``leaf`` (the event's object)."""
    directory = f"runs/r1/checkpoints/step-{step:08d}"
    if data:
        checkpoint_object(uploads, f"{directory}/state.bin", at, size=1024)
    return checkpoint_object(uploads, f"{directory}/{leaf}", at)


def test_a_checkpoint_marker_records_progress_without_vertex(intake, tracker, uploads, client):
    running_job(intake, tracker, totalSteps=1000)
    calls = (len(intake.backend.created), len(intake.backend.reads), len(intake.backend.cancels))

    assert eventarc(client, marker(uploads, 250)).status_code == 200

    record = intake.jobs.job_store.get("ck-1")
    assert record["latestCheckpoint"]["uri"] == f"{CKPT}step-00000250/"
    assert record["latestCheckpoint"]["step"] == 250
    assert record["progress"] == 0.25
    assert record["state"] == "QUEUED"  # the state is Vertex's to say, not the upload's
    after = (len(intake.backend.created), len(intake.backend.reads), len(intake.backend.cancels))
    assert after == calls
    assert uploads.objects.reads == []


def test_progress_only_moves_forward(intake, tracker, uploads, client):
    running_job(intake, tracker, totalSteps=1000)
    eventarc(client, marker(uploads, 500))
    eventarc(client, marker(uploads, 250))  # a late event of an older step
    record = intake.jobs.job_store.get("ck-1")
    assert record["latestCheckpoint"]["step"] == 500
    assert record["progress"] == 0.5


def test_a_half_written_step_is_never_recorded(intake, tracker, uploads, client):
    running_job(intake, tracker)
    assert eventarc(client, marker(uploads, 300, leaf="state.bin")).status_code == 200
    assert "latestCheckpoint" not in intake.jobs.job_store.get("ck-1")


def test_without_total_steps_progress_is_not_guessed(intake, tracker, uploads, client):
    running_job(intake, tracker)
    eventarc(client, marker(uploads, 300, leaf=".metadata"))
    record = intake.jobs.job_store.get("ck-1")
    assert record["latestCheckpoint"]["step"] == 300
    assert "progress" not in record


def test_a_single_file_checkpoint_counts(intake, tracker, uploads, client):
    running_job(intake, tracker)
    resource = checkpoint_object(
        uploads, "runs/r1/checkpoints/model_step700.pt", "2026-11-30T12:30:00Z"
    )
    eventarc(client, resource)
    assert intake.jobs.job_store.get("ck-1")["latestCheckpoint"]["step"] == 700


def test_a_checkpoint_under_no_active_job_is_ignored(intake, tracker, uploads, client):
    running_job(intake, tracker)
    at = "2026-11-30T12:30:00Z"
    checkpoint_object(uploads, "runs/other/checkpoints/step-00000100/data", at)
    resource = checkpoint_object(uploads, "runs/other/checkpoints/step-00000100/_SUCCESS", at)
    assert eventarc(client, resource).status_code == 200
    assert "latestCheckpoint" not in intake.jobs.job_store.get("ck-1")


def test_an_ended_job_takes_no_checkpoint(intake, tracker, uploads, client):
    running_job(intake, tracker)
    intake.jobs.job_store.database.jobs["ck-1"]["state"] = "SUCCEEDED"
    eventarc(client, marker(uploads, 100))
    assert "latestCheckpoint" not in intake.jobs.job_store.get("ck-1")


def test_a_checkpoint_older_than_the_job_is_another_runs(intake, tracker, uploads, client):
    body_extra = {"customJob": load("seed_request")["customJob"]}
    body_extra["customJob"]["jobSpec"]["baseOutputDirectory"] = {
        "outputUriPrefix": f"gs://{CKPT_BUCKET}/runs/r1"
    }
    from shared.app.commands import SubmitJob
    from shared.domain.model.delivery import Delivery

    body = {"requestId": "out-1", **body_extra}
    message = Delivery(json.dumps(body).encode(), message_id="out-1")
    handlers.submit_job(SubmitJob(message=message), intake)
    assert intake.jobs.job_store.get("out-1")["checkpointPrefix"] == CKPT
    eventarc(client, marker(uploads, 100, at="2020-01-01T00:00:00Z"))
    assert "latestCheckpoint" not in intake.jobs.job_store.get("out-1")
    now = datetime.now(UTC).isoformat()
    eventarc(client, marker(uploads, 200, at=now))
    assert intake.jobs.job_store.get("out-1")["latestCheckpoint"]["step"] == 200


# -- requests and checkpoints never share trust (issue 20) ----------------------------------


def test_a_marker_alone_moves_no_job(intake, tracker, uploads, client):
    # One empty .metadata, with nothing beside it, set a victim's progress to 1.0 for good.
    running_job(intake, tracker, totalSteps=1000)
    resource = marker(uploads, 1000, leaf=".metadata", data=False)
    assert eventarc(client, resource).status_code == 200
    record = intake.jobs.job_store.get("ck-1")
    assert "latestCheckpoint" not in record and "progress" not in record
    assert uploads.checkpoints.confirmed == [f"{CKPT}step-00001000/"]


def test_an_event_for_a_checkpoint_its_listing_does_not_show_moves_no_job(
    intake, tracker, uploads, client
):
    # A forged event (anyone who may publish to a notifications topic): nothing was written.
    running_job(intake, tracker, totalSteps=1000)
    resource = object_resource(
        "runs/r1/checkpoints/step-00000900/commit_success.txt", GEN, 2, bucket=CKPT_BUCKET
    )
    assert notification(client, resource).status_code == 200
    assert "latestCheckpoint" not in intake.jobs.job_store.get("ck-1")


def test_the_time_recorded_is_the_listings_not_the_events(intake, tracker, uploads, client):
    running_job(intake, tracker, totalSteps=1000)
    resource = marker(uploads, 250, at="2026-11-30T12:30:00Z")
    resource["customTime"] = "2026-12-31T00:00:00Z"  # what the event claims
    assert eventarc(client, resource).status_code == 200
    at = intake.jobs.job_store.get("ck-1")["latestCheckpoint"]["at"]
    assert at == "2026-11-30T12:30:00+00:00"


def test_an_object_in_the_request_bucket_is_never_a_checkpoint(intake, tracker, uploads, client):
    running_job(intake, tracker, totalSteps=1000)
    intake.jobs.job_store.database.jobs["ck-1"]["checkpointPrefix"] = f"gs://{BUCKET}/victim/ck/"
    for name in ("victim/ck/step-00001000/state.bin", "victim/ck/step-00001000/.metadata"):
        assert eventarc(client, put(uploads, name, b"x")).status_code == 200
    assert "latestCheckpoint" not in intake.jobs.job_store.get("ck-1")
    assert uploads.checkpoints.confirmed == []


def test_a_request_file_outside_the_request_bucket_is_never_submitted(intake, uploads, client):
    # A training job may write its checkpoint bucket; a request it drops there runs nothing.
    resource = checkpoint_object(uploads, "requests/evil.json", "2026-11-30T12:30:00Z")
    uploads.objects.put(CKPT_BUCKET, "requests/evil.json", GEN, seed_line("evil").encode())
    assert eventarc(client, resource).status_code == 200
    assert not records(intake) and uploads.objects.reads == []


def test_without_a_request_bucket_no_request_file_is_taken(intake, uploads, client):
    uploads.intake.settings = dataclasses.replace(uploads.intake.settings, request_bucket=None)
    assert eventarc(client, put(uploads, "requests/a.json", seed_line())).status_code == 200
    assert not records(intake) and uploads.objects.reads == []


def test_a_request_that_checkpoints_into_the_request_bucket_is_refused(intake, uploads, client):
    body = json.loads(seed_line("in-requests", checkpointUri=f"gs://{BUCKET}/ck/"))
    eventarc(client, put(uploads, "requests/a.json", json.dumps(body)))
    (rejection,) = intake.rejections.documents.values()
    assert rejection["errors"][0]["path"] == "checkpointUri"
    assert "the request bucket" in rejection["errors"][0]["message"]
    assert not records(intake)


def test_an_upload_dated_before_its_creation_is_read_as_created(intake, uploads, client):
    # A Custom-Time in 2020 would make an AUTO request look published then; never ahead of
    # now either. The publish time of an upload is its object's write time, within bounds.
    resource = put(
        uploads, "requests/a.json", seed_line("dated"), customTime="2020-01-01T00:00:00Z"
    )
    eventarc(client, resource)
    (request, _), *_ = intake.backend.created
    assert request.published_at == datetime.fromisoformat(resource["updated"])


def test_a_redelivered_file_does_not_notify_its_rejections_again(intake, uploads, client):
    resource = put(uploads, "requests/a.jsonl", f"{bad_line()}\n{seed_line()}\n")
    eventarc(client, resource)
    eventarc(client, resource)
    rejected = [m for m in intake.notifier.messages if m["state"] == "REJECTED"]
    assert len(rejected) == 1
    assert len(intake.rejections.documents) == 1


def test_a_changed_rejection_is_recorded_and_notified_again(intake, uploads, client):
    eventarc(client, put(uploads, "requests/a.json", seed_line("same-id", bogus=1)))
    eventarc(client, put(uploads, "requests/a.json", seed_line("same-id", other=2), "2"))
    rejected = [m for m in intake.notifier.messages if m["state"] == "REJECTED"]
    assert len(rejected) == 2
    assert intake.rejections.documents["same-id"]["errors"][0]["path"] == "other"


def test_a_compressed_upload_is_refused_unread(intake, uploads, client):
    resource = put(uploads, "requests/a.json", seed_line(), contentEncoding="gzip")
    assert eventarc(client, resource).status_code == 200
    assert uploads.objects.reads == []
    (rejection,) = intake.rejections.documents.values()
    assert "Content-Encoding gzip" in rejection["errors"][0]["message"]


def test_a_file_of_too_many_requests_is_refused_whole(intake, uploads, client):
    eventarc(client, put(uploads, "requests/a.jsonl", "{}\n" * 1001))
    assert len(intake.rejections.documents) == 1
    assert not intake.backend.created


# -- AUTO: leaving on-demand at a checkpoint ------------------------------------------------


def on_demand_auto_job(intake, tracker, final: bool = False, total_steps: int | None = 1000) -> str:
    """An AUTO request (4 h of work, 1000 steps, due in 3 days) whose attempt 1 the policy put
    on on-demand (as it does to catch up when behind) and which now runs; returns its job."""
    scheduling = {"strategy": "AUTO"}
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = scheduling
    steps = {} if total_steps is None else {"totalSteps": total_steps}
    name = running_job(
        intake,
        tracker,
        **steps,
        customJob=body["customJob"],
        deadline="2026-12-03T12:00:00Z",
        estimatedRunSeconds=4 * 3600,
        checkpointIntervalSeconds=600,
        restartOverheadSeconds=300,
    )
    # What the policy and a hint would have written: on-demand, chosen to catch up, running.
    stored = intake.jobs.job_store.database.jobs["ck-1"]
    stored.update(
        strategy="STANDARD",
        state="RUNNING",
        attemptStartedAt=tracker.clock(),
        capacity={"strategy": "STANDARD", "reason": "behind uniform progress", "final": final},
    )
    return name


def test_an_on_demand_attempt_ahead_at_a_checkpoint_is_left_for_cheaper_capacity(
    intake, tracker, uploads, client
):
    from shared.app import handlers
    from shared.app.commands import Reconcile

    name = on_demand_auto_job(intake, tracker)
    tracker.checkpoints.commit(CKPT, 900, tracker.clock())
    assert eventarc(client, marker(uploads, 900)).status_code == 200  # 90% done, days early

    assert intake.backend.cancels == [name]
    record = intake.jobs.job_store.get("ck-1")
    assert record["yielding"]["why"] == "switch"
    assert record["yielding"]["reason"].startswith("left on-demand at a checkpoint: ")
    assert record["progress"] == 0.9

    # The cancelled job's end is a switch: attempt 2 at once, on cheaper capacity, from the
    # checkpoint, with no budget charged.
    handlers.reconcile(Reconcile(), tracker)
    record = intake.jobs.job_store.get("ck-1")
    assert record["attempt"] == 2 and record["state"] == "QUEUED"
    assert record["strategy"] in ("SPOT", "FLEX_START")
    assert record.get("retries", {}) == {}
    assert intake.jobs.job_store.database.attempts[("ck-1", 1)]["endedBy"] == "switch"
    assert (
        intake.jobs.job_store.database.attempts[("ck-1", 2)]["resumedFrom"]
        == f"{CKPT}step-00000900/"
    )


def test_an_on_demand_attempt_behind_at_a_checkpoint_is_kept(intake, tracker, uploads, client):
    on_demand_auto_job(intake, tracker)
    tracker.clock.advance(86400)  # a day on, 10% done: behind uniform progress
    assert eventarc(client, marker(uploads, 100)).status_code == 200
    assert intake.backend.cancels == []
    assert "yielding" not in intake.jobs.job_store.get("ck-1")


def test_an_on_demand_attempt_the_policy_made_final_is_never_left(intake, tracker, uploads, client):
    on_demand_auto_job(intake, tracker, final=True)
    assert eventarc(client, marker(uploads, 900)).status_code == 200
    assert intake.backend.cancels == []


def test_without_total_steps_the_running_attempts_time_counts_as_saved_at_a_checkpoint(
    intake, tracker, uploads, client
):
    name = on_demand_auto_job(intake, tracker, total_steps=None)
    # 3.5 h of the 4 h ran on on-demand: far ahead, though no progress figure says so.
    started = tracker.clock() - timedelta(hours=3.5)
    intake.jobs.job_store.database.jobs["ck-1"]["attemptStartedAt"] = started
    assert eventarc(client, marker(uploads, 900)).status_code == 200
    assert intake.backend.cancels == [name]
    assert "progress" not in intake.jobs.job_store.get("ck-1")


def test_a_leave_that_failed_is_asked_again_by_the_redelivered_event(
    intake, tracker, uploads, client, monkeypatch
):
    name = on_demand_auto_job(intake, tracker)
    event = marker(uploads, 900)
    real = intake.jobs.get_attempt
    failing = iter([StoreUnavailable("Firestore is down")])

    def get_attempt(request_id, attempt):
        fault = next(failing, None)
        if fault is not None:
            raise fault
        return real(request_id, attempt)

    monkeypatch.setattr(intake.jobs, "get_attempt", get_attempt)
    intake.jobs.job_store.database.jobs["ck-1"]["attempt"] = 2  # one earlier attempt to read
    assert eventarc(client, event).status_code == 500  # recorded, the leave failed: redelivered
    assert intake.jobs.job_store.get("ck-1")["latestCheckpoint"]["step"] == 900
    assert intake.backend.cancels == []
    assert eventarc(client, event).status_code == 200  # not news, but asked again
    assert intake.backend.cancels == [name]


def test_only_the_time_up_to_the_checkpoint_counts_as_saved(intake, tracker, uploads, client):
    on_demand_auto_job(intake, tracker, total_steps=None)
    started = tracker.clock() - timedelta(hours=3.5)
    intake.jobs.job_store.database.jobs["ck-1"]["attemptStartedAt"] = started
    # Written 5 minutes into the attempt (a late event): what ran since is not saved.
    late = (started + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    assert eventarc(client, marker(uploads, 900, at=late)).status_code == 200
    assert intake.backend.cancels == []


def test_a_checkpoint_the_attempt_resumed_from_never_makes_it_leave(
    intake, tracker, uploads, client
):
    on_demand_auto_job(intake, tracker)
    # Written before this attempt started (it resumed from it): leaving would lose its run.
    assert eventarc(client, marker(uploads, 900, at="2026-11-30T11:59:00Z")).status_code == 200
    assert intake.jobs.job_store.get("ck-1")["progress"] == 0.9
    assert intake.backend.cancels == []


def test_the_failure_raised_for_a_sweep_is_one_a_redelivery_may_fix():
    from shared.app.steps.sweep import failure_to_raise as _to_raise
    from shared.kernel.errors import InvalidRequest

    permanent, transient = InvalidRequest([]), StoreUnavailable("down")
    assert _to_raise([permanent, transient]) is transient
    assert _to_raise([permanent]) is permanent
    bug = KeyError("x")  # not ours: raised, so redelivered, as any unexpected fault
    assert _to_raise([permanent, bug]) is bug


def test_an_unexpected_failure_reading_a_file_is_one_recorded_rejection(
    intake, uploads, client, monkeypatch
):
    # Issue 20: a MemoryError (or anything else no one foresaw) escaped submit_file, and the
    # Eventarc path retried it for 24 hours, killing an instance on each delivery.
    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("shared.app.services.uploads.messages", broken)
    resource = put(uploads, "requests/deep.yaml", "workerPoolSpecs: {}\n")
    assert eventarc(client, resource).status_code == 200
    (rejection,) = intake.rejections.documents.values()
    assert rejection["errors"] == [
        {"path": "$", "message": "the file could not be read (RecursionError)"}
    ]
    assert not records(intake)
