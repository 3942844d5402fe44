"""Firestore's own rules for what a document holds, as the fakes keep them: copies in and
out, sequences read back as lists, nested maps merged by ``set(merge=True)``, fields chosen by
``select()``, and the 1 MiB bound."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc


def as_stored(value: Any) -> Any:
    """A value as Firestore keeps it: a deep copy, with every sequence read back as a list."""
    if isinstance(value, Mapping):
        return {key: as_stored(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [as_stored(item) for item in value]
    return value


#: Firestore's largest document (https://firebase.google.com/docs/firestore/quotas).
MAX_DOCUMENT_BYTES = 1_048_576


def _value_size(value: Any) -> int:
    """A value's storage size, as Firestore counts it
    (https://firebase.google.com/docs/firestore/storage-size)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", errors="surrogatepass")) + 1
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_value_size(str(k)) + _value_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(_value_size(item) for item in value)
    return 16  # a reference or a geo point


def document_size(path: str, document: Mapping[str, Any]) -> int:
    """A document's storage size: its name (each path segment, plus 16), its fields, and 32."""
    name = sum(len(part.encode("utf-8")) + 1 for part in path.split("/")) + 16
    return name + _value_size(document) + 32


def check_size(path: str, document: Mapping[str, Any]) -> None:
    """Refuse a document over 1 MiB as Firestore does (INVALID_ARGUMENT)."""
    size = document_size(path, document)
    if size > MAX_DOCUMENT_BYTES:
        raise gexc.InvalidArgument(
            f"Document {path} cannot be written because its size ({size:,} bytes) exceeds the "
            f"maximum allowed size of {MAX_DOCUMENT_BYTES:,} bytes."
        )


def merge(target: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Firestore's ``set(..., merge=True)``: nested maps merge key by key."""
    for key, value in fields.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = as_stored(value)


def select(document: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """Firestore's ``select()``: only the fields asked for, those the document has."""
    return {name: copy.deepcopy(document[name]) for name in fields if name in document}
