"""One request message as it is published: its requestId, its attributes, and the check that
reads it exactly as intake will (:func:`shared.domain.request.reading.read_message`, with
:func:`shared.domain.request.validation.validators`), so what passes here is what intake
accepts.

Examples:
    >>> from shared.kernel.config import Settings
    >>> now = datetime(2026, 11, 30, tzinfo=UTC)
    >>> m = Message({"cancel": "r1"})
    >>> assign_request_id(m, None), m.attributes
    (None, {'requestId': 'r1'})
    >>> check(m, Settings(project=""), now)
    []
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.adapters.pubsub import bounded_attribute
from shared.domain.request.message import parse_request
from shared.domain.request.reading import is_cancel, read_message
from shared.domain.request.schedule import SCHEDULE_TIME_ATTRIBUTE
from shared.domain.request.validation import Guards, validators
from shared.kernel.config import Settings
from shared.kernel.errors import FieldError, InvalidRequest

#: A requestId the publisher did not name: this prefix, then a fresh UUID.
DEFAULT_ID_PREFIX = "flexjobs"


@dataclass
class Message:
    """One message: its body (None when unreadable), where it came from, its attributes."""

    body: dict[str, Any] | None
    line: int | None = None
    errors: list[FieldError] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)

    def where(self, error: FieldError) -> str:
        """``line 3: path: message`` (the line only for a ``.jsonl``)."""
        text = f"{error.path}: {error.message}"
        return f"line {self.line}: {text}" if self.line is not None else text

    @property
    def data(self) -> bytes:
        """The bytes published: compact JSON, as intake's size bound counts them."""
        return encode(self.body or {})


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def assign_request_id(
    message: Message, request_id: str | None, prefix: str = DEFAULT_ID_PREFIX
) -> None:
    """Give a message the requestId it is published under, set both as field and attribute.

    ``request_id`` wins; else the body's own; else a fresh ``<prefix>-<uuid>``. A cancel keeps
    its target as the attribute. The attribute is cut to Pub/Sub's 1,024 bytes (the body's
    field, which intake reads first, keeps the whole id).
    """
    body = message.body
    if body is None:
        return
    if is_cancel(body):
        target = body.get("cancel")
        if isinstance(target, str):
            message.attributes["requestId"] = bounded_attribute(target)
        return
    if request_id is not None:
        body["requestId"] = request_id
    elif "requestId" not in body:
        # Only when the message names none: a malformed one stays, for check() to refuse it.
        body["requestId"] = f"{prefix}-{uuid.uuid4()}"
    if isinstance(body["requestId"], str):
        message.attributes["requestId"] = bounded_attribute(body["requestId"])


def stamp_schedule_time(message: Message, now: datetime) -> None:
    """A scheduled request is expanded for ``now``: the requestId returned is the one used."""
    if message.body is not None and "schedule" in message.body:
        message.attributes[SCHEDULE_TIME_ATTRIBUTE] = rfc3339(now)


def check(message: Message, settings: Settings, now: datetime) -> list[FieldError]:
    """Every problem intake would find in this message ([] when it would be accepted): it is
    read by intake's own reader in the form it is published (:attr:`Message.data`, with its
    attributes)."""
    if message.body is None:
        return message.errors
    try:
        read_message(
            message.data,
            message.attributes,
            "client-validate",
            rfc3339(now),
            max_bytes=settings.max_message_bytes,
            validators=validators(Guards.from_settings(settings)),
            clock=lambda: now,
        )
    except InvalidRequest as err:
        return list(err.errors)
    return []


def request_id_of(message: Message, now: datetime) -> str:
    """The requestId intake will give the message (a scheduled template expanded for now)."""
    body = message.body or {}
    if is_cancel(body):
        return str(body.get("cancel"))
    try:
        return parse_request(body, message.attributes, "", rfc3339(now)).request_id
    except InvalidRequest:
        return str(body.get("requestId") or message.attributes.get("requestId") or "")


def rfc3339(when: datetime) -> str:
    """``2026-11-30T02:00:00.123456Z``: UTC, RFC 3339."""
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
