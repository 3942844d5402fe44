"""Read request files into messages, as the upload function reads them, offline.

A file holds one message (``.json``), one message a line (``.jsonl``), a gcloud
``config.yaml``, or a bare Vertex body (with ``kind``). Each message is read within the message
limit as the upload function reads it; the client library then checks each with intake's own
reader (:meth:`flexjobs.Client.check`), so what passes is what intake accepts.

Examples:
    >>> [m] = read_messages(b'{"cancel": "r1"}', "cancel.json")
    >>> m.body
    {'cancel': 'r1'}
"""

from __future__ import annotations

import json

from flexjobs.messages import Message
from shared.domain.model.kinds import KINDS
from shared.domain.request.files import Format, messages
from shared.domain.request.gcloud_yaml import DEFAULT_MAX_BYTES as DEFAULT_MAX_MESSAGE_BYTES
from shared.domain.request.reading import read_body
from shared.kernel.errors import InvalidRequest, reading_untrusted

FORMATS = ("json", "jsonl", "yaml")


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


__all__ = [
    "FORMATS",
    "KINDS",
    "Message",
    "detect_format",
    "read_messages",
]
