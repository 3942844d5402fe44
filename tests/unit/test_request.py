"""The request envelope, defaults, ids and Vertex state mapping (pure)."""

from __future__ import annotations

import json

import pytest

from shared.domain.model.ids import doc_id, label_value
from shared.domain.model.states import JobState, from_vertex
from shared.domain.request.message import decode_message, parse_duration, parse_request
from shared.kernel.errors import InvalidRequest
from tests.events import load


def paths(err: InvalidRequest) -> list[str]:
    return [e.path for e in err.errors]


def test_seed_parses_with_its_own_scheduling():
    request = parse_request(load("seed_request"), {}, "m1")
    assert request.request_id == "seed-1"
    assert request.kind == "customJob"
    assert request.strategy == "FLEX_START"
    assert request.max_wait_seconds == 1800
    assert request.scheduling["timeout"] == "604800s"


def test_defaults_leave_the_callers_dict_alone():
    body = load("seed_request")
    del body["customJob"]["jobSpec"]["scheduling"]
    request = parse_request(body, {}, "m1")
    assert request.scheduling == {
        "strategy": "FLEX_START",
        "maxWaitDuration": "86400s",
        "timeout": "604800s",
    }
    assert "scheduling" not in body["customJob"]["jobSpec"]


def test_zero_wait_means_forever():
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"]["maxWaitDuration"] = "0s"
    assert parse_request(body, {}, "m").max_wait_seconds is None


def test_named_strategy_is_honoured_without_flex_defaults():
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "SPOT"}
    request = parse_request(body, {}, "m")
    assert request.strategy == "SPOT"
    assert "maxWaitDuration" not in request.scheduling


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, ["$"]),
        ({"customJob": [], "requestId": 5}, ["requestId", "customJob"]),
        ({"customJob": {}, "trainingPipeline": {}}, ["$"]),
        ({"customJob": {}, "bogus": 1, "location": ""}, ["location", "bogus"]),
    ],
)
def test_envelope_errors_are_all_reported(body, expected):
    with pytest.raises(InvalidRequest) as info:
        parse_request(body, {}, "m")
    assert paths(info.value) == expected


@pytest.mark.parametrize("data", [b"\xff", b"{", b"[]", b'"x"', b"1"])
def test_undecodable_messages(data):
    with pytest.raises(InvalidRequest) as info:
        decode_message(data)
    assert paths(info.value) == ["$"]


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(InvalidRequest):
        decode_message(b"[" * 100_000 + b"]" * 100_000)


def test_request_id_precedence():
    assert parse_request({"customJob": {}}, {"requestId": "a"}, "m").request_id == "a"
    assert parse_request({"customJob": {}}, {}, "m").request_id == "m"


@pytest.mark.parametrize(("text", "seconds"), [("1800s", 1800), ("3.5s", 3.5), ("0s", 0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["1800", "30m", "s", "1.s", ""])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_doc_ids_escape_and_hash():
    assert doc_id("seed-1") == "seed-1"
    assert doc_id("a/b%c") == "a%2Fb%25c"
    assert doc_id("a%2Fb") != doc_id("a/b")
    for odd in ["", ".", "..", "__x__", "x" * 500]:
        assert doc_id(odd).startswith("sha256-")
        assert len(doc_id(odd)) == 71


def test_labels_are_safe_and_distinct():
    assert label_value("seed-1") == "seed-1"
    a, b = label_value("Job A"), label_value("job-a")
    assert a != b
    long = label_value("x" * 300)
    assert len(long) <= 63
    assert label_value("x" * 300 + "1") != long
    for value in [a, long, label_value("Ünïcode/⚙")]:
        assert all(c.islower() or c.isdigit() or c in "-_" for c in value)


def test_vertex_states_map_onto_record_states():
    assert from_vertex("JOB_STATE_PENDING") is JobState.QUEUED
    assert from_vertex("JOB_STATE_EXPIRED") is JobState.FAILED
    assert from_vertex("JOB_STATE_UNSPECIFIED") is None
    assert JobState.SUCCEEDED.rank > JobState.RUNNING.rank > JobState.QUEUED.rank


def test_request_json_roundtrip_keeps_rest_body():
    request = parse_request(load("seed_request"), {}, "m")
    assert (
        json.loads(json.dumps(request.spec))["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == 1
    )
