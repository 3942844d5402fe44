"""10,000 malformed or adversarial messages through handle_job_request, on the in-memory fakes.

Every message is built to be refused: undecodable bytes, JSON that is not an object, unknown
kinds, two kinds at once, wrong types, huge strings, deep nesting, negative counts, and valid
requests of each kind with exactly one bad field. For each one, the handler must answer 200
(nothing raises out of it), create no job and no deployment, and leave one rejection with at
least one error plus one REJECTED notification.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.request.message import ENVELOPE_FIELDS, KINDS
from tests.events import load, pubsub_cloud_event

BASES = {
    "customJob": load("seed_request"),
    "hyperparameterTuningJob": load("hpt_request"),
    "trainingPipeline": load("pipeline_request"),
    "deployModel": load("deploy_request"),
}
# Where each training kind keeps its CustomJobSpec.
JOB_SPEC = {
    "customJob": "jobSpec",
    "hyperparameterTuningJob": "trialJobSpec",
    "trainingPipeline": "trainingTaskInputs",
}

# --- building blocks -------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
not_objects = st.one_of(scalars, st.lists(json_values, max_size=4))
non_strings = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(scalars, max_size=2),
)
non_ints = st.one_of(non_strings.filter(lambda v: not isinstance(v, int)), st.text(max_size=8))


def proto_reads(message: str, key: str, value: Any) -> Any:
    """What the v1 proto reads ``{key: value}`` as (None: absent), or ``...`` when it refuses.

    proto3 JSON takes "2" and 2.0 for 2, enum numbers for names, and null for absent, so a
    value is only bad when what the proto reads is bad.
    """
    from google.cloud.aiplatform_v1 import types
    from google.protobuf import json_format

    parsed = getattr(types, message).pb()()
    try:
        json_format.ParseDict({key: value}, parsed)
        return json_format.MessageToDict(parsed).get(key)
    except (json_format.Error, ValueError, TypeError, OverflowError, RecursionError):
        # An infinite number (JSON 1e400) has no integer or enum form: refused.
        return ...


def _bad_count(value: Any) -> bool:
    read = proto_reads("WorkerPoolSpec", "replicaCount", value)
    return read is ... or read is None or int(read) <= 0


bad_counts = st.one_of(st.integers(max_value=0), non_ints.filter(_bad_count))
# Strings that no enum value, Duration or resource name can be.
junk = st.text(min_size=1, max_size=30).map(lambda s: f"~{s}")
huge_sizes = st.sampled_from([129, 1_000, 70_000, 300_000])


def encode(body: Any) -> bytes:
    return json.dumps(body).encode()


def base(kind: str) -> dict[str, Any]:
    return copy.deepcopy(BASES[kind])


def pool_of(body: dict[str, Any], kind: str) -> dict[str, Any]:
    pools: list[dict[str, Any]] = body[kind][JOB_SPEC[kind]]["workerPoolSpecs"]
    return pools[0]


def scheduling_of(body: dict[str, Any], kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = body[kind][JOB_SPEC[kind]]
    return spec.setdefault("scheduling", {})


def resources_of(body: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = body["deployModel"]["deployedModel"]["dedicatedResources"]
    return resources


# --- one bad field in an otherwise valid request ---------------------------------------------


def break_job_spec(draw: st.DrawFn, body: dict[str, Any], kind: str) -> None:
    """Give the job spec (pools, scheduling, name) of a training request one bad field."""
    pool = pool_of(body, kind)
    what = draw(
        st.sampled_from(
            [
                "replicaCount",
                "acceleratorCount",
                "acceleratorType",
                "machineType",
                "strategy",
                "maxWaitDuration",
                "timeout",
                "displayName",
                "imageUri",
                "workerPoolSpecs",
            ]
        )
    )
    if what == "replicaCount":
        pool["replicaCount"] = draw(bad_counts)
    elif what == "acceleratorCount":
        pool["machineSpec"]["acceleratorCount"] = draw(
            st.one_of(st.integers(max_value=-1), st.integers(min_value=3, max_value=2**40))
        )
    elif what == "acceleratorType":
        pool["machineSpec"]["acceleratorType"] = draw(
            st.one_of(junk, non_strings).filter(
                # An enum number of a real accelerator is a name spelled another way.
                lambda v: not isinstance(proto_reads("MachineSpec", "acceleratorType", v), str)
            )
        )
    elif what == "machineType":
        pool["machineSpec"]["machineType"] = draw(st.one_of(junk, non_strings))
    elif what == "strategy":
        scheduling_of(body, kind)["strategy"] = draw(
            st.one_of(junk, st.sampled_from(["ON_DEMAND", "LOW_COST"]), non_strings).filter(
                lambda v: (
                    proto_reads("Scheduling", "strategy", v)
                    not in (None, "STANDARD", "SPOT", "FLEX_START")
                )
            )
        )
    elif what == "maxWaitDuration":
        scheduling_of(body, kind)["maxWaitDuration"] = draw(
            st.one_of(junk, st.integers(), st.just("-5s"))
        )
    elif what == "timeout":
        seconds = draw(st.integers(min_value=7 * 24 * 3600 + 1, max_value=10**9))
        scheduling_of(body, kind)["timeout"] = f"{seconds}s"
    elif what == "displayName":
        name = draw(st.one_of(non_strings, huge_sizes.map(lambda n: "n" * n)))
        if name is None:
            del body[kind]["displayName"]
        else:
            body[kind]["displayName"] = name
    elif what == "imageUri":
        pool["containerSpec"]["imageUri"] = draw(st.one_of(st.just(""), non_strings))
    else:
        body[kind][JOB_SPEC[kind]]["workerPoolSpecs"] = draw(not_objects)


def break_envelope(draw: st.DrawFn, body: dict[str, Any]) -> None:
    """Give the envelope or the options of a request one bad field."""
    what = draw(
        st.sampled_from(["requestId", "location", "retryPolicy", "fallback", "checkpointUri"])
    )
    if what == "requestId":
        # null is no requestId at all (the attribute or message id stands in), so not here.
        body["requestId"] = draw(
            st.one_of(st.sampled_from(["", "   "]), non_strings.filter(lambda v: v is not None))
        )
    elif what == "location":
        body["location"] = draw(st.one_of(st.just(""), st.integers(), st.lists(st.text())))
    elif what == "retryPolicy":
        body["retryPolicy"] = draw(
            st.one_of(
                st.fixed_dictionaries({"preemption": st.integers(max_value=-1)}),
                st.fixed_dictionaries({"capacity": st.integers(min_value=101)}),
                st.dictionaries(junk, st.integers(), min_size=1, max_size=3),
                st.lists(st.integers(), max_size=3),
                st.text(max_size=5),
            )
        )
    elif what == "fallback":
        body["fallback"] = draw(
            st.one_of(
                st.just([{"afterCapacityFailures": 1}]),
                st.just([{"afterCapacityFailures": 0, "strategy": "STANDARD"}]),
                st.lists(st.just({"afterCapacityFailures": 1, "strategy": "SPOT"}), min_size=11),
                st.text(max_size=5),
            )
        )
    else:
        body["checkpointUri"] = draw(st.one_of(junk, st.integers(), st.just("gs://")))


@st.composite
def training_with_one_bad_field(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(list(JOB_SPEC)))
    body = base(kind)
    if draw(st.booleans()):
        break_job_spec(draw, body, kind)
    else:
        break_envelope(draw, body)
    return encode(body)


@st.composite
def deployment_with_one_bad_field(draw: st.DrawFn) -> bytes:
    body = base("deployModel")
    resources = resources_of(body)
    what = draw(
        st.sampled_from(
            [
                "spot",
                "minReplicaCount",
                "maxReplicaCount",
                "trafficSplit",
                "endpoint",
                "model",
                "automaticResources",
                "acceleratorType",
                "option",
            ]
        )
    )
    if what == "spot":
        spot = draw(st.one_of(st.just(False), non_ints.filter(lambda v: v is not True)))
        if spot is None:
            del resources["spot"]
        else:
            resources["spot"] = spot
    elif what == "minReplicaCount":
        resources["minReplicaCount"] = draw(bad_counts)
    elif what == "maxReplicaCount":
        # 0 is proto3's default, so absent (Vertex then uses minReplicaCount): not bad.
        resources["maxReplicaCount"] = draw(
            st.one_of(st.integers(max_value=-1), st.integers(min_value=65, max_value=2**40))
        )
    elif what == "trafficSplit":
        body["deployModel"]["trafficSplit"] = draw(
            st.one_of(
                st.dictionaries(st.just("0"), st.integers().filter(lambda n: n != 100), min_size=1),
                st.just({"0": 50, "7": 49}),
                st.just({"0": 100.5}),
                st.just({"x": 100}),
                not_objects.filter(lambda v: v is not None),
            )
        )
    elif what == "endpoint":
        size = draw(huge_sizes)
        body["deployModel"]["endpoint"] = draw(st.one_of(junk, non_strings, st.just("e" * size)))
    elif what == "model":
        body["deployModel"]["deployedModel"]["model"] = draw(st.one_of(junk, non_strings))
    elif what == "automaticResources":
        body["deployModel"]["deployedModel"]["automaticResources"] = {"minReplicaCount": 1}
    elif what == "acceleratorType":
        resources["machineSpec"]["acceleratorType"] = draw(junk)
    else:
        option = draw(st.sampled_from(["retryPolicy", "fallback", "checkpointUri"]))
        body[option] = draw(json_values.filter(lambda v: v is not None))
    return encode(body)


# --- structurally wrong messages -------------------------------------------------------------


@st.composite
def two_kinds(draw: st.DrawFn) -> bytes:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=2, max_size=4, unique=True))
    body: dict[str, Any] = {"requestId": draw(st.text(min_size=1, max_size=20))}
    for kind in kinds:
        body[kind] = base(kind)[kind]
    return encode(body)


@st.composite
def unknown_kind(draw: st.DrawFn) -> bytes:
    name = draw(st.text(min_size=1, max_size=30).filter(lambda k: k not in ENVELOPE_FIELDS))
    body = {"requestId": draw(st.text(max_size=20)), name: draw(json_values)}
    if draw(st.booleans()):
        body[name] = base("customJob")["customJob"]  # a valid body under the wrong key
    return encode(body)


@st.composite
def kind_of_wrong_type(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(KINDS))
    return encode({"requestId": "wrong-type", kind: draw(not_objects)})


@st.composite
def deep_nesting(draw: st.DrawFn) -> bytes:
    depth = draw(st.sampled_from([200, 1_000, 5_000, 50_000]))
    where = draw(st.sampled_from(["top", "list", "inside"]))
    if where == "top":
        return b"{" * depth + b"}" * depth  # not even JSON
    if where == "list":
        return b"[" * depth + b"]" * depth
    nested = '{"a":' * depth + "1" + "}" * depth
    kind = draw(st.sampled_from(KINDS))
    return f'{{"requestId": "deep", "{kind}": {{"displayName": {nested}}}}}'.encode()


@st.composite
def huge_message(draw: st.DrawFn) -> bytes:
    # Over the 256 KiB message limit, whatever it holds.
    body = base(draw(st.sampled_from(KINDS)))
    body["requestId"] = "r" * draw(st.integers(min_value=262_145, max_value=400_000))
    return encode(body)


invalid_utf8 = st.binary(max_size=64).map(lambda b: b"\xff" + b)  # 0xFF never starts a character
not_json = st.text(max_size=40).map(lambda s: f"{{{s}".encode())  # an unclosed object
json_not_object = not_objects.map(encode)
object_without_kind = st.dictionaries(
    st.text(max_size=10).filter(lambda k: k not in KINDS), json_values, max_size=5
).map(encode)

messages = st.one_of(
    invalid_utf8,
    not_json,
    json_not_object,
    object_without_kind,
    two_kinds(),
    unknown_kind(),
    kind_of_wrong_type(),
    deep_nesting(),
    huge_message(),
    training_with_one_bad_field(),
    deployment_with_one_bad_field(),
)
attributes = st.one_of(
    st.just({}), st.fixed_dictionaries({"requestId": st.text(min_size=1, max_size=40)})
)


# --- the property ----------------------------------------------------------------------------


def test_ten_thousand_bad_messages_are_each_rejected_and_create_nothing(intake, post_event):
    counter = iter(range(10**9))
    deployments = intake.deployments

    @settings(
        max_examples=10_000,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )
    @given(data=messages, attrs=attributes)
    def one_message(data: bytes, attrs: dict[str, str]) -> None:
        # Each example starts from empty fakes, so a failure is reported on its own message.
        for collection in (
            intake.rejections.documents,
            intake.notifier.messages,
            intake.backend.created,
            intake.backend.jobs,
            intake.jobs.job_store.database.jobs,
            deployments.backend.deployed,
            deployments.records.deployment_store.records,
        ):
            collection.clear()
        message_id = f"fuzz-{next(counter)}"
        response = post_event(
            "handle_job_request", pubsub_cloud_event(data, message_id=message_id, **attrs)
        )
        assert response.status_code == 200, data[:200]
        assert intake.backend.created == [], data[:300]
        assert intake.jobs.job_store.database.jobs == {}
        assert deployments.backend.deployed == [], data[:300]
        assert deployments.records.deployment_store.records == {}
        (rejection,) = intake.rejections.documents.values()
        assert rejection["errors"], data[:200]
        assert rejection["payloadBytes"] == len(data)
        (notification,) = intake.notifier.messages
        assert notification["state"] == "REJECTED"
        assert notification["errors"] == rejection["errors"]

    one_message()
    assert next(counter) >= 10_000  # every example really went through the handler
