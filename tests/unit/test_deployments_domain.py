"""Spot deployments: the idempotency tag and the forward-only operation observation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.domain.decisions.deploy_model import (
    OperationStatus,
    carries_tag,
    deployment_tag,
    observe_operation,
    tagged_display_name,
)
from shared.domain.model.records import DeploymentRecord
from shared.domain.request.message import MAX_DISPLAY_NAME

# The decisions read records decoded; these tests write them as stored documents.
_observe = observe_operation


def observe_operation(record, status, now):
    return _observe(DeploymentRecord.decode(record), status, now)


NOW = datetime(2025, 1, 1, tzinfo=UTC)


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


def test_tag_of_one_request_never_matches_another():
    tagged = tagged_display_name("served", "a")
    assert carries_tag(tagged, "a")
    assert not carries_tag(tagged, "b")
    assert not carries_tag(tagged_display_name("served", "x a"), "a")
    assert not carries_tag("served", "a")


def test_done_operation_moves_deploying_to_deployed():
    record = {"state": "DEPLOYING", "operation": "op/1"}
    change = observe_operation(record, OperationStatus("op/1", True, deployed_model_id="42"), NOW)
    message = {
        "requestId": "",
        "state": "DEPLOYED",
        "attempt": 0,
        "reason": None,
        "kind": "deployModel",
        "at": NOW.isoformat(),
    }
    assert change.fields == {
        "state": "DEPLOYED",
        "deployedModelId": "42",
        "updatedAt": NOW,
        "deployedAt": NOW,
        "outbox": [message],
        "outboxPending": True,
    }


def test_failed_operation_moves_deploying_to_failed_with_the_reason():
    record = {"state": "DEPLOYING", "operation": "op/1"}
    status = OperationStatus("op/1", True, error_code=8, error_message="no Spot capacity")
    change = observe_operation(record, status, NOW)
    assert change is not None
    assert (change.fields["state"], change.fields["reason"], change.fields["errorCode"]) == (
        "FAILED",
        "no Spot capacity",
        8,
    )


@pytest.mark.parametrize(
    ("record", "status"),
    [
        ({"state": "DEPLOYING", "operation": "op/1"}, OperationStatus("op/1", False)),
        ({"state": "DEPLOYING", "operation": "op/1"}, OperationStatus("op/2", True, "1")),
        ({"state": "DEPLOYED", "operation": "op/1"}, OperationStatus("op/1", True, "1")),
        (
            {"state": "FAILED", "operation": "op/1"},
            OperationStatus("op/1", True, deployed_model_id="1"),
        ),
    ],
    ids=["running", "another-operation", "already-deployed", "already-failed"],
)
def test_nothing_changes_unless_the_records_own_operation_finished(record, status):
    assert observe_operation(record, status, NOW) is None
