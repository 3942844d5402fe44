"""A refused request leaves both trails: the rejection document and the REJECTED notification."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flexjobs_local.stack import NOTIFICATIONS_TAP
from tests.events import load
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def pull_notification(stack: Any, request_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Pull the tap subscription until the notification of ``request_id`` comes (ack all)."""
    _, subscriber = stack.pubsub_clients()
    path = subscriber.subscription_path(stack.config.project, NOTIFICATIONS_TAP)

    def pull() -> tuple[dict[str, Any], dict[str, str]] | None:
        response = subscriber.pull(request={"subscription": path, "max_messages": 50}, timeout=10)
        found = None
        for received in response.received_messages:
            message = received.message
            if message.attributes.get("requestId") == request_id:
                found = (json.loads(message.data), dict(message.attributes))
        if response.received_messages:
            ack_ids = [r.ack_id for r in response.received_messages]
            subscriber.acknowledge(request={"subscription": path, "ack_ids": ack_ids})
        return found

    result: tuple[dict[str, Any], dict[str, str]] = wait_for(
        pull, what=f"the notification of {request_id}"
    )
    return result


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (
            lambda body: body["hyperparameterTuningJob"]["trialJobSpec"]["workerPoolSpecs"][
                0
            ].update(replicaCount=-2),
            "hyperparameterTuningJob.trialJobSpec.workerPoolSpecs[0].replicaCount",
        ),
        (lambda body: body.update(checkpointUri="s3://elsewhere/"), "checkpointUri"),
    ],
    ids=["negative-replicas", "bad-checkpoint-uri"],
)
def test_refused_request_has_its_rejection_document_and_notification(
    stack, db, unique, mutate, path
):
    rid = unique("refused")
    body = load("hpt_request")
    body["requestId"] = rid
    mutate(body)
    message_id = stack.publish_request(body)

    snap = wait_for(
        lambda: (s := db.collection("rejections").document(rid).get()).exists and s,
        what="the rejection document",
    )
    document = snap.to_dict()
    assert document["requestId"] == rid
    assert document["messageId"] == message_id
    assert document["source"] == "pubsub"
    assert path in [e["path"] for e in document["errors"]]
    assert all(e["message"] for e in document["errors"])
    assert json.loads(document["payloadExcerpt"]) == body
    assert document["payloadBytes"] == len(json.dumps(body).encode())

    notification, attributes = pull_notification(stack, rid)
    assert attributes == {"state": "REJECTED", "requestId": rid}
    assert notification["state"] == "REJECTED"
    assert notification["attempt"] == 0
    assert notification["errors"] == document["errors"]
    assert path in notification["reason"]
    assert list(db.collection("jobs").stream()) == []
    assert stack.simulator.calls(method="CreateHyperparameterTuningJob") == []


def test_undecodable_message_is_recorded_under_its_message_id(stack, db):
    message_id = stack.publish_request(b"\xff\xfe not utf-8")

    snap = wait_for(
        lambda: (s := db.collection("rejections").document(message_id).get()).exists and s,
        what="the rejection document",
    )
    document = snap.to_dict()
    assert document["errors"][0]["path"] == "$"
    assert "UTF-8" in document["errors"][0]["message"]
    notification, attributes = pull_notification(stack, message_id)
    assert attributes["state"] == "REJECTED"
    assert notification["errors"] == document["errors"]
