"""What a delivery carries, as plain values: the commands hold these, never a transport's
envelope (the ingress unwraps a CloudEvent into them, :mod:`shared.ingress.envelopes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """One delivered message: a request or a state hint from Pub/Sub, or one request of an
    uploaded file (its line's bytes, and the object's write time as the publish time)."""

    data: bytes
    message_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    # RFC 3339, as the transport gave it (None: it gave none).
    publish_time: str | None = None


@dataclass(frozen=True)
class ObjectEvent:
    """A Cloud Storage object event, whichever way it came (an Eventarc storage event, or a
    bucket's Pub/Sub notification).

    ``finalized`` is False for every other event (deletes, metadata updates, archives), which
    flexjobs only acknowledges. ``resource`` is the JSON API v1 object resource when the event
    carries one ({} for a notification with ``payloadFormat=NONE``).
    """

    finalized: bool
    event_type: str
    bucket: str = ""
    name: str = ""
    generation: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
