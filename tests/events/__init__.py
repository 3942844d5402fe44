"""Sample events as JSON files, and helpers that wrap them the way Pub/Sub and Eventarc do."""

from __future__ import annotations

import base64
import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def load(name: str) -> Any:
    """Load ``tests/events/<name>.json``."""
    return json.loads((HERE / f"{name}.json").read_text())


def pubsub_envelope(data: bytes | dict[str, Any], message_id: str = "1234567890", **attrs: str):
    """A Pub/Sub push body (the CloudEvent's data) carrying ``data``."""
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    envelope = copy.deepcopy(load("pubsub_push_envelope"))
    envelope["message"]["data"] = base64.b64encode(raw).decode()
    envelope["message"]["messageId"] = message_id
    envelope["message"]["attributes"] = dict(attrs)
    return envelope


def pubsub_cloud_event(data: bytes | dict[str, Any], message_id: str = "1234567890", **attrs):
    """A structured-mode CloudEvent of type google.cloud.pubsub.topic.v1.messagePublished."""
    from cloudevents.http import CloudEvent

    return CloudEvent(
        {
            "type": "google.cloud.pubsub.topic.v1.messagePublished",
            "source": "//pubsub.googleapis.com/projects/flexjobs-local/topics/job-requests",
            "id": message_id,
        },
        pubsub_envelope(data, message_id, **attrs),
    )


def published_at(event: Any, when: datetime) -> Any:
    """Set the Pub/Sub ``publishTime`` of a :func:`pubsub_cloud_event` (hints are judged by it)."""
    event.data["message"]["publishTime"] = when.isoformat().replace("+00:00", "Z")
    return event
