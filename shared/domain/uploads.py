"""Request files uploaded to Cloud Storage: which objects are requests, and their messages.

Under the upload prefix (``FLEXJOBS_UPLOAD_PREFIX``, default ``requests/``):

* ``.json``: one request message, exactly as on the requests topic;
* ``.jsonl``: one request message per line (blank lines ignored);
* ``.yaml`` / ``.yml``: a gcloud ``config.yaml``, which becomes a ``customJob`` message.

A message without a ``requestId`` gets ``gcs:{bucket}/{name}#{generation}`` (``:{line}``
appended for a ``.jsonl`` line, 1-based): the same event delivered twice is one request, a
re-upload (a new generation) is new requests, and a ``requestId`` in the file wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.domain.gcloud_yaml import parse_gcloud_config
from shared.domain.values import DIGITS, parse_rfc3339
from shared.errors import FieldError, InvalidRequest


class Format(StrEnum):
    """What a request file holds."""

    JSON = "json"
    JSONL = "jsonl"
    YAML = "yaml"


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

    def request_id(self, line: int | None = None) -> str:
        """The requestId of a message that names none.

        Examples:
            >>> StoredObject("b", "requests/a.jsonl", "17").request_id(3)
            'gcs:b/requests/a.jsonl#17:3'
        """
        base = f"gcs:{self.bucket}/{self.name}#{self.generation}"
        return base if line is None else f"{base}:{line}"

    @classmethod
    def of(cls, bucket: str, name: str, generation: str, resource: dict[str, Any]) -> StoredObject:
        """From an event's names and its JSON API v1 object resource (maybe empty)."""
        size = str(resource.get("size", ""))
        # Custom-Time, when the writer set one, else the update time, else the creation.
        times = (
            parse_rfc3339(resource.get(key)) for key in ("customTime", "updated", "timeCreated")
        )
        written = next((when for when in times if when is not None), None)
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


def messages(fmt: Format, data: bytes, default_request_id: str) -> list[FileMessage]:
    """Split a request file into messages, each read later exactly as a Pub/Sub message.

    Raises:
        InvalidRequest: the file as a whole cannot be read (not UTF-8, YAML that is no gcloud
            config); one bad ``.jsonl`` line is not such a problem, it fails on its own.

    Examples:
        >>> [m.line for m in messages(Format.JSONL, b'{"a": 1}\\n\\n{"b": 2}\\n', "r")]
        [1, 3]
    """
    if fmt is Format.JSON:
        return [FileMessage(data)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest([FieldError("$", f"the file is not UTF-8: {exc}")]) from exc
    if fmt is Format.YAML:
        message = parse_gcloud_config(text.removeprefix("\ufeff"), default_request_id)
        return [FileMessage(json.dumps(message).encode())]
    parts = [
        FileMessage(line.encode(), number)
        for number, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1)
        if line.strip()
    ]
    if len(parts) > MAX_FILE_REQUESTS:
        problem = f"holds {len(parts)} requests; a file may hold {MAX_FILE_REQUESTS}: split it"
        raise InvalidRequest([FieldError("$", problem)])
    return parts
