"""Sample events as JSON files, and helpers that wrap them the way Pub/Sub and Eventarc do."""

from __future__ import annotations

import base64
import copy
import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

HERE = Path(__file__).parent


def load(name: str) -> Any:
    """Load ``tests/events/<name>.json``."""
    return json.loads((HERE / f"{name}.json").read_text())


def pubsub_envelope(
    data: bytes | dict[str, Any], message_id: str = "1234567890", **attrs: str
) -> dict[str, Any]:
    """A Pub/Sub push body (the CloudEvent's data) carrying ``data``."""
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    envelope: dict[str, Any] = copy.deepcopy(load("pubsub_push_envelope"))
    envelope["message"]["data"] = base64.b64encode(raw).decode()
    envelope["message"]["messageId"] = message_id
    envelope["message"]["attributes"] = dict(attrs)
    return envelope


def pubsub_cloud_event(
    data: bytes | dict[str, Any], message_id: str = "1234567890", **attrs: str
) -> CloudEvent:
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


def object_resource(name: str, generation: str, size: int, **fields: Any) -> dict[str, Any]:
    """The JSON API v1 object resource of tests/events/storage_object_finalized.json, renamed."""
    resource: dict[str, Any] = copy.deepcopy(load("storage_object_finalized")["data"])
    bucket = resource["bucket"]
    resource.update(
        name=name,
        generation=generation,
        size=str(size),
        id=f"{bucket}/{name}/{generation}",
        **fields,
    )
    return resource


def storage_cloud_event(resource: dict[str, Any], event_type: str = "finalized") -> CloudEvent:
    """An Eventarc Cloud Storage CloudEvent (post it in binary mode, as Eventarc does)."""
    from cloudevents.http import CloudEvent

    attributes = dict(load("storage_object_finalized")["attributes"])
    attributes.update(
        type=f"google.cloud.storage.object.v1.{event_type}",
        source=f"//storage.googleapis.com/projects/_/buckets/{resource['bucket']}",
        subject=f"objects/{resource['name']}",
        bucket=resource["bucket"],
        id=f"{resource['generation']}{len(resource['name'])}",
    )
    del attributes["datacontenttype"]
    return CloudEvent(attributes, resource)


def gcs_notification(
    resource: dict[str, Any], event_type: str = "OBJECT_FINALIZE", payload: bool = True
) -> dict[str, Any]:
    """A Pub/Sub push body of a bucket notification (tests/events/gcs_notification_push.json)."""
    body: dict[str, Any] = copy.deepcopy(load("gcs_notification_push"))
    message = body["message"]
    message["attributes"].update(
        bucketId=resource["bucket"],
        objectId=resource["name"],
        objectGeneration=resource["generation"],
        eventType=event_type,
        payloadFormat="JSON_API_V1" if payload else "NONE",
    )
    data = json.dumps(resource).encode() if payload else b""
    message["data"] = base64.b64encode(data).decode()
    return body


def seed_line(request_id: str | None = None, **extra: Any) -> str:
    """The seed request as one JSON line; without ``request_id`` it names none (an upload
    then gives it ``gcs:{bucket}/{name}#{generation}[:{line}]``)."""
    body = load("seed_request")
    if request_id is None:
        del body["requestId"]
    else:
        body["requestId"] = request_id
    return json.dumps({**body, **extra})


def bad_seed_line(path: tuple[str | int, ...], value: Any) -> str:
    """The seed request as one JSON line, with no requestId and ``value`` at ``path`` under
    ``customJob``, such as ``(("jobSpec", "workerPoolSpecs", 0, "replicaCount"), "two")``."""
    body = json.loads(seed_line())
    node = body["customJob"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(body)
