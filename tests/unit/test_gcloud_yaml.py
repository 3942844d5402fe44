"""gcloud config.yaml -> request message, checked by the same rules as JSON requests."""

from __future__ import annotations

import json

import pytest
import yaml

from shared.domain.request.gcloud_yaml import DEFAULT_DISPLAY_NAME, parse_gcloud_config
from shared.domain.request.message import parse_request
from shared.domain.request.validation import Guards, check_options, check_request
from shared.kernel.errors import InvalidRequest

# The gcloud example of seed 000, verbatim.
SEED_YAML = """\
workerPoolSpecs:
  machineSpec:
    machineType: a2-highgpu-1g
    acceleratorType: NVIDIA_TESLA_A100
    acceleratorCount: 1
  replicaCount: 1
  containerSpec:
    imageUri: gcr.io/ucaip-test/ucaip-training-test
    args:
    - port=8500
    command:
    - start
scheduling:
  strategy: FLEX_START
  maxWaitDuration: 7200s
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config(text, "r1")
    return [e.path for e in info.value.errors]


def test_seed_yaml_becomes_a_valid_request():
    message = parse_gcloud_config(SEED_YAML, "seed-yaml")
    assert message["requestId"] == "seed-yaml"
    job = message["customJob"]
    assert job["displayName"] == "seed-yaml"
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert isinstance(pools, list) and len(pools) == 1
    assert pools[0]["machineSpec"]["acceleratorCount"] == 1
    assert job["jobSpec"]["scheduling"] == {"strategy": "FLEX_START", "maxWaitDuration": "7200s"}
    request = parse_request(message, {}, "m1")
    assert check_request(request, Guards()) == []
    assert request.max_wait_seconds == 7200


def test_list_form_and_other_custom_job_fields_pass_through():
    text = """\
displayName: from-file
serviceAccount: trainer@p.iam.gserviceaccount.com
baseOutputDirectory:
  outputUriPrefix: gs://bucket/out
workerPoolSpecs:
- machineSpec: {machineType: g2-standard-24, acceleratorType: NVIDIA_L4, acceleratorCount: 2}
  replicaCount: 1
  containerSpec: {imageUri: python:3.10}
- {}
"""
    message = parse_gcloud_config(text)
    assert "requestId" not in message
    job = message["customJob"]
    assert job["displayName"] == "from-file"
    assert job["jobSpec"]["serviceAccount"] == "trainer@p.iam.gserviceaccount.com"
    assert job["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/out"}
    assert job["jobSpec"]["workerPoolSpecs"][1] == {}
    guards = Guards(allowed_service_accounts=("trainer@p.iam.gserviceaccount.com",))
    assert check_request(parse_request(message, {}, "m"), guards) == []


def test_display_name_precedence():
    assert parse_gcloud_config(SEED_YAML)["customJob"]["displayName"] == DEFAULT_DISPLAY_NAME
    named = parse_gcloud_config("displayName: f\n" + SEED_YAML, "r", display_name="flag")
    assert named["customJob"]["displayName"] == "flag"


def test_yaml_problems_still_reach_the_rules():
    text = SEED_YAML.replace("acceleratorCount: 1", "acceleratorCount: 2").replace(
        "FLEX_START", "ON_DEMAND"
    )
    request = parse_request(parse_gcloud_config(text, "r"), {}, "m")
    # maxWaitDuration is not judged against a strategy that is itself refused.
    assert sorted(e.path for e in check_request(request, Guards())) == [
        "customJob.jobSpec.scheduling.strategy",
        "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount",
    ]


def test_syntax_errors_carry_the_line():
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config("workerPoolSpecs:\n  machineSpec: [a\n  b: c\n")
    [error] = info.value.errors
    assert error.path == "$" and "line" in error.message


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just text", "42", "null"])
def test_document_must_be_a_mapping(text):
    assert errors_of(text) == ["$"]


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("scheduling: {strategy: SPOT}\n", ["workerPoolSpecs"]),
        ("workerPoolSpecs: 3\n", ["workerPoolSpecs"]),
        ("workerPoolSpecs: []\ndisplayName: [x]\n", ["displayName"]),
        ("workerPoolSpecs:\n  labels: {when: 2024-01-01}\n", ["workerPoolSpecs.labels.when"]),
        ("workerPoolSpecs:\n  1: x\n", ["workerPoolSpecs"]),
        ("workerPoolSpecs:\n  x: .nan\n", ["workerPoolSpecs.x"]),
        ("workerPoolSpecs:\n  x: !!binary aGVsbG8=\n", ["workerPoolSpecs.x"]),
        ("workerPoolSpecs:\n  x: !!set {a, b}\n", ["workerPoolSpecs.x"]),
        (
            "workerPoolSpecs: {t: 2024-01-01T00:00:00Z}\nscheduling: {x: !!binary aA==}\n",
            ["workerPoolSpecs.t", "scheduling.x"],
        ),
    ],
)
def test_values_json_cannot_carry(text, paths):
    assert sorted(errors_of(text)) == sorted(paths)


def test_unsafe_tags_are_refused():
    assert errors_of("workerPoolSpecs: !!python/object/apply:os.system ['true']\n") == ["$"]


def test_alias_bombs_are_refused():
    # Eight levels of ten aliases each: 10**8 values from a few hundred bytes.
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"l{level}: &l{level} [{refs}]")
    lines.append("workerPoolSpecs: *l7")
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config("\n".join(lines) + "\n")
    assert any("anchors and aliases" in e.message for e in info.value.errors)


def test_one_string_referenced_many_times_is_refused_before_it_expands():
    # Issue 20: 270 KB of YAML referencing one 20 KB string 50,000 times passed the node
    # count and expanded to about 1 GB of JSON. Aliases are refused before anything expands.
    text = f"big: &big {'x' * 20_000}\nworkerPoolSpecs: [" + "*big," * 50_000 + "]\n"
    assert len(text) < 300_000
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config(text, "r1", max_bytes=10**6)  # under the size bound: read
    assert [e.path for e in info.value.errors] == ["$"]
    assert "anchors and aliases" in info.value.errors[0].message


@pytest.mark.parametrize(
    "text",
    ["a: &x 1\nworkerPoolSpecs: {}\n", "base: &b {replicaCount: 1}\nworkerPoolSpecs:\n  <<: *b\n"],
)
def test_anchors_and_merge_keys_are_refused(text):
    assert errors_of(text) == ["$"]


def test_the_json_form_is_bounded_in_bytes_without_aliases():
    # No alias: each value is written out. The JSON form still may not pass the message limit.
    # Under the limit as YAML, over it as JSON (quotes and separators on every item).
    text = "workerPoolSpecs:\n" + "".join(f"- {'y' * 100}\n" for _ in range(2530))
    assert len(text) < 262_144 < len(json.dumps(yaml.safe_load(text)))
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config(text, "r1", max_bytes=262_144)
    assert "262144 bytes of JSON" in info.value.errors[0].message
    small = parse_gcloud_config(text, "r1", max_bytes=1_000_000)
    assert len(json.dumps(small)) < 1_000_000


def test_deep_nesting_is_refused():
    assert errors_of("workerPoolSpecs: " + "[" * 100 + "]" * 100 + "\n")
    assert errors_of("workerPoolSpecs: " + "[" * 1500 + "]" * 1500 + "\n") == ["$"]


def test_huge_integers_are_refused():
    assert errors_of("workerPoolSpecs:\n  replicaCount: " + "9" * 5000 + "\n") == ["$"]


def test_text_must_be_a_string():
    with pytest.raises(InvalidRequest):
        parse_gcloud_config(b"workerPoolSpecs: {}")  # type: ignore[arg-type]


def test_seed_yaml_and_its_json_form_are_the_same_request():
    """The gcloud form and the JSON form of the same job produce one model and one schedule."""
    json_form = {
        "requestId": "seed-yaml",
        "customJob": {
            "displayName": "seed-yaml",
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {
                            "machineType": "a2-highgpu-1g",
                            "acceleratorType": "NVIDIA_TESLA_A100",
                            "acceleratorCount": 1,
                        },
                        "replicaCount": 1,
                        "containerSpec": {
                            "imageUri": "gcr.io/ucaip-test/ucaip-training-test",
                            "args": ["port=8500"],
                            "command": ["start"],
                        },
                    }
                ],
                "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "7200s"},
            },
        },
    }
    from_yaml = parse_request(parse_gcloud_config(SEED_YAML, "seed-yaml"), {}, "m1")
    from_json = parse_request(json_form, {}, "m2")

    for request in (from_yaml, from_json):
        assert check_request(request, Guards()) == []
        assert check_options(request) == []
    assert from_yaml == from_json
    assert from_yaml.scheduling == {
        "strategy": "FLEX_START",
        "maxWaitDuration": "7200s",
        "timeout": "604800s",
    }
    assert (from_yaml.strategy, from_yaml.max_wait_seconds) == ("FLEX_START", 7200)


def test_an_alias_free_yaml_is_refused_before_it_is_held_in_memory():
    # 1 MB of "- 1" items, no alias: PyYAML holds ~150 MiB composing it (an 8 MiB upload is
    # past the function's 512 MiB). A text past the message limit is refused unparsed.
    import tracemalloc

    text = "workerPoolSpecs:\n" + "- 1\n" * 250_000
    tracemalloc.start()
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config(text, "r", max_bytes=256 * 1024)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MiB for a 1 MB file"
    assert "it becomes one message of at most 262144" in info.value.errors[0].message


def test_composing_stops_at_the_node_bound():
    text = "workerPoolSpecs: [" + "1," * 100_001 + "]\n"
    with pytest.raises(InvalidRequest) as info:
        parse_gcloud_config(text, "r", max_bytes=10**7)
    assert "over 100000 values" in info.value.errors[0].message
