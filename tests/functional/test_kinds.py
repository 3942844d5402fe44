"""Tuning jobs, training pipelines and Spot deployments through handle_job_request, on fakes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from shared.app.services.deploy import refresh_deployments
from shared.domain.serving.model import InFlight
from shared.kernel.errors import QuotaExhausted
from tests.events import load, pubsub_cloud_event
from tests.fakes import key_labels
from tests.functional.conftest import ENDPOINT


def post(post_event, body, **kwargs):
    response = post_event("handle_job_request", pubsub_cloud_event(body, **kwargs))
    assert response.status_code == 200
    return response


@pytest.mark.parametrize(
    ("event", "collection", "spec_key"),
    [
        ("hpt_request", "hyperparameterTuningJobs", "trialJobSpec"),
        ("pipeline_request", "trainingPipelines", "trainingTaskInputs"),
    ],
)
def test_training_kinds_get_flex_start_where_their_scheduling_lives(
    intake, post_event, event, collection, spec_key
):
    body = load(event)
    del body[next(k for k in body if k != "requestId")][spec_key]["scheduling"]
    post(post_event, body)

    (request, labels), *_ = intake.backend.created
    assert request.kind == next(k for k in load(event) if k != "requestId")
    assert request.spec[spec_key]["scheduling"] == {
        "strategy": "FLEX_START",
        "maxWaitDuration": "86400s",
        "timeout": "604800s",
    }
    assert key_labels(labels) == {"flexjobs-request": body["requestId"], "flexjobs-attempt": "1"}
    record = intake.jobs.job_store.get(body["requestId"])
    assert record["kind"] == request.kind
    assert f"/{collection}/" in record["vertexJob"]
    assert record["state"] == "QUEUED"


@pytest.mark.parametrize("event", ["hpt_request", "pipeline_request"])
def test_training_kinds_are_created_once_however_often_delivered(intake, post_event, event):
    for _ in range(3):
        post(post_event, load(event))
    assert len(intake.backend.created) == 1


def test_spot_deployment_is_deployed_once_and_followed_to_deployed(intake, post_event):
    deployments = intake.deployments
    for _ in range(3):
        post(post_event, load("deploy_request"))

    assert intake.backend.created == []  # no training job for a deployment
    assert len(deployments.backend.deployed) == 1
    (request, display_name), *_ = deployments.backend.deployed
    assert request.spec["deployedModel"]["dedicatedResources"]["spot"] is True
    assert display_name == "served [flexjobs deploy-1]"
    record = deployments.records.deployment_store.get("deploy-1")
    assert record["state"] == "DEPLOYING"
    assert record["kind"] == "deployModel"
    assert record["spot"] is True
    assert record["endpoint"] == ENDPOINT
    assert record["operation"].startswith(f"{ENDPOINT}/operations/")
    assert "claim" not in record

    assert refresh_deployments(deployments) == 0  # still running: nothing changes
    deployments.backend.finish(record["operation"])
    # One write: DEPLOYED, and followed from the same read.
    assert refresh_deployments(deployments) == 1
    assert refresh_deployments(deployments) == 0  # replaying the observation changes nothing
    record = deployments.records.deployment_store.get("deploy-1")
    assert record["state"] == "DEPLOYED"
    assert record["serving"]["last"] == {"spot": 1, "onDemand": 0, "required": 1}
    assert record["deployedModelId"] == deployments.backend.endpoints[ENDPOINT][0]["id"]


def test_failed_operation_marks_the_deployment_failed(intake, post_event):
    deployments = intake.deployments
    post(post_event, load("deploy_request"))
    operation = deployments.records.deployment_store.get("deploy-1")["operation"]
    deployments.backend.finish(operation, error="Spot capacity unavailable")
    assert refresh_deployments(deployments) == 1
    record = deployments.records.deployment_store.get("deploy-1")
    assert record["state"] == "FAILED"
    assert record["reason"] == "DeployModel(spot) failed: Spot capacity unavailable"


def test_deployment_already_on_the_endpoint_is_adopted_not_redeployed(intake, post_event):
    deployments = intake.deployments
    # A delivery that died after DeployModel finished but before its record: the model is on
    # the endpoint, tagged with the requestId, and the record is still only claimed.
    deployments.backend.endpoints[ENDPOINT].append(
        {
            "id": "77",
            "displayName": "served [flexjobs deploy-1]",
            "dedicatedResources": {"spot": True, "minReplicaCount": 1},
        }
    )
    post(post_event, load("deploy_request"))
    assert deployments.backend.deployed == []
    record = deployments.records.deployment_store.get("deploy-1")
    assert record["state"] == "DEPLOYED"
    assert record["deployedModelId"] == "77"


def test_unknown_endpoint_fails_the_deployment_for_good(intake, post_event):
    body = load("deploy_request")
    body["deployModel"]["endpoint"] = "projects/p/locations/us-central1/endpoints/999"
    post(post_event, body)
    record = intake.deployments.records.deployment_store.get("deploy-1")
    assert record["state"] == "FAILED"
    assert "not found" in record["reason"]
    assert intake.deployments.backend.deployed == []


def test_transient_deploy_fault_is_redelivered_and_releases_the_claim(intake, post_event):
    from shared.kernel.errors import BackendUnavailable

    deployments = intake.deployments
    deployments.backend.fail_with = BackendUnavailable("Vertex AI DeployModel failed: 503")
    response = post_event("handle_job_request", pubsub_cloud_event(load("deploy_request")))
    assert response.status_code == 500
    assert "claim" not in deployments.records.deployment_store.get("deploy-1")
    deployments.backend.fail_with = None
    post(post_event, load("deploy_request"))
    assert len(deployments.backend.deployed) == 1
    assert deployments.records.deployment_store.get("deploy-1")["state"] == "DEPLOYING"


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"spot": False}, "deployModel.deployedModel.dedicatedResources.spot"),
        ({"minReplicaCount": 0}, "deployModel.deployedModel.dedicatedResources.minReplicaCount"),
        ({"maxReplicaCount": -1}, "deployModel.deployedModel.dedicatedResources.maxReplicaCount"),
    ],
)
def test_bad_deployment_leaves_a_rejection_and_deploys_nothing(intake, post_event, change, path):
    body = load("deploy_request")
    body["deployModel"]["deployedModel"]["dedicatedResources"].update(change)
    post(post_event, body)
    assert intake.deployments.backend.deployed == []
    assert intake.deployments.records.deployment_store.get("deploy-1") is None
    document = intake.rejections.documents["deploy-1"]
    assert path in [e["path"] for e in document["errors"]]
    assert [m["state"] for m in intake.notifier.messages] == ["REJECTED"]


def test_bad_traffic_split_is_rejected(intake, post_event):
    body = load("deploy_request")
    body["deployModel"]["trafficSplit"] = {"0": 60}
    post(post_event, body)
    errors = intake.rejections.documents["deploy-1"]["errors"]
    assert [e["path"] for e in errors] == ["deployModel.trafficSplit"]


@pytest.mark.parametrize(
    ("options", "path"),
    [
        ({"retryPolicy": {"preemption": -1}}, "retryPolicy.preemption"),
        ({"retryPolicy": {"sometimes": 1}}, "retryPolicy.sometimes"),
        ({"fallback": [{"afterCapacityFailures": 2}]}, "fallback[0]"),
        ({"fallback": "STANDARD"}, "fallback"),
        ({"checkpointUri": "s3://bucket/ckpt"}, "checkpointUri"),
    ],
)
def test_bad_options_are_rejected_with_their_path(intake, post_event, options, path):
    post(post_event, {**load("hpt_request"), **options})
    assert intake.backend.created == []
    assert path in [e["path"] for e in intake.rejections.documents["hpt-1"]["errors"]]


def test_every_problem_is_reported_at_once(intake, post_event):
    body = load("pipeline_request")
    body["trainingPipeline"]["trainingTaskInputs"]["workerPoolSpecs"][0]["replicaCount"] = -1
    body["retryPolicy"] = {"capacity": 1000}
    body["checkpointUri"] = 7
    post(post_event, body)
    paths = {e["path"] for e in intake.rejections.documents["pipeline-1"]["errors"]}
    assert paths == {
        "trainingPipeline.trainingTaskInputs.workerPoolSpecs[0].replicaCount",
        "retryPolicy.capacity",
        "checkpointUri",
    }
    notification = intake.notifier.messages[0]
    assert notification["state"] == "REJECTED"
    assert len(notification["errors"]) == 3


def test_options_are_refused_on_deployments(intake, post_event):
    post(post_event, {**load("deploy_request"), "retryPolicy": {"preemption": 1}})
    errors = intake.rejections.documents["deploy-1"]["errors"]
    assert [e["path"] for e in errors] == ["retryPolicy"]


def test_valid_options_are_kept_on_the_request(intake, post_event):
    options = {
        "retryPolicy": {"preemption": 10},
        "fallback": [{"afterCapacityFailures": 2, "strategy": "STANDARD"}],
        "checkpointUri": "gs://bucket/ckpt/",
    }
    post(post_event, {**load("hpt_request"), **options})
    (request, _), *_ = intake.backend.created
    assert json.loads(json.dumps(request.options)) == options


@pytest.mark.parametrize(
    ("event", "path"),
    [
        ("pipeline_request", "trainingPipeline.noSuchField"),
        ("deploy_request", "deployModel.noSuchField"),
    ],
)
def test_bodies_the_v1_protos_refuse_are_rejected_not_redelivered(intake, post_event, event, path):
    body = load(event)
    kind = next(k for k in body if k != "requestId")
    body[kind]["noSuchField"] = {"nested": True}
    post(post_event, body)
    errors = intake.rejections.documents[body["requestId"]]["errors"]
    assert any(e["path"] == path and "noSuchField" in e["message"] for e in errors)
    assert intake.backend.created == []
    assert intake.deployments.backend.deployed == []


def test_deployment_refused_for_quota_is_parked_and_deployed_by_the_tick(intake, post_event):
    deployments = intake.deployments
    deployments.backend.fail_with = QuotaExhausted("Vertex AI DeployModel refused for quota: 429")

    post(post_event, load("deploy_request"))  # acknowledged: parked, not redelivered

    record = deployments.records.deployment_store.get("deploy-1")
    assert (record["state"], record["reason"], record["quotaRetries"]) == ("ACCEPTED", "quota", 1)
    assert record["nextAttemptAt"] > record["updatedAt"] - timedelta(seconds=1)
    assert deployments.backend.deployed == []
    deployments.backend.fail_with = None
    deployments.clock = lambda: record["nextAttemptAt"] + timedelta(seconds=1)

    assert refresh_deployments(deployments) == 1

    record = deployments.records.deployment_store.get("deploy-1")
    assert (record["state"], record["nextAttemptAt"], record["reason"]) == ("DEPLOYING", None, None)
    assert len(deployments.backend.deployed) == 1


def test_a_late_refusal_never_overwrites_a_deployed_model(intake, post_event):
    deployments = intake.deployments
    post(post_event, load("deploy_request"))
    claimed = InFlight.decode(
        deployments.records.deployment_store.get("deploy-1")["serving"]["pending"]
    )
    deployments.backend.finish(deployments.records.deployment_store.get("deploy-1")["operation"])
    assert refresh_deployments(deployments) == 1  # DEPLOYED, and followed

    # The DeployModel's refusal, written late (a delivery that stalled): its call is over.
    assert claimed is not None
    deployments.records.refused(
        "deploy-1", claimed, "a late refusal", deployments.clock(), retry_at=None
    )

    record = deployments.records.deployment_store.get("deploy-1")
    assert (record["state"], record.get("reason")) == ("DEPLOYED", None)
