"""The simulator's HyperparameterTuningJobs, TrainingPipelines and EndpointService (with LROs),
through the unmodified GAPIC clients."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.services.endpoint_service.transports import (
    EndpointServiceGrpcTransport,
)
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
from google.cloud.aiplatform_v1.services.pipeline_service.transports import (
    PipelineServiceGrpcTransport,
)
from google.protobuf import struct_pb2

from flexjobs_local.simulator import SimulatorControl, SimulatorHandle, serve
from tests.integration.simulator_support import A100, LOCATION, PARENT

pytestmark = pytest.mark.integration

L4 = "NVIDIA_L4"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = serve(time_factor=0, seed=11)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def channel(sim: SimulatorHandle) -> Iterator[grpc.Channel]:
    chan = grpc.insecure_channel(sim.grpc_endpoint)
    yield chan
    chan.close()


@pytest.fixture(scope="module")
def jobs(channel: grpc.Channel) -> aiplatform_v1.JobServiceClient:
    return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))


@pytest.fixture(scope="module")
def pipelines(channel: grpc.Channel) -> aiplatform_v1.PipelineServiceClient:
    return aiplatform_v1.PipelineServiceClient(
        transport=PipelineServiceGrpcTransport(channel=channel)
    )


@pytest.fixture(scope="module")
def endpoints(channel: grpc.Channel) -> aiplatform_v1.EndpointServiceClient:
    return aiplatform_v1.EndpointServiceClient(
        transport=EndpointServiceGrpcTransport(channel=channel)
    )


def in_use(control: SimulatorControl, accelerator: str = A100) -> int:
    return sum(
        pool["inUse"]
        for pool in control.capacity()["pools"]
        if pool["location"] == LOCATION and pool["acceleratorType"] == accelerator
    )


def trial_spec(strategy: str = "FLEX_START") -> dict[str, Any]:
    return {
        "worker_pool_specs": [
            {
                "machine_spec": {
                    "machine_type": "a2-highgpu-2g",
                    "accelerator_type": A100,
                    "accelerator_count": 2,
                },
                "replica_count": 1,
                "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/trainer:1"},
            }
        ],
        "scheduling": {"strategy": strategy, "max_wait_duration": "3600s"},
    }


def hpt_job(parallel: int = 3) -> aiplatform_v1.HyperparameterTuningJob:
    return aiplatform_v1.HyperparameterTuningJob(
        display_name="sweep",
        labels={"flexjobs-request": "hpt-1"},
        max_trial_count=6,
        parallel_trial_count=parallel,
        study_spec={
            "metrics": [{"metric_id": "loss", "goal": "MINIMIZE"}],
            "parameters": [
                {"parameter_id": "lr", "double_value_spec": {"min_value": 1e-4, "max_value": 1e-1}}
            ],
        },
        trial_job_spec=trial_spec(),
    )


# --- hyperparameter tuning ---------------------------------------------------------------------


def test_hyperparameter_tuning_job_needs_all_parallel_trials_at_once(control, jobs):
    control.set_capacity(LOCATION, A100, 4)  # 3 parallel trials x 2 GPUs = 6 needed
    job = jobs.create_hyperparameter_tuning_job(parent=PARENT, hyperparameter_tuning_job=hpt_job())
    assert job.name.startswith(f"{PARENT}/hyperparameterTuningJobs/")
    assert job.state == aiplatform_v1.JobState.JOB_STATE_QUEUED

    control.advance(10)
    assert (
        jobs.get_hyperparameter_tuning_job(name=job.name).state
        == aiplatform_v1.JobState.JOB_STATE_PENDING
    )
    control.set_capacity(LOCATION, A100, 6)
    assert in_use(control) == 6
    control.advance(300)  # the default run time

    done = jobs.get_hyperparameter_tuning_job(name=job.name)
    assert done.state == aiplatform_v1.JobState.JOB_STATE_SUCCEEDED
    assert done.end_time - done.start_time == timedelta(seconds=300)
    assert done.trial_job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START


def test_hyperparameter_tuning_jobs_list_filter_and_cancel(control, jobs):
    first = jobs.create_hyperparameter_tuning_job(
        parent=PARENT, hyperparameter_tuning_job=hpt_job()
    )
    jobs.create_hyperparameter_tuning_job(parent=PARENT, hyperparameter_tuning_job=hpt_job(1))
    control.advance(10)

    listed = jobs.list_hyperparameter_tuning_jobs(
        request={"parent": PARENT, "filter": 'labels.flexjobs-request="hpt-1"', "page_size": 1}
    )
    assert len(list(listed)) == 2
    jobs.cancel_hyperparameter_tuning_job(name=first.name)
    control.advance(5)
    assert (
        jobs.get_hyperparameter_tuning_job(name=first.name).state
        == aiplatform_v1.JobState.JOB_STATE_CANCELLED
    )
    with pytest.raises(exceptions.FailedPrecondition):
        jobs.cancel_hyperparameter_tuning_job(name=first.name)
    with pytest.raises(exceptions.NotFound):
        jobs.get_hyperparameter_tuning_job(name=f"{PARENT}/hyperparameterTuningJobs/1")
    with pytest.raises(exceptions.InvalidArgument):
        jobs.create_hyperparameter_tuning_job(
            parent=PARENT,
            hyperparameter_tuning_job=aiplatform_v1.HyperparameterTuningJob(display_name="x"),
        )


# --- training pipelines ------------------------------------------------------------------------


def pipeline(max_wait: str = "1800s", gpus: int = 8) -> aiplatform_v1.TrainingPipeline:
    inputs = struct_pb2.Value()
    inputs.struct_value.update(
        {
            "workerPoolSpecs": [
                {
                    "machineSpec": {
                        "machineType": "g2-standard-96",
                        "acceleratorType": L4,
                        "acceleratorCount": gpus,
                    },
                    "replicaCount": 1,
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
                }
            ],
            "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": max_wait},
            "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/run-1"},
        }
    )
    return aiplatform_v1.TrainingPipeline(
        display_name="pipeline",
        labels={"flexjobs-request": "tp-1"},
        training_task_definition="gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml",
        training_task_inputs=inputs,
    )


def test_training_pipeline_runs_with_pipeline_states_and_keeps_its_inputs(control, pipelines):
    created = pipelines.create_training_pipeline(parent=PARENT, training_pipeline=pipeline())
    assert created.name.startswith(f"{PARENT}/trainingPipelines/")
    assert created.state == aiplatform_v1.PipelineState.PIPELINE_STATE_QUEUED

    control.advance(10)
    running = pipelines.get_training_pipeline(name=created.name)
    assert running.state == aiplatform_v1.PipelineState.PIPELINE_STATE_RUNNING
    assert in_use(control, L4) == 8
    control.advance(300)
    assert (
        pipelines.get_training_pipeline(name=created.name).state
        == aiplatform_v1.PipelineState.PIPELINE_STATE_SUCCEEDED
    )

    # The FLEX_START request is visible both to the GAPIC client and in the call log.
    scheduling = dict(running.training_task_inputs["scheduling"])
    assert scheduling == {"strategy": "FLEX_START", "maxWaitDuration": "1800s"}
    (call,) = control.calls("CreateTrainingPipeline")
    assert call["request"]["trainingPipeline"]["trainingTaskInputs"]["scheduling"]["strategy"] == (
        "FLEX_START"
    )
    listed = pipelines.list_training_pipelines(
        request={"parent": PARENT, "filter": "state=PIPELINE_STATE_SUCCEEDED"}
    )
    assert [p.name for p in listed] == [created.name]


def test_training_pipeline_expires_and_cancels_like_a_job(control, pipelines):
    control.set_capacity(LOCATION, L4, 0)
    expiring = pipelines.create_training_pipeline(parent=PARENT, training_pipeline=pipeline("600s"))
    waiting = pipelines.create_training_pipeline(parent=PARENT, training_pipeline=pipeline("0s"))
    control.advance(601)

    failed = pipelines.get_training_pipeline(name=expiring.name)
    assert failed.state == aiplatform_v1.PipelineState.PIPELINE_STATE_FAILED
    assert failed.error.code == 4
    assert "maxWaitDuration=600s" in failed.error.message
    assert "1 x g2-standard-96 with 8 NVIDIA_L4 each" in failed.error.message

    pipelines.cancel_training_pipeline(name=waiting.name)
    assert (
        pipelines.get_training_pipeline(name=waiting.name).state
        == aiplatform_v1.PipelineState.PIPELINE_STATE_CANCELLING
    )
    control.advance(5)
    assert (
        pipelines.get_training_pipeline(name=waiting.name).state
        == aiplatform_v1.PipelineState.PIPELINE_STATE_CANCELLED
    )


def test_training_pipeline_without_worker_pools_is_rejected(control, pipelines):
    bad = aiplatform_v1.TrainingPipeline(
        display_name="bad", training_task_definition="gs://x/custom_task_1.0.0.yaml"
    )
    with pytest.raises(exceptions.InvalidArgument, match="worker_pool_specs"):
        pipelines.create_training_pipeline(parent=PARENT, training_pipeline=bad)


# --- endpoints and long-running operations -----------------------------------------------------


def test_endpoint_create_deploy_undeploy_through_long_running_operations(control, endpoints):
    control.set_time_factor(600)  # LROs take 5 simulated seconds: under 0.01 wall seconds

    operation = endpoints.create_endpoint(
        parent=PARENT, endpoint=aiplatform_v1.Endpoint(display_name="serving")
    )
    endpoint = operation.result(timeout=60)
    assert endpoint.name.startswith(f"{PARENT}/endpoints/")
    assert endpoint.display_name == "serving"
    assert isinstance(operation.metadata, aiplatform_v1.CreateEndpointOperationMetadata)

    deployed = aiplatform_v1.DeployedModel(
        model=f"{PARENT}/models/123",
        display_name="model-v1",
        dedicated_resources={
            "machine_spec": {
                "machine_type": "g2-standard-8",
                "accelerator_type": L4,
                "accelerator_count": 1,
            },
            "min_replica_count": 1,
            "max_replica_count": 1,
            "spot": True,
        },
    )
    deploy = endpoints.deploy_model(endpoint=endpoint.name, deployed_model=deployed)
    response = deploy.result(timeout=60)
    assert isinstance(response, aiplatform_v1.DeployModelResponse)
    model_id = response.deployed_model.id
    assert model_id.isdigit()
    assert response.deployed_model.dedicated_resources.spot is True
    metadata = deploy.metadata
    assert isinstance(metadata, aiplatform_v1.DeployModelOperationMetadata)
    assert metadata.generic_metadata.update_time >= metadata.generic_metadata.create_time

    current = endpoints.get_endpoint(name=endpoint.name)
    assert [m.id for m in current.deployed_models] == [model_id]
    assert current.deployed_models[0].dedicated_resources.spot is True
    assert dict(current.traffic_split) == {model_id: 100}

    undeploy = endpoints.undeploy_model(endpoint=endpoint.name, deployed_model_id=model_id)
    assert isinstance(undeploy.result(timeout=60), aiplatform_v1.UndeployModelResponse)
    current = endpoints.get_endpoint(name=endpoint.name)
    assert list(current.deployed_models) == []
    assert dict(current.traffic_split) == {}

    methods = [c["method"] for c in control.calls()]
    assert "GetOperation" in methods
    assert {"CreateEndpoint", "DeployModel", "UndeployModel"} <= set(methods)


def test_operation_stays_running_until_its_simulated_delay_passes(control, endpoints):
    operation = endpoints.create_endpoint(
        parent=PARENT, endpoint=aiplatform_v1.Endpoint(display_name="slow")
    )
    assert not operation.done(retry=None)
    with pytest.raises(exceptions.NotFound):
        endpoints.get_endpoint(name=operation.operation.name.split("/operations/")[0])

    control.advance(5)
    assert operation.done(retry=None)
    assert endpoints.get_endpoint(name=operation.result().name).display_name == "slow"


def test_endpoint_errors(control, endpoints):
    with pytest.raises(exceptions.NotFound):
        endpoints.get_endpoint(name=f"{PARENT}/endpoints/1")
    with pytest.raises(exceptions.NotFound):
        endpoints.deploy_model(
            endpoint=f"{PARENT}/endpoints/1",
            deployed_model=aiplatform_v1.DeployedModel(model=f"{PARENT}/models/1"),
        )
    with pytest.raises(exceptions.InvalidArgument):
        endpoints.create_endpoint(parent=PARENT, endpoint=aiplatform_v1.Endpoint())
