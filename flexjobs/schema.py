"""The JSON Schema of the job-request message, generated from the request's one model
(:mod:`shared.domain.request.wire`, which the validators read too).

flexjobs reads a Vertex body the way Vertex does (:mod:`shared.domain.request.canonical`), so
the schema accepts every proto3 JSON spelling the models' fields have: the proto field name
beside the camelCase one (``replica_count``), integers as strings (``"2"``), and enum numbers
beside the names. The models are written in the canonical form; :func:`_proto3_spellings` adds
the other spellings, so the schema never refuses a body flexjobs accepts.

Regenerate the shipped file with::

    python -m flexjobs.schema > schema/job-request.schema.json

(``flexjobs schema`` prints the same text; tests/unit/test_schema.py fails when the shipped
file is stale.)
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any, Final

from shared.domain.model.kinds import DEPLOY_MODEL, KINDS
from shared.domain.model.values import snake_case
from shared.domain.request.wire import JobRequestMessage

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID: Final = "https://flexjobs.dev/schema/job-request.schema.json"

_INTEGER_TEXT: Final = r"^-?[0-9]+$"


def build_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of the job-request message.

    Examples:
        >>> schema = build_schema()
        >>> schema["$schema"]
        'https://json-schema.org/draft/2020-12/schema'
        >>> schema["additionalProperties"]
        False
    """
    generated = _proto3_spellings(_tidy(JobRequestMessage.model_json_schema(mode="validation")))
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        **generated,
        "description": (
            "A flexjobs job request, published as UTF-8 JSON on Pub/Sub. It carries exactly "
            f"one of {', '.join(KINDS)}: the Vertex AI v1 REST body of that kind, in any proto3 "
            "JSON spelling (camelCase is canonical). "
            "Training kinds default to scheduling.strategy FLEX_START (Dynamic Workload "
            f"Scheduler); {DEPLOY_MODEL.name} deploys on Spot VMs."
        ),
    }


def _tidy(node: Any, in_properties: bool = False) -> Any:
    """Drop pydantic's ``"default": null`` and per-field titles ("Imageuri"): they add nothing.

    Model titles stay. Recursion is bounded by the models' own nesting.
    """
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "default" and value is None:
            continue
        if key == "title" and in_properties:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _tidy(field, in_properties=True) for name, field in value.items()}
        else:
            out[key] = _tidy(value)
    return out


def _proto3_spellings(schema: dict[str, Any]) -> dict[str, Any]:
    """Let every Vertex body take the other proto3 JSON spellings of its fields.

    A Vertex body's definition (``additionalProperties: true``) gets, for each property, its
    proto field name as an alias with the same schema (a required field may be given under
    either name), integers also as strings of digits, and enums also as numbers.
    """
    for definition in schema.get("$defs", {}).values():
        if definition.get("additionalProperties") is not True:
            continue  # flexjobs' own objects (retryPolicy, fallback) have one spelling
        properties = definition.get("properties", {})
        for name in list(properties):
            properties[name] = _other_encodings(properties[name])
            snake = snake_case(name)
            if snake != name:
                properties[snake] = copy.deepcopy(properties[name])
        required = definition.pop("required", [])
        plain = [name for name in required if snake_case(name) == name]
        if plain:
            definition["required"] = plain
        either = [
            {"anyOf": [{"required": [name]}, {"required": [snake_case(name)]}]}
            for name in required
            if snake_case(name) != name
        ]
        if either:
            definition["allOf"] = either
    return schema


def _other_encodings(prop: dict[str, Any]) -> dict[str, Any]:
    if prop.get("type") == "integer":
        other: dict[str, Any] = {"type": "string", "pattern": _INTEGER_TEXT}
    elif "enum" in prop:
        other = {"type": "integer", "minimum": 0}
    else:
        return prop
    described = {k: prop[k] for k in ("description",) if k in prop}
    own = {k: v for k, v in prop.items() if k != "description"}
    return {**described, "anyOf": [own, other]}


def schema_text() -> str:
    """The schema as shipped in ``schema/job-request.schema.json`` (and as ``flexjobs schema``
    prints it): indented by two, UTF-8 as it is, one newline at the end."""
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    """Write the schema to standard output (``python -m flexjobs.schema``)."""
    sys.stdout.write(schema_text())


if __name__ == "__main__":
    main()
