"""Request files uploaded to Cloud Storage: which objects are requests, and their messages.

Under the upload prefix (``FLEXJOBS_UPLOAD_PREFIX``, default ``requests/``):

* ``.json``: one request message, exactly as on the requests topic;
* ``.jsonl``: one request message per line (blank lines ignored);
* ``.yaml`` / ``.yml``: a gcloud ``config.yaml``, which becomes a ``customJob`` message.

A message without a ``requestId`` gets an id derived from its content:
``gcs:{bucket}/{name}#sha256:{digest}``, the digest being that of the file's bytes, and for a
``.jsonl`` line that of the line's bytes with ``:{line}`` (1-based) appended. So the same
event delivered twice is one request, and so is a rewrite, copy, restore or re-upload of the
same bytes (each a new generation: GCS finalizes one for a storage-class change too); a file
whose bytes changed is new requests (in a ``.jsonl``, only the lines that changed); and a
``requestId`` in the file wins. A file refused unread (too large, compressed) has no bytes to
digest: its one rejection is ``gcs:{bucket}/{name}#{generation}``.

This module is the one reader of request files: ``handle_upload`` and the ``flexjobs`` command
split and decode them with :func:`messages`, so both see the same lines and the same limits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.domain.model.values import DIGITS, object_time, parse_rfc3339
from shared.domain.request.gcloud_yaml import parse_gcloud_config
from shared.kernel.errors import FieldError, InvalidRequest


class Format(StrEnum):
    """What a request file holds."""

    JSON = "json"
    JSONL = "jsonl"
    YAML = "yaml"


#: Hex digits of a content digest in a default requestId: 128 bits, so two different files
#: (or lines) never share an id in practice, and the id stays well inside its 1,500 bytes.
DIGEST_CHARS = 32

#: Requests one file may hold. Each is submitted inline (a claim, a Vertex create, a record),
#: so this keeps one file well inside the function's timeout; split a longer list.
MAX_FILE_REQUESTS = 1000

_SUFFIXES = {".json": Format.JSON, ".jsonl": Format.JSONL, ".yaml": Format.YAML}
_SUFFIXES[".yml"] = Format.YAML


@dataclass(frozen=True)
class StoredObject:
    """One generation of an uploaded object, as its finalize event describes it."""

    bucket: str
    name: str
    generation: str
    size: int | None = None
    # When it was written: Custom-Time when the writer set one, else the update time.
    written_at: datetime | None = None
    # Content-Encoding (``gzip``): such an object is stored compressed.
    content_encoding: str | None = None

    @property
    def uri(self) -> str:
        """``gs://bucket/name#generation``: the object as recorded on jobs and rejections."""
        return f"gs://{self.bucket}/{self.name}#{self.generation}"

    def request_id(self, data: bytes | None = None, line: int | None = None) -> str:
        """The requestId of a message that names none: from the bytes it was read from (the
        file's, or its line's), or, for a file not read, from its generation.

        Examples:
            >>> StoredObject("b", "requests/a.jsonl", "17").request_id(b'{}', 3)[:50]
            'gcs:b/requests/a.jsonl#sha256:44136fa355b3678a1146'
            >>> StoredObject("b", "requests/a.json", "17").request_id()
            'gcs:b/requests/a.json#17'
        """
        if data is None:
            return f"gcs:{self.bucket}/{self.name}#{self.generation}"
        digest = hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]
        base = f"gcs:{self.bucket}/{self.name}#sha256:{digest}"
        return base if line is None else f"{base}:{line}"

    @classmethod
    def of(
        cls, bucket: str, name: str, generation: str, resource: dict[str, Any], now: datetime
    ) -> StoredObject:
        """From an event's names and its JSON API v1 object resource (maybe empty)."""
        size = str(resource.get("size", ""))
        custom, updated, created = (
            parse_rfc3339(resource.get(key)) for key in ("customTime", "updated", "timeCreated")
        )
        written = object_time(custom, updated, created, now)
        encoding = resource.get("contentEncoding")
        return cls(
            bucket,
            name,
            generation,
            size=int(size) if DIGITS.fullmatch(size) else None,
            written_at=written,
            content_encoding=encoding if isinstance(encoding, str) and encoding else None,
        )


def request_format(name: str, prefix: str) -> Format | None:
    """The format of a request file, or None when the object is not one.

    Examples:
        >>> request_format("requests/nightly.jsonl", "requests/")
        <Format.JSONL: 'jsonl'>
        >>> request_format("elsewhere/a.json", "requests/") is None
        True
    """
    if not name.startswith(prefix) or name.endswith("/"):
        return None
    dot = name.rfind(".")
    return _SUFFIXES.get(name[dot:].lower()) if dot > name.rfind("/") else None


@dataclass(frozen=True)
class FileMessage:
    """One request message of a file: its bytes, and its line in a ``.jsonl`` (else None)."""

    data: bytes
    line: int | None = None


def messages(
    fmt: Format, data: bytes, default_request_id: str | None, *, max_bytes: int
) -> list[FileMessage]:
    """Split a request file into messages, each read later exactly as a Pub/Sub message.

    ``default_request_id`` is what a YAML file's message is named (it has no field for one);
    ``max_bytes`` bounds what a YAML file may expand to (the message limit).

    Raises:
        InvalidRequest: the file as a whole cannot be read (not UTF-8, YAML that is no gcloud
            config, too many requests); one bad ``.jsonl`` line is not such a problem, it fails
            on its own.

    Examples:
        >>> data = b'{"a": 1}\\n\\n{"b": 2}\\n'
        >>> [m.line for m in messages(Format.JSONL, data, "r", max_bytes=99)]
        [1, 3]
    """
    if fmt is Format.JSON:
        return [FileMessage(data)]
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise InvalidRequest([FieldError("$", f"the file is not UTF-8: {exc}")]) from exc
    if fmt is Format.YAML:
        message = parse_gcloud_config(text, default_request_id, max_bytes=max_bytes)
        return [FileMessage(json.dumps(message).encode())]
    # Lines end at "\n" only (a "\r" before it is JSON whitespace): str.splitlines() would also
    # split at U+2028 and others, which a JSON string may hold as they are.
    parts = [
        FileMessage(line.encode(), number)
        for number, line in enumerate(text.split("\n"), start=1)
        if line.strip()
    ]
    if len(parts) > MAX_FILE_REQUESTS:
        problem = f"holds {len(parts)} requests; a file may hold {MAX_FILE_REQUESTS}: split it"
        raise InvalidRequest([FieldError("$", problem)])
    return parts
