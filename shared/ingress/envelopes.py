"""Envelopes: unwrap the transport (a CloudEvent carrying a Pub/Sub message) into plain values
(:mod:`shared.domain.model.delivery`), which the commands carry.

The CloudEvent's ``data`` is ``{"message": {"data": base64, "attributes": {...},
"messageId": ..., "publishTime": ...}, "subscription": ...}`` for Pub/Sub triggers, both in
production (Eventarc) and locally (functions-framework converts a raw push body into it).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from shared.domain.model.delivery import Delivery, ObjectEvent
from shared.domain.model.values import DIGITS
from shared.kernel.errors import FieldError, InvalidRequest


def unwrap_message(event: Any) -> Delivery:
    """The Pub/Sub message a CloudEvent carries (any mapping-like event with ``.data`` works).

    Raises:
        InvalidRequest: when the event carries no Pub/Sub message; redelivery cannot help.
    """
    payload = getattr(event, "data", None)
    message = payload.get("message") if isinstance(payload, Mapping) else None
    if not isinstance(message, Mapping):
        raise InvalidRequest([FieldError("message", "the event carries no Pub/Sub message")])
    try:
        data = base64.b64decode(message.get("data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidRequest([FieldError("message.data", f"not base64: {exc}")]) from exc
    attributes = message.get("attributes") or {}
    message_id = message.get("messageId") or message.get("message_id") or event["id"]
    return Delivery(
        data=data,
        message_id=str(message_id),
        attributes={str(k): str(v) for k, v in dict(attributes).items()},
        publish_time=message.get("publishTime") or message.get("publish_time"),
    )


#: The CloudEvent types of a Cloud Storage object event, by the way it is delivered.
FINALIZED = "google.cloud.storage.object.v1.finalized"
PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
#: A GCS Pub/Sub notification's ``eventType`` attribute for a new object.
OBJECT_FINALIZE = "OBJECT_FINALIZE"


def unwrap_object_event(event: Any) -> ObjectEvent:
    """The object event either delivery carries: an Eventarc storage CloudEvent, or a Pub/Sub
    notification of the bucket (its message attributes name the object).

    Raises:
        InvalidRequest: a finalize that does not name its bucket, object and generation;
            redelivery cannot help.
    """
    kind = str(event["type"])
    if kind == PUBSUB_PUBLISHED:
        return _from_notification(unwrap_message(event))
    if not kind.startswith("google.cloud.storage.object.v1."):
        return ObjectEvent(finalized=False, event_type=kind)
    data = getattr(event, "data", None)
    resource = dict(data) if isinstance(data, Mapping) else {}
    subject = _attribute(event, "subject") or ""
    source = _attribute(event, "source") or ""
    return _checked(
        kind == FINALIZED,
        kind,
        bucket=str(resource.get("bucket") or source.rpartition("/buckets/")[2]),
        name=str(resource.get("name") or subject.removeprefix("objects/")),
        generation=str(resource.get("generation") or ""),
        resource=resource,
    )


def _from_notification(message: Delivery) -> ObjectEvent:
    attributes = message.attributes
    kind = attributes.get("eventType", "")
    resource: dict[str, Any] = {}
    if attributes.get("payloadFormat") == "JSON_API_V1":
        try:
            decoded = json.loads(message.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            decoded = None  # the attributes still name the object
        resource = decoded if isinstance(decoded, dict) else {}
    return _checked(
        kind == OBJECT_FINALIZE,
        kind,
        bucket=attributes.get("bucketId", ""),
        name=attributes.get("objectId", ""),
        generation=attributes.get("objectGeneration", ""),
        resource=resource,
    )


def _checked(finalized: bool, kind: str, **fields: Any) -> ObjectEvent:
    made = ObjectEvent(finalized=finalized, event_type=kind, **fields)
    if finalized and not (made.bucket and made.name and DIGITS.fullmatch(made.generation)):
        problem = "a finalize event must name the bucket, the object and its generation"
        raise InvalidRequest([FieldError("data", problem)])
    return made


def _attribute(event: Any, name: str) -> str | None:
    try:
        value = event[name]
    except (KeyError, TypeError):
        return None
    return str(value) if value is not None else None
