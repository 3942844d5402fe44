"""The two other training kinds and Spot deployments, end to end on the embedded stack.

Pub/Sub emulator → handle_job_request → Vertex AI simulator (gRPC) + Firestore emulator.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shared.adapters.vertex.jobs import ENDPOINT_SERVICE, build_gapic_client
from shared.kernel.config import Settings
from tests.events import load
from tests.fakes import key_labels
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def job_record(db: Any, request_id: str) -> dict[str, Any] | None:
    snap = db.collection("jobs").document(request_id).get()
    record = snap.to_dict() if snap.exists else None
    return record if record and record.get("vertexJob") else None


def deployment_record(db: Any, request_id: str) -> dict[str, Any] | None:
    snap = db.collection("deployments").document(request_id).get()
    return snap.to_dict() if snap.exists else None


def log_messages(stack: Any, request_id: str) -> list[str]:
    """The messages handle_job_request logged for one requestId."""
    lines = stack.function_logs("handle_job_request").splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    return [
        entry["message"]
        for entry in entries
        if entry.get("logging.googleapis.com/labels", {}).get("requestId") == request_id
    ]


def created(stack: Any, method: str, kind: str, label: str) -> list[dict[str, Any]]:
    return [
        call["request"][kind]
        for call in stack.simulator.calls(method=method)
        if call["code"] == "OK" and call["request"][kind]["labels"]["flexjobs-request"] == label
    ]


@pytest.mark.parametrize(
    ("event", "kind", "method", "collection", "spec_key"),
    [
        (
            "hpt_request",
            "hyperparameterTuningJob",
            "CreateHyperparameterTuningJob",
            "hyperparameterTuningJobs",
            "trialJobSpec",
        ),
        (
            "pipeline_request",
            "trainingPipeline",
            "CreateTrainingPipeline",
            "trainingPipelines",
            "trainingTaskInputs",
        ),
    ],
)
def test_training_kind_reaches_the_simulator_with_flex_start_in_its_place(
    stack, db, unique, event, kind, method, collection, spec_key
):
    rid = unique(kind.lower())
    body = load(event)
    body["requestId"] = rid
    del body[kind][spec_key]["scheduling"]  # flexjobs' defaults must land in the right place
    stack.publish_request(body)

    record = wait_for(lambda: job_record(db, rid), what=f"the {kind} record")
    assert record["kind"] == kind
    assert record["state"] in {"QUEUED", "RUNNING", "SUCCEEDED"}
    assert record["strategy"] == "FLEX_START"
    assert f"/{collection}/" in record["vertexJob"]
    (sent,) = created(stack, method, kind, rid)
    assert sent[spec_key]["scheduling"]["strategy"] == "FLEX_START"
    assert sent[spec_key]["scheduling"]["maxWaitDuration"] == "86400s"
    assert key_labels(sent["labels"]) == {"flexjobs-request": rid, "flexjobs-attempt": "1"}
    job = stack.simulator.job(record["vertexJob"])
    assert job["displayName"] == body[kind]["displayName"]


@pytest.fixture
def endpoint(stack: Any) -> str:
    """A fresh endpoint in the simulator (created through the real EndpointService client)."""
    settings = Settings.from_env()
    client = build_gapic_client(settings, ENDPOINT_SERVICE, settings.location)
    parent = f"projects/{settings.project}/locations/{settings.location}"
    client.create_endpoint(
        parent=parent, endpoint={"display_name": "spot-endpoint"}, endpoint_id="123", timeout=30
    )
    name = f"{parent}/endpoints/123"
    wait_for(
        lambda: any(e["name"] == name for e in stack.simulator.endpoints()), what="the endpoint"
    )
    return name


def test_spot_deployment_reaches_the_endpoint_and_its_record_becomes_deployed(
    stack, db, unique, endpoint
):
    rid = unique("deploy")
    body = load("deploy_request")
    body["requestId"] = rid
    body["deployModel"]["endpoint"] = endpoint
    body["deployModel"]["deployedModel"]["model"] = endpoint.replace("endpoints/123", "models/456")
    stack.publish_request(body)

    record = wait_for(
        lambda: (r := deployment_record(db, rid)) and r.get("operation") and r,
        what="the DEPLOYING record",
    )
    assert record["state"] == "DEPLOYING"
    assert record["kind"] == "deployModel"
    assert record["spot"] is True
    assert record["endpoint"] == endpoint
    assert record["operation"].startswith(f"{endpoint}/operations/")
    (call,) = [c for c in stack.simulator.calls(method="DeployModel") if c["code"] == "OK"]
    deployed = call["request"]["deployedModel"]
    assert deployed["dedicatedResources"]["spot"] is True
    assert deployed["displayName"] == f"served [flexjobs {rid}]"

    # The scheduler tick follows the operation.
    wait_for(lambda: tick(stack) and deployment_record(db, rid)["state"] == "DEPLOYED",
             what="the deployment to be DEPLOYED")  # fmt: skip
    record = deployment_record(db, rid)
    assert record["state"] == "DEPLOYED"
    (model,) = next(e for e in stack.simulator.endpoints() if e["name"] == endpoint)[
        "deployedModels"
    ]
    assert record["deployedModelId"] == model["id"]
    assert model["dedicatedResources"]["spot"] is True
    assert record["updatedAt"] >= record["createdAt"]
    # From then on the tick follows its serving: one GetEndpoint, recorded on the record.
    wait_for(lambda: tick(stack) and "serving" in deployment_record(db, rid),
             what="the deployment's serving to be recorded")  # fmt: skip
    serving = deployment_record(db, rid)["serving"]
    assert serving["spotDeployedModelId"] == model["id"]
    assert serving["last"]["required"] == 1
    # The simulator reports every required replica available once deployed, as Vertex does.
    assert serving["last"]["spot"] == 1
    assert serving["phase"] == "SERVING"


def tick(stack) -> bool:
    """Fire one scheduler tick (as Cloud Scheduler would) and give it a moment to run."""
    stack.publish("scheduler-ticks", {"tick": "test"})
    time.sleep(1)
    return True


def test_redelivered_deployment_is_deployed_once(stack, db, unique, endpoint):
    rid = unique("deploy-dup")
    body = load("deploy_request")
    body["requestId"] = rid
    body["deployModel"]["endpoint"] = endpoint
    for _ in range(3):
        stack.publish_request(body)
    wait_for(
        lambda: (r := deployment_record(db, rid)) and r.get("operation"),
        what="the DEPLOYING record",
    )
    wait_for(lambda: tick(stack) and deployment_record(db, rid)["state"] == "DEPLOYED",
             what="the deployment to be DEPLOYED")  # fmt: skip
    # Redeliveries that arrive after DEPLOYED find the record and deploy nothing more.
    stack.publish_request(body)
    wait_for(
        lambda: (
            "duplicate delivery: the deployment is recorded already" in log_messages(stack, rid)
        ),
        what="a duplicate delivery to be acknowledged",
    )
    calls = [c for c in stack.simulator.calls(method="DeployModel") if c["code"] == "OK"]
    assert len(calls) == 1
