"""Read request files and validate them exactly as ``handle_job_request`` does, offline.

A file holds one message (``.json``), one message a line (``.jsonl``), a gcloud
``config.yaml``, or a bare Vertex body (with ``kind``). Each message is read within the message
limit as the upload function reads it, and checked by intake's own reader
(:func:`shared.domain.request.reading.read_message`, with
:func:`shared.domain.request.validation.validators`), so what passes here is what intake accepts.

Examples:
    >>> from shared.kernel.config import Settings
    >>> [m] = read_messages(b'{"cancel": "r1"}', "cancel.json")
    >>> check(m, Settings(project=""), now=datetime(2026, 11, 30, tzinfo=UTC))
    []
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.domain.model.kinds import KINDS
from shared.domain.request.files import Format, messages
from shared.domain.request.gcloud_yaml import DEFAULT_MAX_BYTES as DEFAULT_MAX_MESSAGE_BYTES
from shared.domain.request.message import parse_request
from shared.domain.request.reading import is_cancel, read_body, read_message
from shared.domain.request.schedule import SCHEDULE_TIME_ATTRIBUTE
from shared.domain.request.validation import Guards, validators
from shared.kernel.config import Settings
from shared.kernel.errors import FieldError, InvalidRequest, reading_untrusted

FORMATS = ("json", "jsonl", "yaml")


@dataclass
class Message:
    """One message of a file: its body (None when unreadable) and where it came from."""

    body: dict[str, Any] | None
    line: int | None = None
    errors: list[FieldError] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)

    def where(self, error: FieldError) -> str:
        """``line 3: path: message`` (the line only for a ``.jsonl``)."""
        text = f"{error.path}: {error.message}"
        return f"line {self.line}: {text}" if self.line is not None else text


def detect_format(name: str, text: str) -> str:
    """The format of a file from its name, or for ``-`` from its content."""
    lowered = name.lower()
    if lowered.endswith(".jsonl"):
        return "jsonl"
    if lowered.endswith((".yaml", ".yml")):
        return "yaml"
    if lowered.endswith(".json"):
        return "json"
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return "yaml"
    try:
        json.loads(text)
    except ValueError:
        return "jsonl"
    return "json"


def read_messages(
    data: bytes,
    name: str,
    *,
    kind: str | None = None,
    fmt: str | None = None,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> list[Message]:
    """The messages of a file, split and read by the upload function's own reader
    (:func:`shared.domain.request.files.messages`: the same lines, BOM and limits), each
    within ``max_bytes`` as intake reads it (:func:`shared.domain.request.reading.read_body`);
    unreadable ones carry their errors instead of a body, and so does a file that cannot be
    read."""
    fmt = fmt or detect_format(name, data.decode("utf-8", errors="replace"))
    try:
        with reading_untrusted("the file"):
            parts = messages(Format(fmt), data, None, max_bytes=max_bytes)
    except InvalidRequest as err:
        return [Message(None, errors=list(err.errors))]
    # A YAML file is a CustomJobSpec, never a bare body of another kind.
    wrap = None if fmt == "yaml" else kind
    return [_decode(part.data, wrap, part.line, max_bytes) for part in parts]


def _decode(data: bytes, kind: str | None, line: int | None, max_bytes: int) -> Message:
    try:
        with reading_untrusted("the message"):
            body = read_body(data, max_bytes)
    except InvalidRequest as err:
        return Message(None, line=line, errors=list(err.errors))
    if kind is not None:
        body = {kind: body}
    return Message(body, line=line)


def assign_request_id(message: Message, request_id: str | None) -> None:
    """Give a message the requestId it is published under, set both as field and attribute.

    ``request_id`` wins; else the body's own; else a fresh ``cli-<uuid>``. A cancel keeps its
    target as the attribute.
    """
    body = message.body
    if body is None:
        return
    if is_cancel(body):
        target = body.get("cancel")
        if isinstance(target, str):
            message.attributes["requestId"] = target
        return
    if request_id is not None:
        body["requestId"] = request_id
    elif "requestId" not in body:
        # Only when the file names none: a malformed one stays, for check() to refuse it.
        body["requestId"] = f"cli-{uuid.uuid4()}"
    if isinstance(body["requestId"], str):
        message.attributes["requestId"] = body["requestId"]


def stamp_schedule_time(message: Message, now: datetime) -> None:
    """A scheduled request is expanded for ``now``: the requestId printed is the one used."""
    if message.body is not None and "schedule" in message.body:
        message.attributes[SCHEDULE_TIME_ATTRIBUTE] = rfc3339(now)


def check(message: Message, settings: Settings, now: datetime) -> list[FieldError]:
    """Every problem intake would find in this message ([] when it would be accepted): it is
    read by intake's own reader (:func:`shared.domain.request.reading.read_message`) in the
    form it is published (client.publish's compact encoding, with its attributes)."""
    if message.body is None:
        return message.errors
    data = json.dumps(message.body, separators=(",", ":")).encode("utf-8")
    try:
        read_message(
            data,
            message.attributes,
            "cli-validate",
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


__all__ = [
    "FORMATS",
    "KINDS",
    "Message",
    "assign_request_id",
    "check",
    "detect_format",
    "read_messages",
    "request_id_of",
    "rfc3339",
    "stamp_schedule_time",
]
