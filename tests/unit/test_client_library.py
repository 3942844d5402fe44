"""The client library (``import flexjobs``) offline: bodies from the official SDK's objects,
validation, publishing and status, on in-memory fakes of the ports it uses."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import flexjobs
from flexjobs.connection import resolve_project
from shared.kernel.config import Settings
from tests.fakes import (
    InMemoryAttemptStore,
    InMemoryDeploymentStore,
    InMemoryJobStore,
    InMemoryJobViews,
    InMemoryPublisher,
    InMemoryRejectionLog,
)

EVENTS = Path(__file__).parents[1] / "events"
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
POOLS = [
    {
        "machine_spec": {
            "machine_type": "g2-standard-4",
            "accelerator_type": "NVIDIA_L4",
            "accelerator_count": 1,
        },
        "replica_count": 1,
        "container_spec": {"image_uri": "us-docker.pkg.dev/p/train:1", "args": ["5"]},
    }
]


def seed() -> dict[str, Any]:
    body: dict[str, Any] = json.loads((EVENTS / "seed_request.json").read_text())
    return body


class Fakes:
    def __init__(self) -> None:
        self.publisher = InMemoryPublisher()
        self.jobs = InMemoryJobStore()
        self.attempts = InMemoryAttemptStore(self.jobs.database)
        self.deployments = InMemoryDeploymentStore()
        self.views = InMemoryJobViews(self.jobs.database, self.deployments)
        self.rejections = InMemoryRejectionLog()
        self.client = flexjobs.Client(
            "p",
            topic="requests",
            settings=Settings(project=""),
            publisher=self.publisher,
            views=self.views,
            rejections=self.rejections,
            clock=lambda: NOW,
        )

    def published(self) -> list[tuple[dict[str, Any], dict[str, str]]]:
        assert all(topic == "requests" for topic, _, _ in self.publisher.messages)
        return [(json.loads(data), attrs) for _, data, attrs in self.publisher.messages]


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


def sdk_job(location: str = "europe-west4") -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform

    aiplatform.init(project="p", location=location, credentials=AnonymousCredentials())
    return aiplatform.CustomJob(
        display_name="sdk-train", worker_pool_specs=POOLS, staging_bucket="gs://b/staging"
    )


def test_submit_publishes_the_message_and_returns_its_request_id(fakes: Fakes) -> None:
    body = seed()
    rid = fakes.client.submit(body, request_id="mine-1")
    assert rid == "mine-1"
    [(sent, attributes)] = fakes.published()
    assert sent["requestId"] == attributes["requestId"] == "mine-1"
    assert sent["customJob"] == body["customJob"]
    assert body["requestId"] == seed()["requestId"]  # the caller's mapping is left alone
    # Compact JSON: the bytes intake's size bound counts are the bytes sent.
    assert fakes.publisher.messages[0][1] == json.dumps(sent, separators=(",", ":")).encode()


def test_a_request_without_an_id_gets_a_fresh_one(fakes: Fakes) -> None:
    body = seed()
    body.pop("requestId")
    first, second = fakes.client.submit(body), fakes.client.submit(body)
    assert first.startswith("flexjobs-") and second.startswith("flexjobs-") and first != second


def test_an_invalid_request_raises_every_problem_and_publishes_nothing(fakes: Fakes) -> None:
    body = seed()
    body["location"] = "attacker.example:443#"
    body["bogus"] = 1
    with pytest.raises(flexjobs.InvalidRequest) as refused:
        fakes.client.submit(body)
    paths = {e.path for e in refused.value.errors}
    assert {"location", "bogus"} <= paths
    assert fakes.publisher.messages == []
    assert {e.path for e in fakes.client.validate(body)} == paths
    assert fakes.client.validate(seed()) == []


def test_validate_names_an_object_of_no_kind_at_the_root(fakes: Fakes) -> None:
    [problem] = fakes.client.validate(object())
    assert problem.path == "$" and "object" in problem.message
    assert isinstance(problem, flexjobs.FieldError)


def test_an_sdk_custom_job_is_sent_as_vertex_would_receive_it(fakes: Fakes) -> None:
    from google.cloud import aiplatform

    job = sdk_job()
    strategy = aiplatform.compat.types.custom_job.Scheduling.Strategy
    job.job_spec.scheduling.strategy = strategy.FLEX_START
    job.job_spec.scheduling.restart_job_on_worker_restart = True
    rid = fakes.client.submit(job, request_id="sdk-1", max_wait_duration=3600)
    [(sent, _)] = fakes.published()
    assert rid == "sdk-1"
    custom = sent["customJob"]
    assert custom["displayName"] == "sdk-train"
    assert sent["location"] == "europe-west4"  # the SDK job's location
    pool = custom["jobSpec"]["workerPoolSpecs"][0]
    assert pool["replicaCount"] == "1"  # the REST form: int64 as a string
    assert pool["machineSpec"]["acceleratorType"] == "NVIDIA_L4"
    # What the SDK object held is kept; the knob given here is set over it.
    assert custom["jobSpec"]["scheduling"] == {
        "strategy": "FLEX_START",
        "restartJobOnWorkerRestart": True,
        "maxWaitDuration": "3600s",
    }
    # The caller's SDK object is not changed.
    assert "max_wait_duration" not in job.job_spec.scheduling


def test_a_region_and_a_display_name_win_over_the_sdk_jobs(fakes: Fakes) -> None:
    fakes.client.submit(sdk_job(), region="us-central1", display_name="renamed", timeout=7200)
    [(sent, _)] = fakes.published()
    assert sent["location"] == "us-central1"
    assert sent["customJob"]["displayName"] == "renamed"
    assert sent["customJob"]["jobSpec"]["scheduling"] == {"timeout": "7200s"}


def test_v1_protos_of_both_wrappings_are_taken(fakes: Fakes) -> None:
    from google.cloud import aiplatform_v1

    proto = aiplatform_v1.CustomJob(
        display_name="proto",
        job_spec=aiplatform_v1.CustomJobSpec(
            worker_pool_specs=[aiplatform_v1.WorkerPoolSpec(**POOLS[0])],
            scheduling=aiplatform_v1.Scheduling(strategy="SPOT"),
        ),
    )
    raw = aiplatform_v1.CustomJob.pb(proto)
    fakes.client.submit(proto, request_id="plus")
    fakes.client.submit(raw, request_id="raw")
    [(plus, _), (pb, _)] = fakes.published()
    assert plus["customJob"] == pb["customJob"]
    assert plus["customJob"]["jobSpec"]["scheduling"] == {"strategy": "SPOT"}
    assert "location" not in plus  # a proto names no location: the function's default


def test_an_sdk_tuning_job_goes_under_its_kind(fakes: Fakes) -> None:
    from google.cloud import aiplatform
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    job = aiplatform.HyperparameterTuningJob(
        display_name="sdk-tuning",
        custom_job=sdk_job(),
        metric_spec={"loss": "minimize"},
        parameter_spec={"lr": hpt.DoubleParameterSpec(min=0.0001, max=0.1, scale="log")},
        max_trial_count=4,
        parallel_trial_count=2,
    )
    fakes.client.submit(job, request_id="hpt", scheduling_strategy="FLEX_START")
    [(sent, _)] = fakes.published()
    tuning = sent["hyperparameterTuningJob"]
    assert tuning["trialJobSpec"]["scheduling"] == {"strategy": "FLEX_START"}
    assert tuning["parallelTrialCount"] == 2


def test_a_long_request_id_keeps_the_attribute_within_pubsubs_bound(fakes: Fakes) -> None:
    rid = "é" * 750  # 1,500 UTF-8 bytes: the most a requestId may have
    assert fakes.client.submit(seed(), request_id=rid) == rid
    [(sent, attributes)] = fakes.published()
    assert sent["requestId"] == rid
    assert len(attributes["requestId"].encode()) == 1024


def test_cancel_publishes_the_cancel_and_refuses_an_empty_id(fakes: Fakes) -> None:
    fakes.client.cancel("r1")
    assert fakes.published() == [({"cancel": "r1"}, {"requestId": "r1"})]
    with pytest.raises(flexjobs.InvalidRequest):
        fakes.client.cancel("  ")
    assert len(fakes.publisher.messages) == 1


def test_a_failed_publish_is_retryable(fakes: Fakes) -> None:
    fakes.publisher.fail_next = flexjobs.PublishFailed("publish did not complete")
    with pytest.raises(flexjobs.PublishFailed) as failed:
        fakes.client.submit(seed())
    assert failed.value.retryable
    assert fakes.client.submit(seed()) == seed()["requestId"]


def test_status_of_a_job_with_its_attempts(fakes: Fakes) -> None:
    fakes.jobs.create(
        "r1",
        {
            "requestId": "r1",
            "kind": "customJob",
            "state": "RUNNING",
            "attempt": 2,
            "strategy": "FLEX_START",
            "createdAt": NOW,
            "gpuSeconds": 5400,
            "cost": {"costUsd": 1.5},
            "request": {"customJob": {}},
        },
    )
    fakes.attempts.update_attempt("r1", 2, {"attempt": 2, "state": "RUNNING"})
    fakes.attempts.update_attempt(
        "r1", 1, {"attempt": 1, "state": "FAILED", "errorClass": "STOCKOUT"}
    )
    found = flexjobs_status(fakes, "r1")
    assert isinstance(found, flexjobs.Status)
    assert (found.state, found.attempt, found.strategy, found.created_at) == (
        "RUNNING",
        2,
        "FLEX_START",
        NOW,
    )
    assert found.gpu_hours == 1.5 and found.cost_usd == 1.5
    assert not found.terminal and not found.rejected
    assert [(a.attempt, a.error_class) for a in found.attempts] == [(1, "STOCKOUT"), (2, None)]
    assert "request" not in found.record  # the bounded read: the status page's fields


def flexjobs_status(fakes: Fakes, rid: str) -> flexjobs.Status:
    return fakes.client.status(rid)


def test_status_of_a_deployment_and_of_a_rejection(fakes: Fakes) -> None:
    fakes.deployments.create("d1", {"requestId": "d1", "state": "DEPLOYED", "createdAt": NOW})
    deployed = fakes.client.status("d1")
    assert (deployed.collection, deployed.state, deployed.succeeded) == (
        "deployments",
        "DEPLOYED",
        True,
    )
    fakes.rejections.record("bad", {"errors": [{"path": "location", "message": "must be"}]})
    refused = fakes.client.status("bad")
    assert refused.rejected and refused.terminal
    assert refused.errors == (flexjobs.FieldError("location", "must be"),)


def test_status_of_an_unknown_request(fakes: Fakes) -> None:
    with pytest.raises(flexjobs.RequestNotFound) as missing:
        fakes.client.status("nobody")
    assert isinstance(missing.value, LookupError) and not missing.value.retryable
    assert "nobody" in str(missing.value) and "project p" in str(missing.value)


def test_a_firestore_outage_is_retryable(fakes: Fakes) -> None:
    fakes.views.fail = flexjobs.StoreUnavailable("Firestore get failed")
    with pytest.raises(flexjobs.StoreUnavailable) as down:
        fakes.client.status("r1")
    assert down.value.retryable


def test_the_module_functions_use_the_default_client(fakes: Fakes) -> None:
    flexjobs.set_default_client(fakes.client)
    try:
        assert flexjobs.submit(seed()) == seed()["requestId"]
        flexjobs.cancel(seed()["requestId"])
        assert flexjobs.validate({"customJob": {}})
        with pytest.raises(flexjobs.RequestNotFound):
            flexjobs.status("nobody")
    finally:
        flexjobs.set_default_client(None)
    assert len(fakes.publisher.messages) == 2


def test_the_project_comes_from_the_argument_then_the_environment_then_adc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adc = lambda: "from-adc"  # noqa: E731
    env = {"GOOGLE_CLOUD_PROJECT": "from-env", "GCLOUD_PROJECT": "from-gcloud-env"}
    assert resolve_project("given", env, adc) == "given"
    assert resolve_project(None, env, adc) == "from-env"
    assert resolve_project(None, {"GCLOUD_PROJECT": "from-gcloud-env"}, adc) == "from-gcloud-env"
    assert resolve_project(None, {}, adc) == "from-adc"
    with pytest.raises(flexjobs.ConfigurationError, match="no project"):
        resolve_project(None, {}, lambda: None)
    # The client resolves the same way, from this process's environment, once asked.
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    monkeypatch.setattr("flexjobs.connection.adc_project", adc)
    assert flexjobs.Client().project == "from-env"
    assert flexjobs.Client("given").project == "given"
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    monkeypatch.delenv("GCLOUD_PROJECT", raising=False)
    assert flexjobs.Client().project == "from-adc"


def test_adc_without_credentials_names_no_project(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.auth.exceptions import DefaultCredentialsError

    from flexjobs.connection import adc_project

    def no_credentials() -> Any:
        raise DefaultCredentialsError("none")

    monkeypatch.setattr("google.auth.default", no_credentials)
    assert adc_project() is None
    monkeypatch.setattr("google.auth.default", lambda: (object(), "gcloud-project"))
    assert adc_project() == "gcloud-project"


def test_a_bad_flexjobs_setting_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXJOBS_LOCATION", "attacker.example")
    with pytest.raises(flexjobs.ConfigurationError, match="FLEXJOBS_LOCATION"):
        flexjobs.Client("p").validate(seed())


def test_the_package_is_typed() -> None:
    assert (Path(flexjobs.__file__).parent / "py.typed").exists()
