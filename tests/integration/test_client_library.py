"""The client library against the embedded stack: a job built with the official Vertex SDK,
as an upstream system builds it, published with ``flexjobs.submit`` (no ``submit()`` of the
SDK's), becomes a Vertex job with the SDK's scheduling; ``status`` and ``cancel`` follow it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import flexjobs
from flexjobs_local.stack import LocalStack
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

IMAGE = "us-docker.pkg.dev/flexjobs/train:sdk"


def sdk_custom_job(project: str, display_name: str, seconds: int) -> Any:
    """A CustomJob as the SDK builds it: aiplatform.init, then the constructor (no network)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.protobuf import duration_pb2

    aiplatform.init(project=project, location="us-central1", credentials=AnonymousCredentials())
    job = aiplatform.CustomJob(
        display_name=display_name,
        worker_pool_specs=[
            {
                "machine_spec": {
                    "machine_type": "g2-standard-4",
                    "accelerator_type": "NVIDIA_L4",
                    "accelerator_count": 1,
                },
                "replica_count": 1,
                "container_spec": {
                    "image_uri": IMAGE,
                    "command": ["sleep"],
                    "args": [str(seconds)],
                },
            }
        ],
        staging_bucket="gs://flexjobs-sdk/staging",
    )
    # The SDK's own handle on the spec (CustomJob.job_spec): what submit() would set.
    strategy = aiplatform.compat.types.custom_job.Scheduling.Strategy.FLEX_START
    job.job_spec.scheduling.strategy = strategy
    job.job_spec.scheduling.max_wait_duration = duration_pb2.Duration(seconds=7200)
    return job


def created(stack: LocalStack, request_id: str) -> dict[str, Any] | None:
    """The CustomJob body the simulator was asked to create for ``request_id``."""
    for call in stack.simulator.calls(method="CreateCustomJob"):
        body = call["request"]["customJob"]
        if call["code"] == "OK" and body["labels"]["flexjobs-request"] == request_id:
            return dict(body)
    return None


def test_an_sdk_custom_job_submitted_through_the_library_runs_with_its_scheduling(
    stack: LocalStack, unique: Callable[[str], str]
) -> None:
    project = stack.config.project
    client = flexjobs.Client(project=project)
    display_name = unique("sdk-lib")
    job = sdk_custom_job(project, display_name, seconds=600)
    request_id = client.submit(job, request_id=unique("lib"), timeout=3600)

    body = wait_for(lambda: created(stack, request_id), 60, f"the Vertex job of {request_id}")
    spec = body["jobSpec"]
    assert spec["scheduling"]["strategy"] == "FLEX_START"
    assert spec["scheduling"]["maxWaitDuration"] == "7200s"
    assert spec["scheduling"]["timeout"] == "3600s"
    assert body["displayName"] == display_name
    assert spec["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == IMAGE
    assert spec["baseOutputDirectory"]["outputUriPrefix"].startswith("gs://flexjobs-sdk/staging/")

    found = wait_for(
        lambda: (s := client.status(request_id)).attempts and s,
        60,
        f"the first attempt of {request_id}",
    )
    assert isinstance(found, flexjobs.Status)
    assert found.kind == "customJob" and found.strategy == "FLEX_START"
    assert found.location == "us-central1"
    assert found.attempts[0].vertex_job == found.vertex_job
    assert found.vertex_job is not None and found.vertex_job.startswith(f"projects/{project}/")

    client.cancel(request_id)
    ended = wait_for(
        lambda: (s := client.status(request_id)).terminal and s, 60, f"{request_id} to end"
    )
    assert ended.state == "CANCELLED"


def test_an_invalid_sdk_job_is_refused_before_anything_is_published(
    stack: LocalStack, unique: Callable[[str], str]
) -> None:
    client = flexjobs.Client(project=stack.config.project)
    job = sdk_custom_job(stack.config.project, unique("sdk-bad"), seconds=5)
    job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type = "NVIDIA_TESLA_T4"
    request_id = unique("bad")
    with pytest.raises(flexjobs.InvalidRequest) as refused:
        client.submit(job, request_id=request_id)
    assert any("acceleratorType" in e.path for e in refused.value.errors)
    with pytest.raises(flexjobs.RequestNotFound):
        client.status(request_id)
    assert created(stack, request_id) is None
