"""Adversarial JSON through parse_request + check_request: errors, never crashes.

parse_request may raise InvalidRequest and nothing else; check_request never raises and returns
FieldErrors. A request made malformed on purpose always gets at least one error at (or under)
the path that was broken. Runs are kept short here; the 10,000-message fuzz is end to end.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.request.message import KINDS, JobRequest, decode_message, parse_request
from shared.domain.request.validation import Guards, check_request
from shared.kernel.errors import FieldError, InvalidRequest
from tests.events import load

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The seed example of seed 000, shared by every tier (tests/events/seed_request.json).
SEED: dict[str, Any] = load("seed_request")

DEPLOY: dict[str, Any] = {
    "deployModel": {
        "endpoint": "projects/p/locations/us-central1/endpoints/1",
        "deployedModel": {
            "model": "projects/p/locations/us-central1/models/2",
            "dedicatedResources": {
                "machineSpec": {"machineType": "n1-standard-4"},
                "spot": True,
                "minReplicaCount": 1,
            },
        },
        "trafficSplit": {"0": 100},
    }
}

# Strings that look like the values the rules care about, plus noise.
interesting_text = st.sampled_from(
    [
        "",
        " ",
        "0s",
        "-1s",
        "1800s",
        "1800s\n",
        "9" * 400 + "s",
        "FLEX_START",
        "ON_DEMAND",
        "SPOT",
        "NVIDIA_L4",
        "NVIDIA_TESLA_T4",
        "TPU_V4_POD",
        "a2-highgpu-8g",
        "ct5lp-hightpu-4t",
        "0",
        "gs://b",
        "\udcff",
        "\x00",
    ]
)
# Huge strings are built by repetition: generating them character by character is slow.
huge_text = st.builds(lambda c, n: c * n, st.characters(), st.sampled_from([5_000, 300_000]))
text = st.one_of(st.text(max_size=20), interesting_text, huge_text)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), interesting_text), children, max_size=4),
    ),
    max_leaves=25,
)
kind_keys = st.sampled_from([*KINDS, "requestId", "location", "retryPolicy", "batchJob", "x"])


def run(body: Any, guards: Guards | None = None) -> list[FieldError] | InvalidRequest:
    """parse_request + check_request; return the errors, or the InvalidRequest raised."""
    if not isinstance(body, dict):
        return InvalidRequest([FieldError("$", "not an object")])
    try:
        request = parse_request(body, {}, "msg")
    except InvalidRequest as exc:
        assert exc.errors, "InvalidRequest without errors"
        return exc
    errors = check_request(request, guards or Guards())
    assert isinstance(errors, list)
    assert all(isinstance(e, FieldError) and e.path and e.message for e in errors)
    return errors


@FAST
@given(st.dictionaries(kind_keys, json_values, max_size=5))
def test_any_envelope_never_crashes(body):
    run(body)


@FAST
@given(st.sampled_from(KINDS), json_values)
def test_any_body_of_any_kind_never_crashes(kind, spec):
    run({kind: spec})
    # Without parse_request's defaults too, as a caller holding a JobRequest might.
    errors = check_request(JobRequest(request_id="r", kind=kind, spec=spec), Guards())
    assert isinstance(errors, list)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``node`` (keys and list indexes)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


SEED_PATHS = [p for p in _paths(SEED) if p]
DEPLOY_PATHS = [p for p in _paths(DEPLOY) if p]


def _replace(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node: Any = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


@FAST
@given(st.sampled_from(SEED_PATHS + DEPLOY_PATHS), json_values)
def test_any_field_replaced_by_anything_never_crashes(path, value):
    body = SEED if path in SEED_PATHS and path[0] in SEED else DEPLOY
    run(_replace(body, path, value), Guards(allowed_image_prefixes=("python:",)))


# Fields whose JSON type is fixed: any value of another type must be reported at that field.
TYPED_FIELDS = {
    ("customJob", "jobSpec"): "object",
    ("customJob", "jobSpec", "workerPoolSpecs"): "array",
    ("customJob", "jobSpec", "workerPoolSpecs", 0, "machineSpec"): "object",
    ("customJob", "jobSpec", "workerPoolSpecs", 0, "machineSpec", "machineType"): "string",
    ("customJob", "jobSpec", "workerPoolSpecs", 0, "machineSpec", "acceleratorCount"): "integer",
    ("customJob", "jobSpec", "workerPoolSpecs", 0, "replicaCount"): "integer",
    ("customJob", "jobSpec", "workerPoolSpecs", 0, "containerSpec"): "object",
    ("customJob", "jobSpec", "workerPoolSpecs", 0, "containerSpec", "imageUri"): "string",
    ("customJob", "jobSpec", "scheduling"): "object",
    ("customJob", "jobSpec", "scheduling", "strategy"): "string",
    ("customJob", "jobSpec", "scheduling", "maxWaitDuration"): "string",
    ("customJob", "displayName"): "string",
}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


@FAST
@given(st.sampled_from(sorted(TYPED_FIELDS, key=str)), json_values)
def test_a_wrongly_typed_field_is_always_reported(path, value):
    if _json_type(value) in (TYPED_FIELDS[path], "null") or _proto3_encoding(path, value):
        return  # not malformed (null counts as absent and is covered below)
    result = run(_replace(SEED, path, value))
    errors = result.errors if isinstance(result, InvalidRequest) else result
    assert any(e.path.startswith(_dotted(path)) for e in errors), (path, result)


def _proto3_encoding(path: tuple[Any, ...], value: Any) -> bool:
    """Another proto3 JSON spelling of a valid value: "2" or 2.0 for 2, an enum number."""
    wanted = TYPED_FIELDS[path]
    if wanted == "integer":
        text = value if isinstance(value, str) else None
        whole = isinstance(value, float) and value.is_integer()
        return whole or (text is not None and text.strip().lstrip("-").isdigit())
    return path[-1] == "strategy" and _json_type(value) == "integer"


@FAST
@given(st.sampled_from([p for p in TYPED_FIELDS if p[-1] != "scheduling"]))
def test_a_missing_required_field_is_always_reported(path):
    body = copy.deepcopy(SEED)
    node: Any = body
    for step in path[:-1]:
        node = node[step]
    if path[-1] in ("acceleratorCount", "maxWaitDuration", "strategy"):
        return  # optional (or defaulted) fields
    del node[path[-1]]
    result = run(body)
    assert isinstance(result, list) and result


@FAST
@given(
    st.lists(st.sampled_from(KINDS), min_size=2, max_size=4, unique=True),
    json_values,
)
def test_two_kinds_at_once_are_refused(kinds, spec):
    result = run(dict.fromkeys(kinds, spec))
    assert isinstance(result, InvalidRequest)


@FAST
@given(st.dictionaries(st.text(max_size=10).filter(lambda k: k not in KINDS), json_values))
def test_no_known_kind_is_refused(body):
    assert isinstance(run(body), InvalidRequest)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=3000), st.sampled_from(["list", "dict"]))
def test_deep_nesting_never_crashes(depth, shape):
    value: Any = "x"
    for _ in range(depth):
        value = [value] if shape == "list" else {"a": value}
    for path in SEED_PATHS[::3]:
        run(_replace(SEED, path, value))
    # The same through the wire, as JSON text (json.dumps itself cannot write it that deep).
    opened, closed = ("[", "]") if shape == "list" else ('{"a": ', "}")
    nested = opened * depth + '"x"' + closed * depth
    data = f'{{"customJob": {{"displayName": "x", "labels": {nested}}}}}'.encode()
    try:
        body = decode_message(data)
    except InvalidRequest:
        return
    run(body)


def test_huge_integers_on_the_wire_are_invalid_requests():
    data = b'{"customJob": {"x": ' + b"9" * 5000 + b"}}"
    try:
        decode_message(data)
    except InvalidRequest as exc:
        assert exc.errors[0].path == "$"
    else:
        raise AssertionError("a 5000-digit integer must not decode")


def test_a_lone_surrogate_is_refused_at_its_field_not_crashed_on():
    """JSON's "\\udcff" decodes to a string with no UTF-8 form; protobuf's parser fails on it
    with a SystemError (found by the property above). It is refused, at its path."""
    path = ("customJob", "jobSpec", "scheduling", "strategy")
    found = run(_replace(SEED, path, chr(0xDCFF)))
    errors = found.errors if isinstance(found, InvalidRequest) else found
    assert [e.path for e in errors if "lone surrogate" in e.message] == [
        "customJob.jobSpec.scheduling.strategy"
    ]
