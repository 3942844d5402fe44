"""Spot deployments' records: the idempotency tag, the record a request starts as, what a
state of the serving machine writes on it (``projected``), how a record reads back as a state
(``state_of``, records written before the machine too), and the operation of a call read as
the machine's input."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.app.services.deploy import outcome_of
from shared.domain.decisions.deploy_model import (
    RESUME_REQUESTED,
    UNDEPLOY_REQUESTED,
    OperationStatus,
    carries_tag,
    deployment_tag,
    new_deployment,
    policy_of,
    projected,
    state_of,
    tagged_display_name,
)
from shared.domain.model.records import DeploymentRecord
from shared.domain.request.message import MAX_DISPLAY_NAME, JobRequest
from shared.domain.serving.model import (
    CallKind,
    InFlight,
    Intent,
    MachineSpec,
    ObservedEndpoint,
    ObservedModel,
    Ours,
    Phase,
    ServingState,
    fallback_display_name,
)
from shared.domain.serving.objective import ServingPolicy
from shared.domain.serving.rule import OperationOutcome, decide, new_state, refused, told

NOW = datetime(2025, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
NAME = "served [flexjobs s-1]"
SPEC = {
    "endpoint": "projects/p/locations/us-central1/endpoints/1",
    "deployedModel": {
        "model": "projects/p/locations/us-central1/models/m",
        "displayName": "served",
        "dedicatedResources": {"minReplicaCount": 2, "spot": True},
    },
}


def record(**fields: Any) -> DeploymentRecord:
    """A deployment record as stored (the decisions read it decoded)."""
    raw = {"requestId": "s-1", "kind": "deployModel", "request": json.dumps(SPEC), **fields}
    return DeploymentRecord.decode(raw)


def deploying(operation: str | None = "op/1") -> ServingState:
    """A state whose Spot DeployModel is claimed (and answered with ``operation``)."""
    state = new_state(NAME, 2, ServingPolicy(), NOW)
    call = InFlight(CallKind.DEPLOY_SPOT, NAME, NOW, 2, operation)
    return replace(state, call=call)


# --- the tag ---------------------------------------------------------------------------------


def test_tag_is_derived_from_the_request_id_as_a_label_value():
    assert deployment_tag("seed-4") == "[flexjobs seed-4]"
    odd = deployment_tag("Team/Model v2")
    assert odd.startswith("[flexjobs team-model-v2-") and len(odd) == len("[flexjobs ]") + 16 + 14


@pytest.mark.parametrize("name", [None, "", "served", "x" * 500])
def test_tagged_name_fits_vertex_and_keeps_the_whole_tag(name):
    request_id = "r" * 300  # hashed to a 63-character label value
    tagged = tagged_display_name(name, request_id)
    assert len(tagged) <= MAX_DISPLAY_NAME
    assert carries_tag(tagged, request_id)
    assert carries_tag(fallback_display_name(tagged)[: -len(" (on-demand fallback)")], request_id)


def test_tag_of_one_request_never_matches_another():
    tagged = tagged_display_name("served", "a")
    assert carries_tag(tagged, "a")
    assert not carries_tag(tagged, "b")
    assert not carries_tag(tagged_display_name("served", "x a"), "a")
    assert not carries_tag("served", "a")


# --- a request accepted ----------------------------------------------------------------------


def test_a_request_accepted_starts_deploying_with_its_policy():
    request = JobRequest(
        "s-1", "deployModel", SPEC, options={"minOnDemandReplicas": 1, "extraSpotReplicas": 1}
    )
    required, policy = policy_of(request.spec, request.options)
    assert (required, policy) == (2, ServingPolicy(1, 1, True))
    state = new_state(tagged_display_name("served", "s-1"), required, policy, NOW)
    raw = new_deployment(request, state, NOW)
    assert (raw["state"], raw["spot"], raw["endpoint"]) == ("ACCEPTED", True, SPEC["endpoint"])
    assert json.loads(raw["request"]) == SPEC
    assert json.loads(raw["options"]) == {"minOnDemandReplicas": 1, "extraSpotReplicas": 1}
    back = state_of(DeploymentRecord.decode(raw), NOW)
    assert back == state
    assert (back.phase, back.intent, back.spot) == (
        Phase.DEPLOYING,
        Intent.SERVE,
        Ours(NAME, None, 2),
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("resources", "options", "expected"),
    [
        ({"minReplicaCount": 3}, {}, (3, ServingPolicy(0, 0, True))),
        ({"minReplicaCount": 3, "requiredReplicaCount": "2"}, {}, (2, ServingPolicy())),
        ({}, {}, (1, ServingPolicy())),  # at least one replica
        ({"minReplicaCount": True}, {"hedge": False}, (1, ServingPolicy(0, 0, False))),
        ({"minReplicaCount": 2}, {"minOnDemandReplicas": 9}, (2, ServingPolicy(2, 0, True))),
        ({"minReplicaCount": 2}, {"hedge": "no"}, (2, ServingPolicy(0, 0, True))),
    ],
)
def test_the_policy_reads_required_replicas_and_the_knobs(resources, options, expected):
    spec = {"deployedModel": {"dedicatedResources": resources}}
    assert policy_of(spec, options) == expected


# --- what a state writes on its record ---------------------------------------------------------


def test_a_deploy_model_answered_makes_the_record_deploying_with_its_operation():
    change = projected(record(state="ACCEPTED"), deploying("op/1"), NOW)
    assert change.fields["state"] == "DEPLOYING"
    assert change.fields["operation"] == "op/1"
    assert (change.fields["nextAttemptAt"], change.fields["reason"]) == (None, None)  # not parked
    claimed = projected(record(state="ACCEPTED"), deploying(None), NOW)
    assert claimed.fields["state"] == "ACCEPTED"  # claimed, not answered yet
    assert "operation" not in claimed.fields


def test_the_spot_model_seen_makes_the_record_deployed_with_its_notice():
    before = deploying("op/1")
    spot = ObservedModel("42", "m", NAME, MachineSpec("g2"), True, 2, 2)
    action = decide(before, ObservedEndpoint("e", (spot,), {"42": 100}), NOW + MINUTE)
    notices = tuple((n, None) for n in action.notices)
    change = projected(record(state="DEPLOYING", operation="op/1"), action.state, NOW, notices)
    assert change.fields["state"] == "DEPLOYED"
    assert (change.fields["deployedModelId"], change.fields["deployedAt"]) == ("42", NOW)
    (message,) = change.fields["outbox"]
    assert message == {
        "requestId": "s-1",
        "state": "DEPLOYED",
        "attempt": 0,
        "reason": None,
        "kind": "deployModel",
        "at": NOW.isoformat(),
    }
    # A later write of the same deployed model does not move deployedAt again.
    later = projected(
        record(state="DEPLOYED", deployedModelId="42"), action.state, NOW + MINUTE, ()
    )
    assert "deployedAt" not in later.fields and "outbox" not in later.fields


def test_a_parked_deployment_counts_each_refusal_once():
    state = deploying(None)
    assert state.call is not None
    parked, _ = refused(state, state.call, "quota", NOW, retry_at=NOW + 10 * MINUTE) or (None, ())
    assert parked is not None
    first = projected(record(state="ACCEPTED", quotaRetries=2), parked, NOW)
    assert (first.fields["state"], first.fields["reason"]) == ("ACCEPTED", "quota")
    assert (first.fields["nextAttemptAt"], first.fields["quotaRetries"]) == (NOW + 10 * MINUTE, 3)
    # The same park written again (another write of the state) is not a new refusal.
    stored = record(state="ACCEPTED", quotaRetries=3, serving=parked.to_dict())
    again = projected(stored, parked, NOW + MINUTE)
    assert "quotaRetries" not in again.fields


def test_a_deployment_refused_for_good_fails_with_the_reason_and_its_notice():
    state = deploying(None)
    assert state.call is not None
    got = refused(state, state.call, "INVALID_ARGUMENT: no such model", NOW, retry_at=None)
    assert got is not None
    state, notices = got
    change = projected(record(state="ACCEPTED"), state, NOW, tuple((n, "x") for n in notices))
    assert (change.fields["state"], change.fields["endedAt"]) == ("FAILED", NOW)
    assert "no such model" in change.fields["reason"]
    assert [m["state"] for m in change.fields["outbox"]] == ["FAILED"]


def test_an_undeployed_deployment_ends_and_a_state_never_moves_the_record_back():
    state = replace(deploying(None), phase=Phase.UNDEPLOYED, call=None)
    change = projected(record(state="DEPLOYED", deployedModelId="42"), state, NOW)
    assert (change.fields["state"], change.fields["reason"], change.fields["endedAt"]) == (
        "UNDEPLOYED",
        "undeployed on request",
        NOW,
    )
    # A DEPLOYING record whose claim was released (its call never sent again yet) stays so.
    released = replace(deploying(None), call=None)
    assert (
        projected(record(state="DEPLOYING", operation="op/1"), released, NOW).fields["state"]
        == "DEPLOYING"
    )


def test_the_first_write_of_the_machine_deletes_the_flags_it_took_as_intents():
    flagged = record(state="DEPLOYED", deployedModelId="42", undeployRequested=True)
    change = projected(flagged, deploying(), NOW)
    assert change.deletes == (UNDEPLOY_REQUESTED,)
    both = record(state="DEPLOYED", undeployRequested=True, resumeRequested=True)
    assert projected(both, deploying(), NOW).deletes == (UNDEPLOY_REQUESTED, RESUME_REQUESTED)
    assert projected(record(state="DEPLOYED"), deploying(), NOW).deletes == ()


# --- records read as states ------------------------------------------------------------------


def test_a_record_written_before_the_machine_reads_as_deploying_its_operation_in_flight():
    state = state_of(record(state="DEPLOYING", operation="op/1"), NOW)
    assert state is not None
    assert (state.phase, state.intent, state.spot.name) == (Phase.DEPLOYING, Intent.SERVE, NAME)
    assert state.call is not None
    assert (state.call.kind, state.call.operation, state.call.replicas) == (
        CallKind.DEPLOY_SPOT,
        "op/1",
        2,
    )
    # Its operation then decides it, as any call's does.
    done = decide(
        state, ObservedEndpoint("e", (), {}), NOW, operation=OperationOutcome("op/1", True, "42")
    )
    assert done.state.spot.id == "42"


def test_a_deployed_record_written_before_the_machine_is_followed_from_its_model():
    state = state_of(record(state="DEPLOYED", deployedModelId="42"), NOW)
    assert state is not None and state.spot.id == "42" and state.call is None
    spot = ObservedModel("42", "m", NAME, MachineSpec("g2"), True, 2, 2)
    followed = decide(state, ObservedEndpoint("e", (spot,), {"42": 100}), NOW + MINUTE)
    assert (followed.transition, followed.state.phase) == ("deployed", Phase.SERVING)


def test_a_record_that_reads_as_no_state_is_not_decided_on():
    assert state_of(record(state="FAILED"), NOW) is None
    assert state_of(record(state="UNDEPLOYED"), NOW) is None
    assert (
        state_of(DeploymentRecord.decode({"requestId": "s-1", "state": "DEPLOYING"}), NOW) is None
    )
    hand_edited = record(state="DEPLOYED", serving={"phase": "SERVING"})  # no time, no model
    assert state_of(hand_edited, NOW) is not None  # read as never followed: from its request
    assert state_of(hand_edited, NOW).phase is Phase.DEPLOYING  # type: ignore[union-attr]


def test_the_flags_of_a_record_before_the_machine_read_as_intents():
    cancelled = state_of(
        record(state="DEPLOYED", deployedModelId="42", undeployRequested=True), NOW
    )
    assert cancelled is not None
    assert (cancelled.intent, cancelled.phase) == (Intent.UNDEPLOY, Phase.UNDEPLOYING)
    paused = replace(
        new_state(NAME, 2, ServingPolicy(), NOW),
        phase=Phase.PAUSED_BY_HAND,
        spot=Ours(NAME, "42", 2),
    )
    resumed = state_of(
        record(state="DEPLOYED", serving=paused.to_dict(), resumeRequested=True), NOW + MINUTE
    )
    assert resumed is not None
    assert (resumed.intent, resumed.intent_at) == (Intent.RESUME, NOW + MINUTE)
    # A cancel flag wins over a resume; a state with the intent already is left as it is.
    both = state_of(
        record(
            state="DEPLOYED", serving=paused.to_dict(), undeployRequested=True, resumeRequested=True
        ),
        NOW,
    )
    assert both is not None and both.intent is Intent.UNDEPLOY
    going = told(paused, Intent.UNDEPLOY, NOW)
    assert going is not None
    again = state_of(
        record(state="DEPLOYED", serving=going.to_dict(), undeployRequested=True), NOW + MINUTE
    )
    assert again == going


def test_a_serving_map_written_before_the_machine_reads_as_its_state():
    legacy = {
        "phase": "HEDGED",
        "since": NOW.isoformat(),
        "spotDeployedModelId": "42",
        "fallbackDeployedModelId": "43",
        "fallbackReplicas": 2,
        "accountedAt": NOW.isoformat(),
        "last": {"spot": 0, "onDemand": 2, "required": 2},
        "pool": 100,
        "others": {"7": 0},
        "hedges": 1,
    }
    state = state_of(record(state="DEPLOYED", deployedModelId="42", serving=legacy), NOW)
    assert state is not None
    assert (state.phase, state.intent, state.required, state.policy) == (
        Phase.HEDGED,
        Intent.SERVE,
        2,
        ServingPolicy(),
    )
    assert state.spot == Ours(NAME, "42", 0)
    assert state.fallback == Ours(fallback_display_name(NAME), "43", 2)
    assert dict(state.others) == {"7": 0} and state.hedges == 1
    assert state.call is None


FALLBACK = fallback_display_name(NAME)


@pytest.mark.parametrize(
    ("pending", "fallback", "expected"),
    [
        (
            {"call": "DeployModel", "operation": "op/1"},
            None,
            InFlight(CallKind.DEPLOY_FALLBACK, FALLBACK, NOW, 0, "op/1"),
        ),
        (  # no operation recorded: its answer was lost, its effect is looked for
            {"call": "DeployModel"},
            None,
            InFlight(CallKind.DEPLOY_FALLBACK, FALLBACK, NOW, 0, None, True),
        ),
        ({"call": "Nope"}, None, None),
        pytest.param(
            {"call": "UndeployModel", "operation": "op/2"},
            "43",
            InFlight(CallKind.UNDEPLOY, "43", NOW, 0, "op/2"),
        ),
        pytest.param(
            {"call": "UndeployModel", "operation": "op/2"},
            None,
            InFlight(CallKind.UNDEPLOY, "42", NOW, 0, "op/2"),
        ),
        pytest.param(
            {"call": "MutateDeployedModel", "operation": "op/3"},
            "43",
            InFlight(CallKind.MUTATE, "43", NOW, 2, "op/3"),
        ),
        pytest.param(  # no fallback to resize: nothing in flight
            {"call": "MutateDeployedModel"}, None, None
        ),
    ],
)
def test_a_call_in_flight_written_before_the_machine_reads_as_one(pending, fallback, expected):
    legacy = {
        "phase": "UNDEPLOYING",
        "spotDeployedModelId": "42",
        "fallbackDeployedModelId": fallback,
        "fallbackReplicas": 2 if fallback else 0,
        "accountedAt": NOW.isoformat(),
        "last": {"spot": 2, "onDemand": 0, "required": 2},
        "pending": {**pending, "at": NOW.isoformat()},
    }
    state = ServingState.decode(legacy, spot_name=NAME)
    assert state is not None
    assert state.intent is Intent.UNDEPLOY  # it was undeploying: its intent is
    assert state.call == expected


def test_a_restore_in_flight_written_before_the_machine_ends_restored_not_paused():
    legacy = {
        "phase": "RECOVERING",
        "since": NOW.isoformat(),
        "spotDeployedModelId": "42",
        "fallbackDeployedModelId": "43",
        "fallbackReplicas": 2,
        "accountedAt": NOW.isoformat(),
        "last": {"spot": 2, "onDemand": 2, "required": 2},
        "pool": 100,
        "hedges": 1,
        "pending": {"call": "UndeployModel", "operation": "op/9", "at": NOW.isoformat()},
    }
    state = state_of(record(state="DEPLOYED", deployedModelId="42", serving=legacy), NOW)
    assert state is not None
    spot = ObservedModel("42", "m", NAME, MachineSpec("g2"), True, 2, 2)
    fallback = ObservedModel("43", "m", FALLBACK, MachineSpec("g2"), False, 2, 2)
    running = decide(state, ObservedEndpoint("e", (spot, fallback), {"42": 100}), NOW + MINUTE)
    assert running.split is None  # no traffic back to a model being undeployed
    gone = decide(running.state, ObservedEndpoint("e", (spot,), {"42": 100}), NOW + 2 * MINUTE)
    assert gone.state.phase is Phase.SERVING, gone.reason
    assert gone.notices == ("RESTORED",)


# --- the operation of a call, as the machine's input ---------------------------------------


def test_an_operation_status_reads_as_the_machines_outcome():
    assert outcome_of(OperationStatus("op/1", False)) == OperationOutcome("op/1", False)
    assert outcome_of(OperationStatus("op/1", True, "42")) == OperationOutcome("op/1", True, "42")
    failed = OperationStatus("op/1", True, error_code=8, error_message="no Spot capacity")
    assert outcome_of(failed) == OperationOutcome("op/1", True, None, "no Spot capacity")
    bare = OperationStatus("op/1", True, error_code=13)
    assert outcome_of(bare).error == "code 13"


def test_a_done_operation_moves_the_record_to_deployed_and_a_failed_one_to_failed():
    stored = record(state="DEPLOYING", operation="op/1", serving=deploying("op/1").to_dict())
    empty = ObservedEndpoint("e", (), {})
    state = state_of(stored, NOW)
    assert state is not None
    done = decide(
        state, empty, NOW + MINUTE, operation=outcome_of(OperationStatus("op/1", True, "42"))
    )
    assert done.state.spot.id == "42"
    assert projected(stored, done.state, NOW).fields["deployedModelId"] == "42"
    failed_status = OperationStatus("op/1", True, error_code=8, error_message="no Spot capacity")
    failed = decide(state, empty, NOW + MINUTE, operation=outcome_of(failed_status))
    change = projected(stored, failed.state, NOW, tuple((n, failed.reason) for n in failed.notices))
    assert (change.fields["state"], failed.notices) == ("FAILED", ("FAILED",))
    assert "no Spot capacity" in change.fields["reason"]


@pytest.mark.parametrize(
    ("stored_state", "status"),
    [
        ("DEPLOYING", OperationStatus("op/1", False)),
        ("DEPLOYING", OperationStatus("op/2", True, "1")),
    ],
    ids=["running", "another-operation"],
)
def test_nothing_changes_unless_the_records_own_operation_finished(stored_state, status):
    stored = record(state=stored_state, operation="op/1", serving=deploying("op/1").to_dict())
    state = state_of(stored, NOW)
    assert state is not None
    action = decide(
        state, ObservedEndpoint("e", (), {}), NOW + MINUTE, operation=outcome_of(status)
    )
    assert action.state == state


def test_an_ended_deployment_is_never_moved_by_a_late_operation():
    for phase in (Phase.FAILED, Phase.UNDEPLOYED):
        ended = replace(deploying("op/1"), phase=phase)
        late = decide(
            ended, ObservedEndpoint("e", (), {}), NOW, operation=OperationOutcome("op/1", True, "1")
        )
        assert late.state == ended and late.transition == "none"
