"""The simulator's HyperparameterTuningJobs, TrainingPipelines and EndpointService (with LROs),
through the unmodified GAPIC clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
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
from google.protobuf import field_mask_pb2, struct_pb2

from flexjobs_local.simulator import SimulatorControl, SimulatorControlError, SimulatorHandle, serve
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
    # An empty split would leave the endpoint's as it is (no traffic): the split is explicit.
    deploy = endpoints.deploy_model(
        endpoint=endpoint.name, deployed_model=deployed, traffic_split={"0": 100}
    )
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


# --- Spot serving: etag, UpdateEndpoint, MutateDeployedModel, nodes reclaimed --------------------


def l4_model(replicas: int, *, spot: bool) -> aiplatform_v1.DeployedModel:
    return aiplatform_v1.DeployedModel(
        model=f"{PARENT}/models/123",
        dedicated_resources={
            "machine_spec": {
                "machine_type": "g2-standard-8",
                "accelerator_type": L4,
                "accelerator_count": 1,
            },
            "min_replica_count": replicas,
            "max_replica_count": replicas,
            "spot": spot,
        },
    )


def finished(control: SimulatorControl, operation: Any) -> Any:
    """The operation's response once its simulated delay (5 s) has passed on the frozen clock."""
    control.advance(5)
    return operation.result(timeout=30)


def serving_endpoint(
    control: SimulatorControl, endpoints: aiplatform_v1.EndpointServiceClient
) -> tuple[str, str]:
    """A fresh endpoint with one 2-replica Spot model taking all traffic: (name, model id)."""
    created = endpoints.create_endpoint(
        parent=PARENT, endpoint=aiplatform_v1.Endpoint(display_name="spot-serving")
    )
    name = finished(control, created).name
    deploy = endpoints.deploy_model(
        endpoint=name, deployed_model=l4_model(2, spot=True), traffic_split={"0": 100}
    )
    return name, finished(control, deploy).deployed_model.id


def availability(endpoint: aiplatform_v1.Endpoint) -> dict[str, int]:
    return {m.id: m.status.available_replica_count for m in endpoint.deployed_models}


def test_a_hedge_deploys_moves_traffic_with_the_etag_grows_and_moves_back(control, endpoints):
    name, spot = serving_endpoint(control, endpoints)
    # The fallback, deployed with no split: the endpoint's split stays as it is.
    deploy = endpoints.deploy_model(endpoint=name, deployed_model=l4_model(1, spot=False))
    fallback = finished(control, deploy).deployed_model.id
    read = endpoints.get_endpoint(name=name)
    assert dict(read.traffic_split) == {spot: 100}
    assert read.etag

    stale = aiplatform_v1.Endpoint(name=name, traffic_split={fallback: 100}, etag="stale")
    mask = field_mask_pb2.FieldMask(paths=["traffic_split"])
    with pytest.raises(exceptions.Aborted, match="etag"):
        endpoints.update_endpoint(endpoint=stale, update_mask=mask)
    read.traffic_split.clear()
    read.traffic_split[fallback] = 100
    updated = endpoints.update_endpoint(endpoint=read, update_mask=mask)
    assert isinstance(updated, aiplatform_v1.Endpoint)  # synchronous in v1: no operation
    assert dict(updated.traffic_split) == {fallback: 100}
    assert updated.etag != read.etag
    with pytest.raises(exceptions.Aborted):  # the read before the update is stale now
        endpoints.update_endpoint(endpoint=read, update_mask=mask)

    grow = endpoints.mutate_deployed_model(
        endpoint=name,
        deployed_model=aiplatform_v1.DeployedModel(
            id=fallback, dedicated_resources={"min_replica_count": 2, "max_replica_count": 2}
        ),
        update_mask=field_mask_pb2.FieldMask(
            paths=["dedicated_resources.min_replica_count", "dedicated_resources.max_replica_count"]
        ),
    )
    assert availability(endpoints.get_endpoint(name=name))[fallback] == 1  # not yet
    response = finished(control, grow)
    assert isinstance(response, aiplatform_v1.MutateDeployedModelResponse)
    assert isinstance(grow.metadata, aiplatform_v1.MutateDeployedModelOperationMetadata)
    assert response.deployed_model.dedicated_resources.min_replica_count == 2
    assert availability(endpoints.get_endpoint(name=name)) == {spot: 2, fallback: 2}

    # The fallback has traffic: its undeploy is refused until the split takes it away.
    with pytest.raises(exceptions.FailedPrecondition, match="traffic"):
        endpoints.undeploy_model(endpoint=name, deployed_model_id=fallback)
    back = endpoints.get_endpoint(name=name)
    back.traffic_split.clear()
    back.traffic_split[spot] = 100
    endpoints.update_endpoint(endpoint=back, update_mask=mask)
    undeploy = endpoints.undeploy_model(endpoint=name, deployed_model_id=fallback)
    finished(control, undeploy)
    final = endpoints.get_endpoint(name=name)
    assert ([m.id for m in final.deployed_models], dict(final.traffic_split)) == (
        [spot],
        {spot: 100},
    )

    methods = [c["method"] for c in control.calls()]
    assert {"UpdateEndpoint", "MutateDeployedModel"} <= set(methods)
    refused = [c for c in control.calls("UpdateEndpoint") if c["code"] == "ABORTED"]
    assert len(refused) == 2


def test_update_endpoint_refuses_bad_masks_and_splits_and_takes_faults(control, endpoints):
    name, spot = serving_endpoint(control, endpoints)
    endpoint = aiplatform_v1.Endpoint(name=name, traffic_split={spot: 60})
    for paths in (["traffic_split"], ["deployed_models"], []):
        with pytest.raises(exceptions.InvalidArgument):
            endpoints.update_endpoint(
                endpoint=endpoint, update_mask=field_mask_pb2.FieldMask(paths=paths)
            )
    control.inject_faults("UNAVAILABLE", methods=["UpdateEndpoint"])
    labels = aiplatform_v1.Endpoint(name=name, labels={"team": "a"})
    mask = field_mask_pb2.FieldMask(paths=["labels"])
    with pytest.raises(exceptions.ServiceUnavailable):
        endpoints.update_endpoint(endpoint=labels, update_mask=mask, retry=None)
    assert dict(endpoints.get_endpoint(name=name).labels) == {}  # "before": no effect
    assert dict(endpoints.update_endpoint(endpoint=labels, update_mask=mask).labels) == {
        "team": "a"
    }
    codes = [c["code"] for c in control.calls("UpdateEndpoint")]
    assert codes == ["INVALID_ARGUMENT"] * 3 + ["UNAVAILABLE", "OK"]


def test_spot_capacity_going_reclaims_nodes_get_and_list_show_it(control, endpoints):
    name, spot = serving_endpoint(control, endpoints)
    deploy = endpoints.deploy_model(endpoint=name, deployed_model=l4_model(1, spot=False))
    on_demand = finished(control, deploy).deployed_model.id
    before = endpoints.get_endpoint(name=name)

    control.set_spot_serving(LOCATION, False)
    now = endpoints.get_endpoint(name=name)
    assert availability(now) == {spot: 0, on_demand: 1}
    assert now.etag != before.etag
    (listed,) = [e for e in endpoints.list_endpoints(parent=PARENT) if e.name == name]
    assert availability(listed) == {spot: 0, on_demand: 1}
    (changed,) = [m for m in now.deployed_models if m.id == spot]
    assert changed.status.last_update_time > before.deployed_models[0].status.last_update_time

    control.advance(6 * 60)  # six restart tries, one a minute, all failed
    (model,) = control.serving()["deployedModels"]
    assert model["deployedModelId"] == spot
    assert (model["endpoint"], model["required"], model["available"]) == (name, 2, 0)
    assert [(n["phase"], n["restartTries"]) for n in model["nodesDown"]] == [("WAITING", 6)] * 2
    assert control.serving()["locations"] == [
        {"location": LOCATION, "spotAvailable": False, "placementSeconds": 120.0, "trace": None}
    ]

    control.set_spot_serving(LOCATION, True, placement_seconds=90)
    control.advance(89)
    assert availability(endpoints.get_endpoint(name=name))[spot] == 0
    control.advance(1)
    assert availability(endpoints.get_endpoint(name=name))[spot] == 2

    control.reclaim_nodes(name, spot, 1)
    assert availability(endpoints.get_endpoint(name=name))[spot] == 1
    control.advance(60)  # capacity is there: the first restart try succeeds
    assert availability(endpoints.get_endpoint(name=name))[spot] == 2


def test_serving_control_refuses_what_it_cannot_do(control, endpoints):
    name, spot = serving_endpoint(control, endpoints)
    deploy = endpoints.deploy_model(endpoint=name, deployed_model=l4_model(1, spot=False))
    on_demand = finished(control, deploy).deployed_model.id
    cases = [
        (lambda: control.reclaim_nodes(name, "404", 1), 404),
        (lambda: control.reclaim_nodes(name, on_demand, 1), 409),
        (lambda: control.reclaim_nodes(name, spot, 3), 409),
        (lambda: control.reclaim_nodes(name, spot, 0), 400),
        (lambda: control.set_spot_serving(LOCATION, True, placement_seconds=-1), 400),
    ]
    for call, status in cases:
        with pytest.raises(SimulatorControlError) as caught:
            call()
        assert caught.value.status == status


def test_a_spot_trace_file_replays_as_the_locations_capacity(control, endpoints, tmp_path):
    name, spot = serving_endpoint(control, endpoints)
    path = tmp_path / "us-central1-a_trace.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 30}, "data": [1, 1, 0, 1]}))
    served = control.replay_spot_trace(LOCATION, path, placement_seconds=10)
    (location,) = served["locations"]
    assert (location["spotAvailable"], location["trace"]["steps"]) == (True, 4)
    control.advance(60)  # step 2: the trace's 0
    assert availability(endpoints.get_endpoint(name=name))[spot] == 0
    control.advance(30)  # back at step 3; the first restart try, 60 s after the reclaim
    assert availability(endpoints.get_endpoint(name=name))[spot] == 0
    control.advance(30)
    assert availability(endpoints.get_endpoint(name=name))[spot] == 2
    control.set_spot_serving(LOCATION, True)  # by hand: the replay ends
    assert control.serving()["locations"][0]["trace"] is None

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"metadata": {"gap_seconds": 30}, "data": [1, -1]}))
    with pytest.raises(SimulatorControlError) as caught:
        control.replay_spot_trace(LOCATION, bad)
    assert caught.value.status == 400


def test_a_public_spot_trace_replays_when_present(control, endpoints):
    traces = Path(__file__).resolve().parents[3] / "shared" / "traces" / "spot-traces"
    path = traces / "preemption" / "1-node" / "gcp-04-30-2023" / "us-east1-b_c3-88.json"
    if not path.is_file():
        pytest.skip("the traces live beside the clone (../shared/traces)")
    data = json.loads(path.read_text())["data"]
    back = data.index(1)  # the trace starts without the instance: capacity is gone at first
    gone = data.index(0, back)
    name, spot = serving_endpoint(control, endpoints)
    control.replay_spot_trace(LOCATION, path)
    assert availability(endpoints.get_endpoint(name=name))[spot] == 0
    control.advance(back * 30 + 120)  # the six tries failed long before: placed 120 s after
    assert availability(endpoints.get_endpoint(name=name))[spot] == 2
    control.advance((gone - back) * 30 - 120)
    assert availability(endpoints.get_endpoint(name=name))[spot] == 0
    assert control.serving()["deployedModels"][0]["nodesDown"][0]["phase"] == "RESTARTING"


def test_the_running_deploy_models_of_an_endpoint_are_listed_with_when_each_started(
    control, endpoints
):
    """VertexDeploymentBackend.running_deploys, over gRPC: ListOperations of the endpoint with
    the ``done`` filter, DeployModel operations only, each with its start; none once done."""
    from shared.adapters.vertex.endpoints import VertexDeploymentBackend
    from shared.kernel.config import Settings

    control.set_time_factor(0)
    backend = VertexDeploymentBackend(Settings(project="p"), lambda _s, _l: endpoints)
    name, spot = serving_endpoint(control, endpoints)
    assert backend.running_deploys(name) == ()
    deploy = endpoints.deploy_model(endpoint=name, deployed_model=l4_model(1, spot=False))
    mutate = endpoints.mutate_deployed_model(
        endpoint=name,
        deployed_model=aiplatform_v1.DeployedModel(
            id=spot, dedicated_resources={"min_replica_count": 1, "max_replica_count": 1}
        ),
        update_mask={"paths": ["dedicated_resources.min_replica_count"]},
    )
    started = backend.running_deploys(name)
    assert started == (deploy.metadata.generic_metadata.create_time,)  # not the mutate
    assert started[0].tzinfo is not None
    finished(control, deploy)
    mutate.result(timeout=30)
    assert backend.running_deploys(name) == ()
    listed = endpoints.list_operations(request={"name": name, "filter": "done=true"})
    assert len(listed.operations) >= 3 and all(op.done for op in listed.operations)
    first = endpoints.list_operations(request={"name": name, "page_size": 1})
    second = endpoints.list_operations(
        request={"name": name, "page_size": 1, "page_token": first.next_page_token}
    )
    assert first.operations[0].name != second.operations[0].name
    with pytest.raises(exceptions.InvalidArgument):
        endpoints.list_operations(request={"name": name, "filter": "metadata.x=1"})
