"""Every request rule, each asserting the exact error path it reports."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from shared.domain.request.message import JobRequest, parse_request
from shared.domain.request.validation import CUSTOM_TASK_DEFINITION, Guards, check_request
from shared.kernel.config import Settings
from shared.kernel.errors import InvalidRequest
from tests.events import load

# The seed example of seed 000, shared by every tier (tests/events/seed_request.json).
SEED: dict[str, Any] = load("seed_request")

POOLS = "customJob.jobSpec.workerPoolSpecs"
POOL0 = f"{POOLS}[0]"
SPEC0 = f"{POOL0}.machineSpec"
SCHED = "customJob.jobSpec.scheduling"


def pool(
    machine: str = "a2-highgpu-1g",
    accelerator: str | None = "NVIDIA_TESLA_A100",
    count: int | None = 1,
    replicas: Any = 1,
    image: str = "python:3.10",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"machineType": machine}
    if accelerator is not None:
        spec["acceleratorType"] = accelerator
    if count is not None:
        spec["acceleratorCount"] = count
    return {"machineSpec": spec, "replicaCount": replicas, "containerSpec": {"imageUri": image}}


def custom(*pools: dict[str, Any], scheduling: Any = None, **extra: Any) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"workerPoolSpecs": list(pools) or [pool()], **extra}
    if scheduling is not None:
        job_spec["scheduling"] = scheduling
    return {"requestId": "r1", "customJob": {"displayName": "job", "jobSpec": job_spec}}


def tuning(trial_spec: dict[str, Any], parallel: Any = 2, **extra: Any) -> dict[str, Any]:
    body = {
        "displayName": "hp",
        "studySpec": {
            "metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
            "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001}}],
        },
        "maxTrialCount": 10,
        "parallelTrialCount": parallel,
        "trialJobSpec": trial_spec,
        **extra,
    }
    return {"hyperparameterTuningJob": body}


def pipeline(inputs: Any, definition: Any = CUSTOM_TASK_DEFINITION) -> dict[str, Any]:
    body = {
        "displayName": "pipe",
        "trainingTaskDefinition": definition,
        "trainingTaskInputs": inputs,
    }
    return {"trainingPipeline": body}


def deploy(**changes: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "machineSpec": {
            "machineType": "g2-standard-8",
            "acceleratorType": "NVIDIA_L4",
            "acceleratorCount": 1,
        },
        "spot": True,
        "minReplicaCount": 1,
        "maxReplicaCount": 2,
    }
    body: dict[str, Any] = {
        "endpoint": "projects/p/locations/us-central1/endpoints/123",
        "deployedModel": {
            "model": "projects/p/locations/us-central1/models/456",
            "displayName": "served",
            "dedicatedResources": resources,
        },
        "trafficSplit": {"0": 100},
    }
    for key, value in changes.items():
        if key in resources:
            resources[key] = value
        elif key in body["deployedModel"]:
            body["deployedModel"][key] = value
        else:
            body[key] = value
    return {"deployModel": body}


def check(body: dict[str, Any], guards: Guards | None = None) -> list[Any]:
    """Every problem of ``body``: what reading it as the v1 proto refuses, else the rules'."""
    try:
        request = parse_request(copy.deepcopy(body), {}, "msg-1")
    except InvalidRequest as err:
        return list(err.errors)
    return check_request(request, guards or Guards())


def paths(body: dict[str, Any], guards: Guards | None = None) -> list[str]:
    return [e.path for e in check(body, guards)]


def messages(body: dict[str, Any], guards: Guards | None = None) -> dict[str, str]:
    return {e.path: e.message for e in check(body, guards)}


# --- valid requests ---------------------------------------------------------------------------


def test_seed_example_passes():
    assert check(SEED) == []


def test_defaults_alone_pass():
    assert check(custom()) == []


@pytest.mark.parametrize(
    "pools",
    [
        [pool("g2-standard-24", "NVIDIA_L4", 2)],
        [pool("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8, replicas=2)],
        [pool("a4-highgpu-8g", "NVIDIA_B200", 8), {}, pool("a4-highgpu-8g", "NVIDIA_B200", 8)],
    ],
)
def test_valid_dws_jobs(pools):
    assert check(custom(*pools)) == []


def test_valid_tuning_job_pipeline_and_deployment():
    trial = {"workerPoolSpecs": [pool()]}
    assert check(tuning(trial)) == []
    assert check(pipeline({"workerPoolSpecs": [pool()], "scheduling": {"strategy": "SPOT"}})) == []
    assert check(deploy()) == []


def test_spot_and_standard_accept_non_dws_machines():
    t4 = pool("n1-standard-8", "NVIDIA_TESLA_T4", 1)
    cpu = pool("n1-standard-4", None, None)
    assert check(custom(t4, cpu, scheduling={"strategy": "SPOT"})) == []
    assert check(custom(t4, scheduling={"strategy": "STANDARD", "timeout": "1209600s"})) == []


# --- kinds ------------------------------------------------------------------------------------


def test_display_name_is_required():
    body = custom()
    del body["customJob"]["displayName"]
    assert paths(body) == ["customJob.displayName"]


def test_job_spec_is_required_and_an_object():
    assert paths({"customJob": {"displayName": "x"}}) == ["customJob.jobSpec"]
    assert paths({"customJob": {"displayName": "x", "jobSpec": "big"}}) == ["customJob.jobSpec"]


def test_tuning_job_fields():
    trial = {"workerPoolSpecs": [pool()]}
    # 0 is the proto default, so it counts as absent: "is required".
    body = tuning(trial, parallel=0, maxFailedTrialCount=-1)
    body["hyperparameterTuningJob"]["maxTrialCount"] = 0
    body["hyperparameterTuningJob"]["studySpec"] = {"metrics": []}
    assert sorted(paths(body)) == [
        "hyperparameterTuningJob.maxFailedTrialCount",
        "hyperparameterTuningJob.maxTrialCount",
        "hyperparameterTuningJob.parallelTrialCount",
        "hyperparameterTuningJob.studySpec.metrics",
        "hyperparameterTuningJob.studySpec.parameters",
    ]
    del body["hyperparameterTuningJob"]["studySpec"]
    assert "hyperparameterTuningJob.studySpec" in paths(body)
    body["hyperparameterTuningJob"]["maxTrialCount"] = True  # the v1 proto refuses it
    assert paths(body) == ["hyperparameterTuningJob.maxTrialCount"]


def test_tuning_job_checks_its_trial_spec():
    trial = {"workerPoolSpecs": [pool("n1-standard-8", "NVIDIA_TESLA_T4", 1)]}
    assert paths(tuning(trial)) == [
        "hyperparameterTuningJob.trialJobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
    ]


def test_tuning_job_gpus_count_parallel_trials():
    trial = {"workerPoolSpecs": [pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8)]}
    assert check(tuning(trial, parallel=8)) == []  # 8 GPUs x 8 trials = 64
    errors = check(tuning(trial, parallel=9))
    assert [e.path for e in errors] == ["hyperparameterTuningJob.trialJobSpec.workerPoolSpecs"]
    assert "72 GPUs" in errors[0].message and "9 parallel trials" in errors[0].message


def test_pipeline_must_run_the_custom_task():
    inputs = {"workerPoolSpecs": [pool()]}
    assert paths(pipeline(inputs, "gs://google-cloud-aiplatform/schema/automl.yaml")) == [
        "trainingPipeline.trainingTaskDefinition"
    ]
    body = pipeline(inputs)
    del body["trainingPipeline"]["trainingTaskDefinition"]
    assert paths(body) == ["trainingPipeline.trainingTaskDefinition"]


def test_pipeline_scheduling_lives_in_the_task_inputs():
    inputs = {"workerPoolSpecs": [pool()], "scheduling": {"strategy": "ON_DEMAND"}}
    assert paths(pipeline(inputs)) == ["trainingPipeline.trainingTaskInputs.scheduling.strategy"]
    # The inputs are read as the CustomJobSpec they are, so proto field names work too.
    snake = {"worker_pool_specs": [pool()]}
    assert check(pipeline(snake)) == []


def test_unknown_kind_and_non_object_body_never_raise():
    odd = SimpleNamespace(kind="batchJob", spec={}, location=None)
    assert [e.path for e in check_request(odd, Guards())] == ["$"]
    bad = JobRequest(request_id="r", kind="customJob", spec=[1, 2])  # type: ignore[arg-type]
    assert [e.path for e in check_request(bad, Guards())] == ["customJob"]


# --- GPU types under FLEX_START ---------------------------------------------------------------


def test_cpu_only_is_refused_under_flex_start():
    errors = messages(custom(pool("n1-standard-8", None, None)))
    assert list(errors) == [f"{SPEC0}.acceleratorType"]
    assert "NVIDIA_L4" in errors[f"{SPEC0}.acceleratorType"]


@pytest.mark.parametrize(
    ("machine", "accelerator", "count", "name"),
    [
        ("n1-standard-8", "NVIDIA_TESLA_T4", 1, "T4"),
        ("n1-standard-8", "NVIDIA_TESLA_V100", 1, "V100"),
        ("n1-standard-8", "NVIDIA_TESLA_P100", 1, "P100"),
        ("cloud-tpu", "TPU_V3", 8, "TPU"),
        ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD", 4, "TPU"),
    ],
)
def test_non_dws_accelerators_are_refused_under_flex_start(machine, accelerator, count, name):
    errors = messages(custom(pool(machine, accelerator, count)))
    message = errors[f"{SPEC0}.acceleratorType"]
    assert name in message and "not supported by DWS" in message
    assert "H100" in message and "SPOT" in message


def test_unknown_accelerator_type():
    assert paths(custom(pool(accelerator="NVIDIA_A200"))) == [f"{SPEC0}.acceleratorType"]
    unknown_number = pool(accelerator=9999)  # type: ignore[arg-type]
    assert paths(custom(unknown_number)) == [f"{SPEC0}.acceleratorType"]


# --- machine <-> accelerator ------------------------------------------------------------------


def test_machine_and_accelerator_count_must_match():
    errors = messages(custom(pool("a2-highgpu-2g", "NVIDIA_TESLA_A100", 1)))
    assert list(errors) == [f"{SPEC0}.acceleratorCount"]
    assert "set acceleratorCount to 2" in errors[f"{SPEC0}.acceleratorCount"]


def test_machine_and_accelerator_type_must_match():
    assert paths(custom(pool("g2-standard-8", "NVIDIA_TESLA_A100", 1))) == [
        f"{SPEC0}.acceleratorType"
    ]


def test_unknown_machine_with_an_accelerator_names_the_families():
    errors = messages(custom(pool("n1-standard-8", "NVIDIA_L4", 1)))
    assert list(errors) == [f"{SPEC0}.machineType"]
    assert "g2-standard" in errors[f"{SPEC0}.machineType"]


def test_machine_spec_required_fields():
    body = custom(pool())
    del body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]
    assert paths(body) == [SPEC0]
    body = custom({"machineSpec": {}, "replicaCount": 1, "containerSpec": {"imageUri": "x"}})
    assert f"{SPEC0}.machineType" in paths(body)


# --- timeout, durations, strategy ------------------------------------------------------------


def test_timeout_at_most_seven_days_under_flex_start():
    assert check(custom(scheduling={"timeout": "604800s"})) == []
    assert paths(custom(scheduling={"timeout": "604800.5s"})) == [f"{SCHED}.timeout"]


@pytest.mark.parametrize("value", ["30m", "1800", 1800, "1800s\n", "-1s", "s", None])
def test_bad_max_wait_durations(value):
    body = custom(scheduling={"maxWaitDuration": value})
    if value is None:
        assert check(body) == []  # null is absent
    else:
        assert paths(body) == [f"{SCHED}.maxWaitDuration"]


@pytest.mark.parametrize("value", ["0s", "3.5s", "1800s", "86400s"])
def test_good_max_wait_durations(value):
    assert check(custom(scheduling={"maxWaitDuration": value})) == []


@pytest.mark.parametrize("value", ["0s", "-5s", "7d", 3600, "9" * 5000 + "s"])
def test_bad_timeouts(value):
    assert paths(custom(scheduling={"timeout": value})) == [f"{SCHED}.timeout"]


@pytest.mark.parametrize("strategy", ["FLEX_START", "SPOT", "STANDARD"])
def test_supported_strategies(strategy):
    body = custom(pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8), scheduling={"strategy": strategy})
    assert check(body) == []


@pytest.mark.parametrize(
    ("strategy", "hint"),
    [
        ("ON_DEMAND", "STANDARD"),
        ("LOW_COST", "SPOT"),
        (1, "STANDARD"),  # ON_DEMAND by number
        ("flex_start", "Strategy"),
        ("", "Strategy"),
        (99, "FLEX_START"),
        (["SPOT"], "enum"),
    ],
)
def test_refused_strategies(strategy, hint):
    errors = messages(custom(scheduling={"strategy": strategy}))
    assert list(errors) == [f"{SCHED}.strategy"]
    assert hint in errors[f"{SCHED}.strategy"]


@pytest.mark.parametrize("strategy", ["STRATEGY_UNSPECIFIED", 0])
def test_unspecified_strategy_is_absent_so_flex_start(strategy):
    request = parse_request(custom(scheduling={"strategy": strategy}), {}, "m")
    assert request.strategy == "FLEX_START"
    assert request.scheduling["maxWaitDuration"] == "86400s"


def test_deprecated_strategy_says_deprecated():
    errors = messages(custom(scheduling={"strategy": "ON_DEMAND"}))
    assert "deprecated" in errors[f"{SCHED}.strategy"]


@pytest.mark.parametrize("strategy", ["SPOT", "STANDARD"])
def test_max_wait_duration_only_applies_to_flex_start(strategy):
    body = custom(scheduling={"strategy": strategy, "maxWaitDuration": "600s"})
    assert paths(body) == [f"{SCHED}.maxWaitDuration"]


def test_scheduling_flags_and_type():
    assert paths(custom(scheduling=["FLEX_START"])) == [SCHED]
    for flag in ("restartJobOnWorkerRestart", "disableRetries"):
        assert paths(custom(scheduling={flag: "yes"})) == [f"{SCHED}.{flag}"]


# --- worker pools -----------------------------------------------------------------------------


def test_same_machine_configuration_in_every_pool():
    other = pool("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2)
    assert paths(custom(pool(), {}, other)) == [f"{POOLS}[2].machineSpec"]


def test_pools_may_differ_outside_flex_start():
    other = pool("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2)
    assert check(custom(pool(), other, scheduling={"strategy": "STANDARD"})) == []


def test_empty_placeholder_pools_are_skipped():
    assert check(custom(pool(), {}, {}, pool())) == []


def test_first_pool_cannot_be_empty():
    assert paths(custom({}, pool())) == [POOL0]


@pytest.mark.parametrize(
    ("pools", "path"),
    [([], POOLS), ({"machineSpec": {}}, POOLS), ("pool", POOLS), (None, POOLS), ([3], POOL0)],
)
def test_worker_pool_list_shape(pools, path):
    body = custom()
    if pools is None:
        del body["customJob"]["jobSpec"]["workerPoolSpecs"]
    else:
        body["customJob"]["jobSpec"]["workerPoolSpecs"] = pools
    assert paths(body) == [path]


@pytest.mark.parametrize("replicas", [0, "0", -1, True, False, 1.5, None, [1], 10**40 * -1])
def test_replica_count_must_be_a_positive_integer(replicas):
    body = custom(pool(replicas=replicas))
    if replicas is None:
        del body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["replicaCount"]
    assert paths(body) == [f"{POOL0}.replicaCount"]


@pytest.mark.parametrize("count", [True, -1, 1.5, "x", 2**31])
def test_accelerator_count_must_be_an_integer(count):
    assert paths(custom(pool(count=count))) == [f"{SPEC0}.acceleratorCount"]


@pytest.mark.parametrize(("replicas", "count"), [(1.0, 1.0), ("1", "1")])
def test_integers_in_every_proto3_json_encoding_are_integers(replicas, count):
    request = parse_request(custom(pool(replicas=replicas, count=count)), {}, "m")
    (first,) = request.spec["jobSpec"]["workerPoolSpecs"]
    assert (first["replicaCount"], first["machineSpec"]["acceleratorCount"]) == (1, 1)
    assert check_request(request, Guards()) == []


# --- containers and images --------------------------------------------------------------------


def test_container_is_required():
    body = custom(pool())
    del body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert paths(body) == [f"{POOL0}.containerSpec"]


@pytest.mark.parametrize("image", [None, "", "   ", 5])
def test_image_uri_is_required(image):
    body = custom(pool())
    body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"] = {"imageUri": image}
    assert paths(body) == [f"{POOL0}.containerSpec.imageUri"]


def test_python_package_spec_is_an_alternative():
    package = {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:latest",
        "packageUris": ["gs://b/trainer.tar.gz"],
        "pythonModule": "trainer.task",
    }
    body = custom(pool())
    p0 = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    del p0["containerSpec"]
    p0["pythonPackageSpec"] = package
    assert check(body) == []
    p0["pythonPackageSpec"] = {"packageUris": []}
    assert sorted(paths(body)) == [
        f"{POOL0}.pythonPackageSpec.executorImageUri",
        f"{POOL0}.pythonPackageSpec.packageUris",
        f"{POOL0}.pythonPackageSpec.pythonModule",
    ]
    p0["pythonPackageSpec"] = package
    p0["containerSpec"] = {"imageUri": "x"}
    assert paths(body) == [POOL0]


def test_container_command_and_args_are_strings():
    body = custom(pool())
    body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] = ["a", 1]
    assert paths(body) == [f"{POOL0}.containerSpec.args"]


def test_image_prefix_guard():
    guards = Guards(allowed_image_prefixes=("us-docker.pkg.dev/acme/",))
    assert paths(custom(), guards) == [f"{POOL0}.containerSpec.imageUri"]
    ok = custom(pool(image="us-docker.pkg.dev/acme/train:1"))
    assert check(ok, guards) == []


# --- operator guards --------------------------------------------------------------------------


def test_service_account_must_be_absent_by_default():
    body = custom(serviceAccount="trainer@p.iam.gserviceaccount.com")
    errors = messages(body)
    assert list(errors) == ["customJob.jobSpec.serviceAccount"]
    assert "absent" in errors["customJob.jobSpec.serviceAccount"]


def test_service_account_allow_list():
    guards = Guards(allowed_service_accounts=("trainer@p.iam.gserviceaccount.com",))
    assert check(custom(serviceAccount="trainer@p.iam.gserviceaccount.com"), guards) == []
    assert paths(custom(serviceAccount="root@p.iam.gserviceaccount.com"), guards) == [
        "customJob.jobSpec.serviceAccount"
    ]
    trial = {"workerPoolSpecs": [pool()], "serviceAccount": "x@y"}
    assert paths(tuning(trial)) == ["hyperparameterTuningJob.trialJobSpec.serviceAccount"]
    body = deploy()
    body["deployModel"]["deployedModel"]["serviceAccount"] = "x@y"
    assert paths(body) == ["deployModel.deployedModel.serviceAccount"]


def test_gpu_guard():
    big = pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, replicas=8)
    assert check(custom(big)) == []
    errors = check(custom(pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, replicas=9)))
    assert [e.path for e in errors] == [POOLS]
    assert "72 GPUs" in errors[0].message
    assert paths(custom(big), Guards(max_gpus_per_job=16)) == [POOLS]


def test_replica_guard():
    many = pool("n1-standard-8", None, None, replicas=65)
    errors = check(custom(many, scheduling={"strategy": "SPOT"}))
    assert [e.path for e in errors] == [POOLS]
    assert "65 replicas" in errors[0].message


def test_huge_counts_are_errors_not_crashes():
    body = custom(pool(replicas=10**400))
    assert paths(body) == [f"{POOL0}.replicaCount"]  # out of the int64 range
    body = custom(pool(replicas=10**9))
    assert paths(body) == [POOLS, POOLS]  # GPUs and replicas


def test_guards_from_settings():
    settings = Settings(
        project="p",
        allowed_image_prefixes=("gcr.io/p/",),
        allowed_service_accounts=("a@b",),
        max_gpus_per_job=8,
        max_replicas=4,
    )
    assert Guards.from_settings(settings) == Guards(
        ("gcr.io/p/",), ("a@b",), 8, 4, default_location="us-central1"
    )


# --- deployments ------------------------------------------------------------------------------

DEP = "deployModel.deployedModel.dedicatedResources"


@pytest.mark.parametrize("spot", [False, None, "true", 1])
def test_deployments_must_be_spot(spot):
    body = deploy(spot=spot)
    if spot is None:
        del body["deployModel"]["deployedModel"]["dedicatedResources"]["spot"]
    assert paths(body) == [f"{DEP}.spot"]


def test_non_dws_gpus_are_fine_for_spot_deployments():
    spec = {"machineType": "n1-standard-4", "acceleratorType": "NVIDIA_TESLA_T4"}
    spec["acceleratorCount"] = 1
    assert check(deploy(machineSpec=spec)) == []
    assert check(deploy(machineSpec={})) == []  # Vertex defaults to n1-standard-2


def test_replica_counts():
    assert paths(deploy(minReplicaCount=0)) == [f"{DEP}.minReplicaCount"]
    assert paths(deploy(minReplicaCount=3, maxReplicaCount=2)) == [f"{DEP}.maxReplicaCount"]
    assert paths(deploy(maxReplicaCount=True)) == [f"{DEP}.maxReplicaCount"]
    body = deploy()
    del body["deployModel"]["deployedModel"]["dedicatedResources"]["minReplicaCount"]
    assert paths(body) == [f"{DEP}.minReplicaCount"]
    cpu = {"machineType": "n1-standard-4"}
    assert paths(deploy(machineSpec=cpu, maxReplicaCount=65)) == [f"{DEP}.maxReplicaCount"]
    eight = {"machineType": "g2-standard-96", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 8}
    assert paths(deploy(machineSpec=eight, maxReplicaCount=9)) == [DEP]


V4_POD = {"machineType": "cloud-tpu", "acceleratorType": "TPU_V4_POD", "acceleratorCount": 8}
V3_SLICE = {"machineType": "cloud-tpu", "acceleratorType": "TPU_V3", "acceleratorCount": 8}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (V4_POD, "acceleratorType"),
        ({**V3_SLICE, "tpuTopology": "4x4"}, "tpuTopology"),
        ({"machineType": "ct5lp-hightpu-4t"}, "machineType"),
    ],
)
def test_spot_is_refused_on_tpu_pods(spec, field):
    errors = messages(deploy(machineSpec=spec))
    assert f"{DEP}.machineSpec.{field}" in errors
    assert "TPU Pods" in errors[f"{DEP}.machineSpec.{field}"]


def test_spot_training_on_tpu_pods_is_refused_too():
    tpu = pool("cloud-tpu", "TPU_V4_POD", 8)
    assert paths(custom(tpu, scheduling={"strategy": "SPOT"})) == [f"{SPEC0}.acceleratorType"]


@pytest.mark.parametrize(
    ("split", "path"),
    [
        ({"0": 50}, "deployModel.trafficSplit"),
        ({"0": 50.5, "1": 50}, "deployModel.trafficSplit.0"),
        ({"0": True, "1": 99}, "deployModel.trafficSplit.0"),
        ({"0": 101}, "deployModel.trafficSplit.0"),
        ({"0": -1, "1": 101}, "deployModel.trafficSplit.0"),
        ({"1": 100}, "deployModel.trafficSplit"),
        ({"0": 90, "abc": 10}, "deployModel.trafficSplit.abc"),
        ([100], "deployModel.trafficSplit"),
    ],
)
def test_traffic_split(split, path):
    assert path in paths(deploy(trafficSplit=split))


def test_traffic_split_may_keep_others():
    assert check(deploy(trafficSplit={"0": 30, "8675309": 70})) == []
    body = deploy()
    del body["deployModel"]["trafficSplit"]
    assert check(body) == []


@pytest.mark.parametrize(
    "endpoint",
    [
        "123",
        "projects/p/locations/us-central1/endpoints/",
        "projects/p/locations/us-central1/models/1",
        "projects/p/locations/us-central1/endpoints/1/extra",
        None,
        42,
    ],
)
def test_endpoint_name(endpoint):
    body = deploy(endpoint=endpoint)
    if endpoint is None:
        del body["deployModel"]["endpoint"]
    assert paths(body) == ["deployModel.endpoint"]


@pytest.mark.parametrize(
    "model",
    ["456", "projects/p/locations/us-central1/endpoints/1", "projects/p/models/1", "", None],
)
def test_model_name(model):
    body = deploy(model=model)
    assert paths(body) == ["deployModel.deployedModel.model"]


def test_model_versions_and_locations():
    assert check(deploy(model="projects/p/locations/us-central1/models/456@2")) == []
    elsewhere = deploy(model="projects/p/locations/europe-west4/models/456")
    assert paths(elsewhere) == ["deployModel.deployedModel.model"]
    body = deploy()
    body["location"] = "europe-west4"
    assert paths(body) == ["deployModel.endpoint"]


def test_deployment_needs_dedicated_resources():
    body = deploy()
    deployed = body["deployModel"]["deployedModel"]
    del deployed["dedicatedResources"]
    deployed["automaticResources"] = {"minReplicaCount": 1}
    assert sorted(paths(body)) == [
        "deployModel.deployedModel.automaticResources",
        "deployModel.deployedModel.dedicatedResources",
    ]
    # The v1 proto refuses a non-object; the rules then never see the body.
    assert paths({"deployModel": {"endpoint": "x", "deployedModel": 3}}) == [
        "deployModel.deployedModel",
    ]


# --- wrong types anywhere, and all errors at once --------------------------------------------


JOB = ("customJob", "jobSpec")
POOL = (*JOB, "workerPoolSpecs", 0)
MACHINE = (*POOL, "machineSpec")


@pytest.mark.parametrize(
    ("where", "key", "value", "path"),
    [
        (POOL, "machineSpec", [1], SPEC0),
        (JOB, "scheduling", "FLEX_START", SCHED),
        (POOL, "containerSpec", "img", f"{POOL0}.containerSpec"),
        (POOL, "diskSpec", [], f"{POOL0}.diskSpec"),
        (MACHINE, "machineType", None, f"{SPEC0}.machineType"),
        (MACHINE, "machineType", {"a": 1}, f"{SPEC0}.machineType"),
        (MACHINE, "tpuTopology", 5, f"{SPEC0}.tpuTopology"),
        (JOB, "baseOutputDirectory", "gs://b", "customJob.jobSpec.baseOutputDirectory"),
        (("customJob",), "displayName", "x" * 129, "customJob.displayName"),
        (("customJob",), "displayName", ["x"], "customJob.displayName"),
    ],
)
def test_wrong_json_types_are_field_errors(where, key, value, path):
    body = copy.deepcopy(SEED)
    node: Any = body
    for step in where:
        node = node[step]
    node[key] = value
    assert path in paths(body)


def test_every_problem_is_reported_at_once():
    bad_pool = pool("n1-standard-8", "NVIDIA_TESLA_T4", 1, replicas=0)
    del bad_pool["containerSpec"]
    mismatched = pool("a2-highgpu-2g", "NVIDIA_TESLA_A100", 1)
    body = custom(
        bad_pool,
        {},
        mismatched,
        scheduling={"strategy": "FLEX_START", "maxWaitDuration": "-5s", "timeout": "900000s"},
        serviceAccount="a@b",
    )
    del body["customJob"]["displayName"]
    assert sorted(paths(body)) == sorted(
        [
            "customJob.displayName",
            f"{SCHED}.maxWaitDuration",
            f"{SCHED}.timeout",
            "customJob.jobSpec.serviceAccount",
            f"{SPEC0}.acceleratorType",
            f"{POOL0}.replicaCount",
            f"{POOL0}.containerSpec",
            f"{POOLS}[2].machineSpec.acceleratorCount",
            f"{POOLS}[2].machineSpec",
        ]
    )


def test_every_message_says_something():
    body = custom(pool("n1-standard-8", "NVIDIA_TESLA_T4", 1, replicas=0))
    for error in check(body):
        assert len(error.message) > 10
