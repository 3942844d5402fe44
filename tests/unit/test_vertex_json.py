"""Normalize, then validate: every proto3 JSON spelling, the field policy, locations, rungs."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shared.adapters.vertex.jobs import GapicClients, build_gapic_client
from shared.domain.request.canonical import canonical_body
from shared.domain.request.field_policy import POLICY_FIELDS, check_field_policy, parse_field_policy
from shared.domain.request.message import parse_request
from shared.domain.request.validation import Guards, check_options, check_request
from shared.kernel.config import Settings
from shared.kernel.errors import BackendRejected, FieldError, InvalidRequest
from tests.events import load

SPEC_OF = {
    "customJob": ("jobSpec",),
    "hyperparameterTuningJob": ("trialJobSpec",),
    "trainingPipeline": ("trainingTaskInputs",),
    "deployModel": ("deployedModel",),
}
EVENTS = {
    "customJob": "seed_request",
    "hyperparameterTuningJob": "hpt_request",
    "trainingPipeline": "pipeline_request",
    "deployModel": "deploy_request",
}


def problems(body: dict[str, Any], guards: Guards | None = None) -> list[FieldError]:
    """What intake reports: the v1 protos' refusals, else the rules' and the options'."""
    try:
        request = parse_request(copy.deepcopy(body), {}, "m")
    except InvalidRequest as err:
        return list(err.errors)
    return [*check_request(request, guards or Guards()), *check_options(request)]


def spec_node(body: dict[str, Any], kind: str) -> dict[str, Any]:
    node = body[kind]
    for key in SPEC_OF[kind]:
        node = node[key]
    return node


# --- the canonical form ----------------------------------------------------------------------


def test_int64_strings_become_integers():
    body = load("seed_request")["customJob"]
    body["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] = "2"
    out, errors = canonical_body("customJob", body)
    assert errors == []
    assert out["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == 2


def test_enum_numbers_become_names():
    body = load("seed_request")["customJob"]
    body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = 11
    body["jobSpec"]["scheduling"]["strategy"] = 6
    out, errors = canonical_body("customJob", body)
    assert errors == []
    assert out["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == "NVIDIA_L4"
    assert out["jobSpec"]["scheduling"]["strategy"] == "FLEX_START"


def test_proto_field_names_become_camel_case():
    body = {"display_name": "x", "job_spec": {"worker_pool_specs": [{"replica_count": 1}]}}
    out, errors = canonical_body("customJob", body)
    assert errors == []
    assert out == {"displayName": "x", "jobSpec": {"workerPoolSpecs": [{"replicaCount": 1}]}}


def test_defaults_are_absent_but_a_zero_duration_is_kept():
    body = {
        "displayName": "x",
        "jobSpec": {
            "serviceAccount": "",
            "network": "",
            "enableWebAccess": False,
            "scheduling": {"strategy": 0, "maxWaitDuration": "0s"},
        },
    }
    out, errors = canonical_body("customJob", body)
    assert errors == []
    assert out == {"displayName": "x", "jobSpec": {"scheduling": {"maxWaitDuration": "0s"}}}


def test_output_only_fields_are_dropped_at_every_depth():
    body = {
        "name": "projects/p/locations/l/customJobs/1",
        "state": "JOB_STATE_RUNNING",
        "createTime": "2026-01-01T00:00:00Z",
        "webAccessUris": {"workerpool0-0": "https://x"},
        "displayName": "x",
    }
    assert canonical_body("customJob", body) == ({"displayName": "x"}, [])
    deploy = {"deployedModel": {"createTime": "2026-01-01T00:00:00Z", "model": "m"}}
    assert canonical_body("deployModel", deploy) == ({"deployedModel": {"model": "m"}}, [])


def test_pipeline_task_inputs_are_read_as_a_custom_job_spec():
    body = load("pipeline_request")["trainingPipeline"]
    body["trainingTaskInputs"]["workerPoolSpecs"][0]["replica_count"] = "3"
    del body["trainingTaskInputs"]["workerPoolSpecs"][0]["replicaCount"]
    out, errors = canonical_body("trainingPipeline", body)
    assert errors == []
    assert out["trainingTaskInputs"]["workerPoolSpecs"][0]["replicaCount"] == 3
    body["trainingTaskInputs"]["bogus"] = 1
    (error,) = canonical_body("trainingPipeline", body)[1]
    assert error.path == "trainingPipeline.trainingTaskInputs.bogus"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"jobSpec": {"noSuchField": 1}}, "customJob.jobSpec.noSuchField"),
        (
            {"job_spec": {"worker_pool_specs": [{}, {"machine_spec": {"bogus": 1}}]}},
            "customJob.jobSpec.workerPoolSpecs[1].machineSpec.bogus",
        ),
        (
            {"jobSpec": {"workerPoolSpecs": [{"replicaCount": "two"}]}},
            "customJob.jobSpec.workerPoolSpecs[0].replicaCount",
        ),
        (
            {"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"acceleratorType": "NOPE"}}]}},
            "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
        ),
        ({"jobSpec": {"scheduling": {"timeout": 5}}}, "customJob.jobSpec.scheduling.timeout"),
        ({"jobSpec": []}, "customJob.jobSpec"),
    ],
)
def test_what_the_proto_refuses_is_reported_at_its_camel_case_path(body, path):
    out, errors = canonical_body("customJob", body)
    assert [e.path for e in errors] == [path]
    assert out is body


def test_a_field_named_twice_is_refused():
    body = {"jobSpec": {"serviceAccount": "a@p", "service_account": "b@p"}}
    (error,) = canonical_body("customJob", body)[1]
    assert error.path == "customJob.jobSpec.serviceAccount"
    assert "twice" in error.message


def test_the_request_holds_the_canonical_form_with_defaults():
    body = load("seed_request")
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["replicaCount"] = "1"
    pool["machineSpec"]["acceleratorType"] = 8  # NVIDIA_TESLA_A100
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "STRATEGY_UNSPECIFIED"}
    request = parse_request(body, {}, "m")
    assert request.spec["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == 1
    assert request.scheduling == {
        "strategy": "FLEX_START",
        "maxWaitDuration": "86400s",
        "timeout": "604800s",
    }
    assert check_request(request, Guards()) == []


# --- service accounts in any spelling --------------------------------------------------------


@pytest.mark.parametrize("kind", list(SPEC_OF))
def test_snake_case_service_account_is_refused_without_an_allow_list(kind):
    body = load(EVENTS[kind])
    spec_node(body, kind)["service_account"] = "owner@victim.iam.gserviceaccount.com"
    errors = {e.path: e.message for e in problems(body)}
    path = ".".join([kind, *SPEC_OF[kind], "serviceAccount"])
    assert list(errors) == [path]
    assert "FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS" in errors[path]


@pytest.mark.parametrize("kind", list(SPEC_OF))
def test_an_empty_service_account_is_no_service_account(kind):
    body = load(EVENTS[kind])
    spec_node(body, kind)["serviceAccount"] = ""
    assert problems(body) == []


def test_allowed_service_account_in_snake_case_is_sent_in_camel_case():
    body = load("seed_request")
    body["customJob"]["jobSpec"]["service_account"] = "trainer@p.iam.gserviceaccount.com"
    guards = Guards(allowed_service_accounts=("trainer@p.iam.gserviceaccount.com",))
    assert problems(body, guards) == []
    spec = parse_request(body, {}, "m").spec["jobSpec"]
    assert spec["serviceAccount"] == "trainer@p.iam.gserviceaccount.com"
    assert "service_account" not in spec


# --- the field policy ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["customJob", "hyperparameterTuningJob", "trainingPipeline"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("network", "projects/1/global/networks/vpc"),
        ("reserved_ip_ranges", ["r1"]),
        ("pscInterfaceConfig", {"networkAttachment": "projects/p/regions/r/networkAttachments/a"}),
        ("enableWebAccess", True),
        ("enable_dashboard_access", True),
        ("persistentResourceId", "pr"),
        ("experiment", "e"),
        ("experimentRun", "r"),
        ("tensorboard", "projects/p/locations/l/tensorboards/t"),
    ],
)
def test_policy_fields_are_refused_by_default_in_every_spelling(kind, field, value):
    body = load(EVENTS[kind])
    spec_node(body, kind)[field] = value
    errors = problems(body)
    assert len(errors) == 1, errors
    assert errors[0].path.startswith(".".join([kind, *SPEC_OF[kind]]) + ".")
    assert "FLEXJOBS_FIELD_POLICY" in errors[0].message


def test_policy_allows_true_any_value_or_listed_values_only():
    network = "projects/1/global/networks/vpc"
    spec = {
        "network": network,
        "reservedIpRanges": ["r1", "r2"],
        "enableWebAccess": True,
        "pscInterfaceConfig": {
            "networkAttachment": "a1",
            "dnsPeeringConfigs": [{"domain": "x."}],
        },
    }
    policy = parse_field_policy(
        '{"network": true, "reservedIpRanges": ["r1"], "enableWebAccess": true,'
        ' "pscInterfaceConfig": ["a1"]}'
    )
    errors = check_field_policy(policy, spec, "j")
    assert [e.path for e in errors] == [
        "j.reservedIpRanges[1]",
        "j.pscInterfaceConfig.dnsPeeringConfigs",
    ]
    policy["pscInterfaceConfig"] = True
    policy["reservedIpRanges"] = ("r1", "r2")
    assert check_field_policy(policy, spec, "j") == []


def test_protected_artifact_location_is_allowed_as_a_region_only():
    assert check_field_policy({}, {"protectedArtifactLocationId": "europe-west4"}, "j") == []
    (error,) = check_field_policy({}, {"protectedArtifactLocationId": "evil.example:443"}, "j")
    assert error.path == "j.protectedArtifactLocationId"
    refused = check_field_policy(
        {"protectedArtifactLocationId": False}, {"protectedArtifactLocationId": "us-east1"}, "j"
    )
    assert [e.path for e in refused] == ["j.protectedArtifactLocationId"]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"nope": true}',
        '{"enableWebAccess": ["x"]}',
        '{"network": "one"}',
        '{"network": [""]}',
    ],
)
def test_a_bad_field_policy_setting_fails_loudly(text):
    with pytest.raises(ValueError, match="FLEXJOBS_FIELD_POLICY"):
        parse_field_policy(text)


def test_guards_read_the_field_policy_from_settings():
    settings = Settings.from_env(
        {"GOOGLE_CLOUD_PROJECT": "p", "FLEXJOBS_FIELD_POLICY": '{"tensorboard": true}'}
    )
    assert Guards.from_settings(settings).field_policy == {"tensorboard": True}
    assert {f.name for f in POLICY_FIELDS} >= {"network", "tensorboard", "experimentRun"}


# --- locations -------------------------------------------------------------------------------

BAD_LOCATIONS = ["attacker.example:443#", "us-central1\n", "US-CENTRAL1", "", "global"]


@pytest.mark.parametrize("location", BAD_LOCATIONS)
def test_bad_envelope_location_is_refused(location):
    body = {**load("seed_request"), "location": location}
    assert [e.path for e in problems(body)] == ["location"]


@pytest.mark.parametrize("location", BAD_LOCATIONS)
def test_bad_rung_location_is_refused(location):
    body = {
        **load("seed_request"),
        "fallback": [{"afterCapacityFailures": 1, "location": location}],
    }
    assert [e.path for e in problems(body)] == ["fallback[0].location"]


@pytest.mark.parametrize("location", ["attacker.example:443#", "US-CENTRAL1", "us.central1"])
def test_bad_locations_in_resource_names_are_refused(location):
    body = load("deploy_request")
    body["deployModel"]["endpoint"] = f"projects/p/locations/{location}/endpoints/1"
    assert [e.path for e in problems(body)] == ["deployModel.endpoint"]
    body = load("deploy_request")
    body["deployModel"]["deployedModel"]["model"] = f"projects/p/locations/{location}/models/1"
    assert [e.path for e in problems(body)] == ["deployModel.deployedModel.model"]


@pytest.mark.parametrize("location", BAD_LOCATIONS)
def test_no_client_is_built_for_a_bad_location(location):
    settings = Settings(project="p")
    with pytest.raises(BackendRejected):
        build_gapic_client(settings, "JobService", location)
    with pytest.raises(BackendRejected):
        GapicClients(settings, factory=lambda *_: object()).get("JobService", location)


def test_flexjobs_location_must_be_a_region():
    with pytest.raises(ValueError, match="FLEXJOBS_LOCATION"):
        Settings.from_env({"FLEXJOBS_LOCATION": "attacker.example:443#"})


# --- fallback rungs as the attempts they produce ---------------------------------------------


def t4_job(strategy: str = "SPOT") -> dict[str, Any]:
    body = load("seed_request")
    job_spec = body["customJob"]["jobSpec"]
    job_spec["workerPoolSpecs"][0]["machineSpec"] = {
        "machineType": "n1-standard-8",
        "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 1,
    }
    job_spec["scheduling"] = {"strategy": strategy}
    return body


def test_a_flex_start_rung_on_a_t4_is_refused_at_intake():
    body = {**t4_job(), "fallback": [{"afterCapacityFailures": 2, "strategy": "FLEX_START"}]}
    (error,) = problems(body)
    assert error.path == "fallback[0].strategy"
    assert error.message.startswith(
        "the attempt this rung produces is invalid: "
        "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType: "
    )
    assert "NVIDIA_TESLA_T4" in error.message and "not supported by DWS" in error.message


def test_a_flex_start_rung_with_a_thirty_day_timeout_is_refused_at_intake():
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "STANDARD", "timeout": "2592000s"}
    body["fallback"] = [
        {"afterCapacityFailures": 1, "location": "europe-west4"},
        {"afterCapacityFailures": 2, "strategy": "FLEX_START"},
    ]
    (error,) = problems(body)
    assert error.path == "fallback[1].strategy"
    assert "customJob.jobSpec.scheduling.timeout: must be at most 604800s" in error.message


def test_a_problem_is_reported_once_not_again_for_each_rung():
    body = {
        **t4_job("FLEX_START"),
        "fallback": [
            {"afterCapacityFailures": 1, "location": "europe-west4"},
            {"afterCapacityFailures": 2, "strategy": "FLEX_START"},
        ],
    }
    assert [e.path for e in problems(body)] == [
        "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"
    ]
    body["fallback"] = [
        {"afterCapacityFailures": 1, "strategy": "SPOT"},
        {"afterCapacityFailures": 2, "location": "europe-west4"},
    ]
    assert [e.path for e in problems(body)] == [
        "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"
    ]


def test_valid_rungs_pass():
    body = {
        **load("seed_request"),
        "fallback": [
            {"afterCapacityFailures": 1, "strategy": "SPOT"},
            {"afterCapacityFailures": 2, "strategy": "STANDARD", "location": "europe-west4"},
        ],
    }
    assert problems(body) == []


@pytest.mark.parametrize("field", ["acceleratorType", "acceleratorCount"])
def test_an_infinite_number_is_a_field_error_not_a_crash(field):
    # json.loads reads 1e400 as float("inf"); the proto parser cannot make an int of it.
    text = '{"displayName": "x", "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"F": 1e400}}]}}'
    body = json.loads(text.replace('"F"', json.dumps(field)))
    _, errors = canonical_body("customJob", body)
    assert errors and errors[0].path.startswith("customJob")


@pytest.mark.parametrize(
    ("where", "value"),
    [("strategy", False), ("strategy", True)],
)
def test_a_boolean_where_an_enum_belongs_is_refused_not_read_as_its_number(where, value):
    body = {"displayName": "x", "jobSpec": {"scheduling": {where: value}}}
    _, errors = canonical_body("customJob", body)
    assert [e.path for e in errors] == [f"customJob.jobSpec.scheduling.{where}"]


def test_a_boolean_where_a_count_belongs_is_refused():
    body = {"displayName": "x", "jobSpec": {"workerPoolSpecs": [{"replicaCount": True}]}}
    _, errors = canonical_body("customJob", body)
    assert [e.path for e in errors] == ["customJob.jobSpec.workerPoolSpecs[0].replicaCount"]


@pytest.mark.parametrize("kind", ["customJob", "hyperparameterTuningJob", "trainingPipeline"])
def test_a_customer_managed_key_is_a_policy_field_of_every_training_kind(kind):
    body = load(EVENTS[kind])
    key = "projects/other/locations/us/keyRings/r/cryptoKeys/k"
    body[kind]["encryptionSpec"] = {"kms_key_name": key}
    (error,) = problems(body)
    assert error.path == f"{kind}.encryptionSpec"
    allowed = Guards(field_policy=parse_field_policy(json.dumps({"encryptionSpec": [key]})))
    assert problems(body, allowed) == []


def test_nfs_mounts_are_a_policy_field_of_every_worker_pool():
    body = load("seed_request")
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["nfsMounts"] = [{"server": "10.0.0.2", "path": "/data", "mountPoint": "data"}]
    (error,) = problems(body)
    assert error.path == "customJob.jobSpec.workerPoolSpecs[0].nfsMounts"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("inputDataConfig", {"datasetId": "1", "gcsDestination": {"outputUriPrefix": "gs://x/y"}}),
        ("modelToUpload", {"displayName": "m", "containerSpec": {"imageUri": "python:3.10"}}),
        ("parentModel", "projects/p/locations/us-central1/models/1"),
        ("modelId", "my-model"),
    ],
)
def test_pipeline_fields_outside_its_custom_job_spec_are_policy_fields(field, value):
    body = load("pipeline_request")
    body["trainingPipeline"][field] = value
    (error,) = problems(body)
    assert error.path == f"trainingPipeline.{field}"
    assert "FLEXJOBS_FIELD_POLICY" in error.message


def test_the_image_allow_list_holds_for_the_model_a_pipeline_registers():
    body = load("pipeline_request")
    body["trainingPipeline"]["modelToUpload"] = {
        "displayName": "m",
        "containerSpec": {"imageUri": "attacker.example/evil:latest"},
    }
    guards = Guards(
        allowed_image_prefixes=("python:",),
        field_policy=parse_field_policy('{"modelToUpload": true}'),
    )
    (error,) = problems(body, guards)
    assert error.path == "trainingPipeline.modelToUpload.containerSpec.imageUri"


def test_an_infinite_number_in_a_pipelines_task_inputs_is_a_field_error():
    body = json.loads(
        '{"displayName": "p", "trainingTaskInputs": {"workerPoolSpecs": [{"replicaCount": 1e400}]}}'
    )
    _, errors = canonical_body("trainingPipeline", body)
    assert errors and errors[0].path.startswith("trainingPipeline")
