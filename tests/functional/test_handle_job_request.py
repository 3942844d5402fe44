"""handle_job_request driven through functions-framework with real CloudEvents and fakes."""

from __future__ import annotations

import json

import pytest

from shared.app import handlers
from shared.app.commands import SubmitJob
from shared.ingress.envelopes import unwrap_message
from tests.events import load, pubsub_cloud_event
from tests.fakes import crash_on_next_record, key_labels


def test_seed_request_creates_one_flex_start_job(intake, post_event):
    response = post_event("handle_job_request", pubsub_cloud_event(load("seed_request")))

    assert response.status_code == 200
    (request, labels), *_ = intake.backend.created
    assert key_labels(labels) == {"flexjobs-request": "seed-1", "flexjobs-attempt": "1"}
    scheduling = request.spec["jobSpec"]["scheduling"]
    assert scheduling["strategy"] == "FLEX_START"
    assert scheduling["maxWaitDuration"] == "1800s"
    record = intake.jobs.job_store.get("seed-1")
    assert record["state"] == "QUEUED"
    assert record["vertexJob"].startswith("projects/p/locations/us-central1/customJobs/")


def test_redelivery_creates_nothing_more(intake, post_event):
    for _ in range(3):
        assert (
            post_event("handle_job_request", pubsub_cloud_event(load("seed_request"))).status_code
            == 200
        )
    assert len(intake.backend.created) == 1


def test_defaults_strategy_and_max_wait_when_absent(intake, post_event):
    body = load("seed_request")
    del body["customJob"]["jobSpec"]["scheduling"]
    post_event("handle_job_request", pubsub_cloud_event(body))
    scheduling = intake.backend.created[0][0].spec["jobSpec"]["scheduling"]
    assert scheduling["strategy"] == "FLEX_START"
    assert scheduling["maxWaitDuration"] == "86400s"


def test_zero_wait_is_kept(intake, post_event):
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"]["maxWaitDuration"] = "0s"
    post_event("handle_job_request", pubsub_cloud_event(body))
    assert intake.backend.created[0][0].spec["jobSpec"]["scheduling"]["maxWaitDuration"] == "0s"


def test_request_id_falls_back_to_attribute_then_message_id(intake, post_event):
    body = load("seed_request")
    del body["requestId"]
    post_event("handle_job_request", pubsub_cloud_event(body, message_id="m-1", requestId="attr-1"))
    post_event("handle_job_request", pubsub_cloud_event(body, message_id="m-2"))
    assert intake.jobs.job_store.get("attr-1") is not None
    assert intake.jobs.job_store.get("m-2") is not None


def test_bad_input_is_acknowledged_and_creates_nothing(intake, post_event):
    bad = [
        b"not json",
        b"\xff\xfe",
        json.dumps([1, 2]).encode(),
        json.dumps({"requestId": "x"}).encode(),
    ]
    for i, data in enumerate(bad):
        response = post_event("handle_job_request", pubsub_cloud_event(data, message_id=f"bad-{i}"))
        assert response.status_code == 200
    assert intake.backend.created == []
    assert set(intake.rejections.documents) == {"bad-0", "bad-1", "bad-2", "x"}
    assert all(doc["errors"] for doc in intake.rejections.documents.values())
    assert [m["state"] for m in intake.notifier.messages] == ["REJECTED"] * 4


def test_transient_backend_fault_is_not_acknowledged(intake, post_event):
    from shared.kernel.errors import BackendUnavailable

    intake.backend.fail_with = BackendUnavailable("Vertex AI CreateCustomJob failed: 503")
    response = post_event("handle_job_request", pubsub_cloud_event(load("seed_request")))
    assert response.status_code == 500
    assert intake.backend.created == []
    assert intake.jobs.job_store.get("seed-1")["state"] == "ACCEPTED"
    intake.backend.fail_with = None
    # The failed delivery released its claim, so the redelivery submits at once.
    assert (
        post_event("handle_job_request", pubsub_cloud_event(load("seed_request"))).status_code
        == 200
    )
    assert len(intake.backend.created) == 1


def test_crash_between_create_and_record_adopts_the_job(intake, post_event, clock):
    crash_on_next_record(intake.jobs)
    intake.clock = clock
    message = unwrap_message(pubsub_cloud_event(load("seed_request")))
    with pytest.raises(KeyboardInterrupt):
        handlers.submit_job(SubmitJob(message=message), intake)
    assert (
        intake.jobs.job_store.get("seed-1")["state"] == "ACCEPTED"
    )  # the claim was never released
    clock.advance(intake.settings.claim_ttl_seconds)  # the dead delivery's claim expires
    response = post_event("handle_job_request", pubsub_cloud_event(load("seed_request")))
    assert response.status_code == 200
    assert len(intake.backend.created) == 1
    assert intake.jobs.job_store.get("seed-1")["vertexJob"] == next(iter(intake.backend.jobs))


@pytest.mark.parametrize(
    ("kind", "event", "where"),
    [
        ("customJob", "seed_request", ("jobSpec",)),
        ("hyperparameterTuningJob", "hpt_request", ("trialJobSpec",)),
        ("trainingPipeline", "pipeline_request", ("trainingTaskInputs",)),
        ("deployModel", "deploy_request", ("deployedModel",)),
    ],
)
def test_snake_case_service_account_is_rejected_and_creates_nothing(
    intake, post_event, kind, event, where
):
    # The v1 parser takes proto field names too, so the allow-list must see this spelling.
    body = load(event)
    node = body[kind]
    for key in where:
        node = node[key]
    node["service_account"] = "owner@victim.iam.gserviceaccount.com"
    response = post_event("handle_job_request", pubsub_cloud_event(body))

    assert response.status_code == 200
    assert intake.backend.created == []
    assert intake.deployments.backend.deployed == []
    (rejection,) = intake.rejections.documents.values()
    assert [e["path"] for e in rejection["errors"]] == [".".join([kind, *where, "serviceAccount"])]


def test_sdk_encodings_are_accepted_and_sent_canonically(intake, post_event):
    body = load("seed_request")
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["replicaCount"] = "1"  # int64 as a string
    pool["machineSpec"]["acceleratorType"] = 8  # NVIDIA_TESLA_A100 by number
    body["customJob"]["jobSpec"]["network"] = ""  # a default value: absent
    body["customJob"]["state"] = 0  # output only
    post_event("handle_job_request", pubsub_cloud_event(body))

    (request, _), *_ = intake.backend.created
    sent = request.spec["jobSpec"]["workerPoolSpecs"][0]
    assert sent["replicaCount"] == 1
    assert sent["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_A100"
    assert "network" not in request.spec["jobSpec"] and "state" not in request.spec
    stored = json.loads(intake.jobs.job_store.get("seed-1")["request"])["jobSpec"][
        "workerPoolSpecs"
    ][0]
    assert (stored["replicaCount"], stored["machineSpec"]) == (1, sent["machineSpec"])


def test_an_auto_deadline_on_demand_cannot_meet_is_rejected_with_its_reason(intake, post_event):
    # Published 2026-11-30T12:00Z (the sample envelope); 24 h of work cannot end by 08:00 next day.
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "AUTO"}
    body.update(deadline="2026-12-01T08:00:00Z", estimatedRunSeconds=86400)
    response = post_event("handle_job_request", pubsub_cloud_event(body))

    assert response.status_code == 200
    assert intake.backend.created == []
    (rejection,) = intake.rejections.documents.values()
    (error,) = rejection["errors"]
    assert error["path"] == "deadline"
    assert error["message"].startswith("cannot be met even on on-demand capacity")
