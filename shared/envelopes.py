"""Envelopes: unwrap the transport (a CloudEvent carrying a Pub/Sub message) into plain values.

The CloudEvent's ``data`` is ``{"message": {"data": base64, "attributes": {...},
"messageId": ..., "publishTime": ...}, "subscription": ...}`` for Pub/Sub triggers, both in
production (Eventarc) and locally (functions-framework converts a raw push body into it).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import FieldError, InvalidRequest


@dataclass(frozen=True)
class PubsubMessage:
    """The parts of a Pub/Sub message flexjobs reads."""

    data: bytes
    message_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    publish_time: str | None = None

    @classmethod
    def from_cloud_event(cls, event: Any) -> PubsubMessage:
        """Unwrap a Pub/Sub CloudEvent (any mapping-like event with ``.data`` works).

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
        return cls(
            data=data,
            message_id=str(message_id),
            attributes={str(k): str(v) for k, v in dict(attributes).items()},
            publish_time=message.get("publishTime") or message.get("publish_time"),
        )
