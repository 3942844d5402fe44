"""The shipped JSON Schema is generated from the code and must never go stale."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from flexjobs import schema as schema_module
from flexjobs.schema import build_schema
from shared.domain.model.strategies import STRATEGIES
from shared.domain.request.machines import ALL_ACCELERATORS, UNSPECIFIED_ACCELERATOR
from shared.domain.request.message import ENVELOPE_FIELDS, KINDS
from shared.domain.request.validation import CUSTOM_TASK_DEFINITION
from tests.events import load

SHIPPED = Path(__file__).resolve().parents[2] / "schema" / "job-request.schema.json"

# The seed example of seed 000, shared by every tier (tests/events/seed_request.json).
SEED: dict[str, Any] = load("seed_request")


def test_shipped_schema_is_current():
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    assert shipped == build_schema(), (
        "schema/job-request.schema.json is stale; regenerate it with "
        "`python -m flexjobs.schema > schema/job-request.schema.json`"
    )


def test_main_writes_exactly_the_shipped_text(capsys):
    schema_module.main()
    assert capsys.readouterr().out == SHIPPED.read_text(encoding="utf-8")


def test_schema_header_and_envelope():
    schema = build_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] and schema["description"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "requestId",
        "location",
        "retryPolicy",
        "fallback",
        "checkpointUri",
        "totalSteps",
        "schedule",
        "deadline",
        "estimatedRunSeconds",
        "checkpointIntervalSeconds",
        "restartOverheadSeconds",
        "regions",
        "checkpointSizeGb",
        "pinnedRegion",
        "queue",
        "priority",
        "minOnDemandReplicas",
        "extraSpotReplicas",
        "hedge",
        "availabilityObjective",
        *KINDS,
    }
    # Every field the parser takes, and no other.
    assert set(schema["properties"]) == ENVELOPE_FIELDS
    assert schema["oneOf"] == [{"required": [kind]} for kind in KINDS]


def test_enums_come_from_the_code():
    defs = build_schema()["$defs"]
    # Names first; the enum numbers proto3 JSON also takes come second.
    accelerator = defs["MachineSpec"]["properties"]["acceleratorType"]["anyOf"]
    assert accelerator[0]["enum"] == [*ALL_ACCELERATORS, UNSPECIFIED_ACCELERATOR]
    assert accelerator[1] == {"type": "integer", "minimum": 0}
    strategy = defs["Scheduling"]["properties"]["strategy"]["anyOf"][0]
    assert strategy["enum"] == [*STRATEGIES, "AUTO", "STRATEGY_UNSPECIFIED"]
    task = defs["TrainingPipeline"]["properties"]["trainingTaskDefinition"]
    assert task["const"] == CUSTOM_TASK_DEFINITION
    assert defs["DedicatedResources"]["properties"]["spot"]["const"] is True


def test_vertex_bodies_allow_additional_properties():
    defs = build_schema()["$defs"]
    for name in ("CustomJob", "CustomJobSpec", "WorkerPoolSpec", "MachineSpec", "DeployModel"):
        assert defs[name]["additionalProperties"] is True, name
    assert defs["FallbackRung"]["additionalProperties"] is False


def test_vertex_bodies_take_every_proto3_spelling():
    defs = build_schema()["$defs"]
    pool = defs["WorkerPoolSpec"]["properties"]
    assert pool["replica_count"] == pool["replicaCount"]
    assert {"type": "string", "pattern": "^-?[0-9]+$"} in pool["replicaCount"]["anyOf"]
    assert defs["CustomJob"]["allOf"] == [
        {"anyOf": [{"required": ["displayName"]}, {"required": ["display_name"]}]},
        {"anyOf": [{"required": ["jobSpec"]}, {"required": ["job_spec"]}]},
    ]
    assert "required" not in defs["CustomJob"]
    assert defs["FallbackRung"]["properties"].keys() == {
        "afterCapacityFailures",
        "strategy",
        "location",
    }


def test_seed_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(build_schema())
    validator.validate(SEED)
    two_kinds = copy.deepcopy(SEED)
    two_kinds["deployModel"] = {}
    assert not validator.is_valid(two_kinds)
    unknown = {**SEED, "urgency": "high"}
    assert not validator.is_valid(unknown)
    wrong = copy.deepcopy(SEED)
    wrong["customJob"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "X"
    assert not validator.is_valid(wrong)


@pytest.mark.parametrize("integers_for_enums", [False, True])
def test_bodies_in_the_sdk_json_forms_validate_against_the_schema(integers_for_enums):
    # What the v1 types' to_json writes: int64 as strings, every default field, and with
    # use_integers_for_enums (proto-plus's default) enum numbers. The schema must not refuse
    # what the function accepts.
    import json

    from google.cloud import aiplatform_v1

    jsonschema = pytest.importorskip("jsonschema")
    job = aiplatform_v1.CustomJob.from_json(json.dumps(SEED["customJob"]))
    body = json.loads(
        aiplatform_v1.CustomJob.to_json(job, use_integers_for_enums=integers_for_enums)
    )
    assert isinstance(body["jobSpec"]["workerPoolSpecs"][0]["replicaCount"], str)
    message = {"requestId": "sdk-1", "customJob": body}
    jsonschema.Draft202012Validator(build_schema()).validate(message)
