"""The shipped JSON Schema is generated from the code and must never go stale."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import flexjobs
from flexjobs import schema as schema_module
from flexjobs.schema import build_schema
from shared.domain.model.strategies import STRATEGIES
from shared.domain.policy.retry import RETRY_BUDGET, RUNG_THRESHOLD
from shared.domain.request import wire
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


# Every word a schema object may use as a key (JSON Schema 2020-12's keywords that the generator
# writes, and the annotations); a key elsewhere is a property name. pydantic once wrote
# "ge"/"le" for an optional integer's bounds, words JSON Schema ignores: nothing was checked.
KEYWORDS = {
    "$schema", "$id", "$defs", "$ref", "title", "description", "type", "properties",
    "additionalProperties", "propertyNames", "patternProperties", "required", "items", "enum",
    "const", "anyOf", "allOf", "oneOf", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "uniqueItems", "format", "default",
}  # fmt: skip


def _unknown_keywords(node: Any, where: str = "") -> list[str]:
    if isinstance(node, list):
        return [bad for i, item in enumerate(node) for bad in _unknown_keywords(item, where)]
    if not isinstance(node, dict):
        return []
    found = [f"{where}/{key}" for key in node if key not in KEYWORDS]
    for key, value in node.items():
        named = key in {"properties", "$defs", "patternProperties"}
        children = value.items() if named and isinstance(value, dict) else [("", value)]
        found += [
            bad for name, child in children for bad in _unknown_keywords(child, f"{where}/{name}")
        ]
    return found


def test_the_schema_uses_only_json_schema_keywords():
    assert _unknown_keywords(build_schema()) == []


def _set(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    *parents, last = path.replace("[0]", ".0").split(".")
    node: Any = body
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return body


_POOL = "customJob.jobSpec.workerPoolSpecs[0]"
_DEPLOYED = "deployModel.deployedModel.dedicatedResources"
_BOUNDED = [
    ("seed_request", f"{_POOL}.machineSpec.acceleratorCount", wire.ACCELERATOR_COUNT),
    ("seed_request", f"{_POOL}.replicaCount", wire.POOL_REPLICAS),
    ("hpt_request", "hyperparameterTuningJob.maxTrialCount", wire.TRIALS),
    ("hpt_request", "hyperparameterTuningJob.parallelTrialCount", wire.TRIALS),
    ("hpt_request", "hyperparameterTuningJob.maxFailedTrialCount", wire.FAILED_TRIALS),
    ("deploy_request", f"{_DEPLOYED}.minReplicaCount", wire.DEPLOYED_REPLICAS),
    ("deploy_request", f"{_DEPLOYED}.maxReplicaCount", wire.PEAK_REPLICAS),
    ("deploy_request", "deployModel.trafficSplit.0", wire.TRAFFIC_SHARE),
    ("seed_request", "retryPolicy.capacity", RETRY_BUDGET),
]


@pytest.mark.parametrize(("event", "path", "count"), _BOUNDED, ids=[p for _, p, _ in _BOUNDED])
def test_the_schema_and_the_checks_hold_an_integer_to_the_same_bounds(event, path, count):
    # One Count declares the bounds; the schema states them and the checks refuse beyond them.
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(build_schema())
    outside = [count.minimum - 1] + ([count.maximum + 1] if count.maximum is not None else [])
    for value in outside:
        message = _set(load(event), path, value)
        assert not validator.is_valid(message), (path, value)
        assert path in [e.path for e in flexjobs.validate(message)], (path, value)
    assert validator.is_valid(_set(load(event), path, count.minimum)), path


def test_a_fallback_rung_is_held_to_the_same_bounds_by_both():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(build_schema())
    path = "fallback[0].afterCapacityFailures"
    for value in (RUNG_THRESHOLD.minimum - 1, RUNG_THRESHOLD.maximum + 1):
        message = {**SEED, "fallback": [{"afterCapacityFailures": value, "strategy": "SPOT"}]}
        assert not validator.is_valid(message)
        assert path in [e.path for e in flexjobs.validate(message)]
