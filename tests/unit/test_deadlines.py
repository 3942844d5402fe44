"""The request fields of scheduling.strategy AUTO: parsing, validation paths, the attempt body."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.domain.request.attempts import attempt_spec
from shared.domain.request.deadlines import DeadlineOptions
from shared.domain.request.message import parse_request
from shared.domain.request.validation import Guards, validators
from shared.kernel.errors import InvalidRequest
from tests.events import load

PUBLISHED = "2026-12-01T00:00:00Z"
SCHED = "customJob.jobSpec.scheduling"
STRATEGY = f"{SCHED}.strategy"


def auto(scheduling: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """The seed request under AUTO, due two days after it is published, with ``fields``."""
    body = load("seed_request")
    body["customJob"]["jobSpec"]["scheduling"] = scheduling or {"strategy": "AUTO"}
    body.update(deadline="2026-12-03T00:00:00Z", estimatedRunSeconds=86400)
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def problems(body: dict[str, Any], published: str | None = PUBLISHED) -> dict[str, str]:
    """Every problem intake finds, by path (what parsing refuses, else every validator's)."""
    try:
        request = parse_request(copy.deepcopy(body), {}, "m1", published)
    except InvalidRequest as err:
        return {e.path: e.message for e in err.errors}
    return {e.path: e.message for check in validators(Guards()) for e in check(request)}


def test_auto_is_kept_in_the_canonical_body_and_gets_no_flex_defaults():
    request = parse_request(auto(), {}, "m1", PUBLISHED)
    assert request.strategy == "AUTO"
    assert request.scheduling == {"strategy": "AUTO", "timeout": "604800s"}
    assert request.options["deadline"] == "2026-12-03T00:00:00Z"
    assert request.published_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert problems(auto(checkpointIntervalSeconds=1800, restartOverheadSeconds=300)) == {}


def test_auto_is_read_in_the_proto_spellings_too():
    body = auto()
    body["customJob"] = {"display_name": "x", "job_spec": body["customJob"].pop("jobSpec")}
    assert parse_request(body, {}, "m1", PUBLISHED).strategy == "AUTO"
    assert body["customJob"]["job_spec"]["scheduling"] == {"strategy": "AUTO"}  # left alone


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("hyperparameterTuningJob", "hyperparameterTuningJob.trialJobSpec.scheduling.strategy"),
        ("trainingPipeline", "trainingPipeline.trainingTaskInputs.scheduling.strategy"),
    ],
)
def test_every_training_kind_takes_auto(kind, path):
    body = load("hpt_request" if kind == "hyperparameterTuningJob" else "pipeline_request")
    spec = body[kind]["trialJobSpec" if kind == "hyperparameterTuningJob" else "trainingTaskInputs"]
    spec["scheduling"] = {"strategy": "AUTO"}
    body.update(deadline="2026-12-03T00:00:00Z", estimatedRunSeconds=3600)
    assert problems(body) == {}
    del body["deadline"]
    assert "is required when " + path in problems(body)["deadline"]


def test_auto_needs_a_deadline_and_the_work():
    found = problems(auto(deadline=None, estimatedRunSeconds=None))
    assert set(found) == {"deadline", "estimatedRunSeconds"}
    assert found["deadline"] == f"is required when {STRATEGY} is AUTO"


def test_deadline_fields_without_auto_are_refused():
    body = auto(scheduling={"strategy": "SPOT"}, checkpointIntervalSeconds=600)
    found = problems(body)
    assert set(found) == {"deadline", "estimatedRunSeconds", "checkpointIntervalSeconds"}
    assert "applies only when" in found["deadline"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("deadline", "2026-12-03T00:00:00"),  # no offset
        ("deadline", "next friday"),
        ("deadline", 1796256000),
        ("estimatedRunSeconds", 0),
        ("estimatedRunSeconds", "86400"),  # an envelope field, like totalSteps: no int64 text
        ("estimatedRunSeconds", True),
        ("estimatedRunSeconds", 86400.5),
        ("checkpointIntervalSeconds", 0),
        ("restartOverheadSeconds", -1),
        ("restartOverheadSeconds", 86401),
    ],
)
def test_malformed_fields(field, value):
    assert list(problems(auto(**{field: value}))) == [field]


def test_a_deadline_in_the_past_or_too_far_out_is_refused():
    assert "must be in the future" in problems(auto(deadline="2026-11-30T00:00:00Z"))["deadline"]
    assert "at most 30 days" in problems(auto(deadline="2027-06-01T00:00:00Z"))["deadline"]


def test_a_deadline_on_demand_cannot_meet_is_refused_with_the_arithmetic():
    # 24 h of work plus the 10-minute default restart overhead ends at 00:10 the next day.
    message = problems(auto(deadline="2026-12-02T00:05:00Z"))["deadline"]
    assert message == (
        "cannot be met even on on-demand capacity: started at 2026-12-01T00:00:00Z, the run "
        "(estimatedRunSeconds plus the restart overhead, 87000s) ends at "
        "2026-12-02T00:10:00Z, after 2026-12-02T00:05:00Z"
    )
    assert problems(auto(deadline="2026-12-02T00:05:00Z", restartOverheadSeconds=300)) == {}


def test_deadline_checks_use_the_publish_time_so_redeliveries_agree():
    body = auto(deadline="2026-12-02T00:05:00Z")
    assert "deadline" in problems(body, published=PUBLISHED)
    # Without a publish time nothing to measure against: the policy still copes at run time.
    assert problems(body, published=None) == {}


def test_work_longer_than_the_timeout_is_contradictory():
    body = auto(scheduling={"strategy": "AUTO", "timeout": "3600s"})
    assert "longer than scheduling.timeout" in problems(body)["estimatedRunSeconds"]


def test_auto_takes_no_fallback_ladder_and_no_max_wait():
    body = auto(
        scheduling={"strategy": "AUTO", "maxWaitDuration": "600s"},
        fallback=[{"afterCapacityFailures": 1, "location": "europe-west4"}],
    )
    found = problems(body)
    assert set(found) == {f"{SCHED}.maxWaitDuration", "fallback"}
    assert "chosen per attempt under AUTO" in found[f"{SCHED}.maxWaitDuration"]


def test_auto_body_must_be_valid_under_every_strategy_it_may_choose():
    body = auto()
    body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] = {
        "machineType": "n1-standard-4",
        "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 1,
    }
    found = problems(body)
    assert list(found) == [STRATEGY]
    assert found[STRATEGY].startswith(
        "AUTO may run an attempt as FLEX_START, and that attempt is invalid: "
        "customJob.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType: T4"
    )


def test_a_scheduled_request_cannot_have_one_deadline_for_every_slot():
    body = auto(requestId="nightly-{slot}", schedule={"slotSeconds": 86400})
    assert "every slot" in problems(body)["deadline"]


def test_options_are_reported_with_body_problems():
    body = auto(deadline=None)
    body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] = "two"
    assert set(problems(body)) == {"customJob.jobSpec.workerPoolSpecs[0].replicaCount", "deadline"}


def test_an_attempt_body_never_says_auto():
    spec = parse_request(auto(), {}, "m1", PUBLISHED).spec
    with pytest.raises(ValueError, match="capacity policy"):
        attempt_spec("customJob", spec, run_id="r", attempt=1, resume_from=None, strategy="AUTO")
    flex = attempt_spec(
        "customJob",
        spec,
        run_id="r",
        attempt=1,
        resume_from=None,
        strategy="FLEX_START",
        max_wait_seconds=5400,
    )
    assert flex["jobSpec"]["scheduling"] == {
        "strategy": "FLEX_START",
        "timeout": "604800s",
        "maxWaitDuration": "5400s",
    }
    spot = attempt_spec("customJob", spec, run_id="r", attempt=2, resume_from=None, strategy="SPOT")
    assert spot["jobSpec"]["scheduling"] == {"strategy": "SPOT", "timeout": "604800s"}
    with pytest.raises(ValueError, match="positive"):
        attempt_spec(
            "customJob",
            spec,
            run_id="r",
            attempt=1,
            resume_from=None,
            strategy="FLEX_START",
            max_wait_seconds=0,  # 0s would mean wait forever
        )


def test_stored_options_read_back_typed():
    read = DeadlineOptions.read(
        {"deadline": "2026-12-03T01:00:00+01:00", "estimatedRunSeconds": 60, "extra": 1}
    )
    assert read == DeadlineOptions(datetime(2026, 12, 3, tzinfo=UTC), 60, None, 600)
    assert DeadlineOptions.read({"deadline": "2026-12-03T00:00:00Z"}) is None
    assert DeadlineOptions.read({"deadline": "x", "estimatedRunSeconds": 60}) is None
