"""Bodies built by the official Vertex SDK, in both of its JSON forms, reach the simulator.

The SDK (``google.cloud.aiplatform``) builds the resource and hands it to its API client's
``create_*`` method. Here that client is replaced by one that keeps the resource and stops, so
the body is exactly the one the SDK would send, and nothing reaches the network. Each body is
then written both ways the v1 types' ``to_json`` writes it: the REST form (enum names, no
defaults, int64 as strings) and proto-plus' default form (enum numbers, every default field).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

IMAGE = "us-docker.pkg.dev/flexjobs/train:sdk"
POOLS = [
    {
        "machine_spec": {
            "machine_type": "g2-standard-4",
            "accelerator_type": "NVIDIA_L4",
            "accelerator_count": 1,
        },
        "replica_count": 1,
        "container_spec": {"image_uri": IMAGE, "command": ["sleep"], "args": ["5"]},
    }
]


class _Captured(Exception):
    """Raised by the capturing client once it holds the SDK's resource."""


class CapturingClient:
    """Stands in for the SDK's GAPIC client: keeps what ``create_*`` gets, then stops."""

    def __init__(self) -> None:
        self.resources: list[Any] = []

    def __getattr__(self, method: str) -> Any:
        def create(*, parent: str, timeout: Any = None, **kwargs: Any) -> Any:
            (resource,) = kwargs.values()
            self.resources.append(resource)
            raise _Captured(method)

        if not method.startswith("create_"):
            raise AttributeError(method)
        return create


def sdk_custom_job(max_wait: int) -> Any:
    """The CustomJob the SDK's ``submit()`` sends, with FLEX_START and ``max_wait`` seconds."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform

    aiplatform.init(
        project="p",
        location="us-central1",
        staging_bucket="gs://flexjobs-sdk/staging",
        credentials=AnonymousCredentials(),
    )
    job = aiplatform.CustomJob(display_name=f"sdk-custom-{max_wait}", worker_pool_specs=POOLS)
    client = CapturingClient()
    job.api_client = client
    with pytest.raises(_Captured):
        job.submit(
            scheduling_strategy=aiplatform.compat.types.custom_job.Scheduling.Strategy.FLEX_START,
            max_wait_duration=max_wait,
        )
    (resource,) = client.resources
    return resource


def sdk_tuning_job(max_wait: int) -> Any:
    """The HyperparameterTuningJob the SDK's ``run()`` sends."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    trial = aiplatform.CustomJob(display_name="sdk-trial", worker_pool_specs=POOLS)
    job = aiplatform.HyperparameterTuningJob(
        display_name=f"sdk-tuning-{max_wait}",
        custom_job=trial,
        metric_spec={"loss": "minimize"},
        parameter_spec={"lr": hpt.DoubleParameterSpec(min=0.0001, max=0.1, scale="log")},
        max_trial_count=4,
        parallel_trial_count=2,
    )
    client = CapturingClient()
    job.api_client = client
    with pytest.raises(_Captured):
        job.run(
            scheduling_strategy=aiplatform.compat.types.custom_job.Scheduling.Strategy.FLEX_START,
            max_wait_duration=max_wait,
            sync=True,
        )
    (resource,) = client.resources
    return resource


def both_forms(resource: Any) -> tuple[str, str]:
    """(REST form, proto-plus default form) of a v1 resource, as the SDK's types write them."""
    cls = type(resource)
    rest = cls.to_json(
        resource, use_integers_for_enums=False, always_print_fields_with_no_presence=False
    )
    return rest, cls.to_json(resource)


def test_sdk_bodies_in_both_json_forms_become_jobs_with_the_sdks_scheduling(stack, unique):
    import json

    custom = sdk_custom_job(max_wait=7200)
    tuning = sdk_tuning_job(max_wait=0)
    # What the SDK built, before any JSON: FLEX_START, and a zero max wait that is present.
    assert custom.job_spec.scheduling.max_wait_duration.seconds == 7200
    assert "max_wait_duration" in tuning.trial_job_spec.scheduling
    custom_rest, custom_default = both_forms(custom)
    tuning_rest, tuning_default = both_forms(tuning)
    assert '"replicaCount": "1"' in custom_rest  # int64 as a string
    assert '"acceleratorType": 11' in custom_default and '"serviceAccount": ""' in custom_default

    sent = {
        unique("sdk-custom-rest"): ("customJob", custom_rest, "7200s"),
        unique("sdk-custom-default"): ("customJob", custom_default, "7200s"),
        unique("sdk-tuning-rest"): ("hyperparameterTuningJob", tuning_rest, "0s"),
        unique("sdk-tuning-default"): ("hyperparameterTuningJob", tuning_default, "0s"),
    }
    for rid, (kind, text, _) in sent.items():
        stack.publish_request({"requestId": rid, kind: json.loads(text)})

    methods = {
        "customJob": "CreateCustomJob",
        "hyperparameterTuningJob": "CreateHyperparameterTuningJob",
    }
    spec_keys = {"customJob": "jobSpec", "hyperparameterTuningJob": "trialJobSpec"}
    for rid, (kind, _, max_wait) in sent.items():

        def made(rid: str = rid, kind: str = kind) -> dict[str, Any] | None:
            for call in stack.simulator.calls(method=methods[kind]):
                body = call["request"][kind]
                if call["code"] == "OK" and body["labels"]["flexjobs-request"] == rid:
                    return dict(body)
            return None

        body = wait_for(made, what=f"the job of {rid}")
        spec = body[spec_keys[kind]]
        assert spec["scheduling"]["strategy"] == "FLEX_START"
        assert spec["scheduling"]["maxWaitDuration"] == max_wait
        (pool,) = spec["workerPoolSpecs"]
        assert pool["machineSpec"] == {
            "machineType": "g2-standard-4",
            "acceleratorType": "NVIDIA_L4",
            "acceleratorCount": 1,
        }
        assert pool["containerSpec"]["imageUri"] == IMAGE
        assert "serviceAccount" not in spec
