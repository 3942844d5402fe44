"""Derive Firestore document ids and Vertex label values from a requestId.

Document ids: ``%`` becomes ``%25`` and ``/`` becomes ``%2F`` (so the mapping is reversible and
never collides); an id that is empty, ``.``, ``..``, shaped ``__x__`` or longer than 200 bytes
once escaped becomes ``sha256-<64 hex>`` of the original. The original is always kept in the
record's ``requestId`` field.

Label values (``flexjobs-request``): Vertex labels allow at most 63 characters of lowercase
letters, digits, ``-`` and ``_``. A requestId that already fits is used as it is; otherwise the
value is a sanitised prefix plus ``-`` and 16 hex digits of its SHA-256, so two requestIds that
sanitise alike still get different labels.
"""

from __future__ import annotations

import hashlib
import re

MAX_DOC_ID_BYTES = 200
MAX_LABEL_CHARS = 63
_LABEL_OK = re.compile(r"^[a-z0-9_-]{1,63}$")
_LABEL_BAD_CHARS = re.compile(r"[^a-z0-9_-]+")
_RESERVED_DOC_ID = re.compile(r"^__.*__$")


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def doc_id(request_id: str) -> str:
    """Return the Firestore document id for ``request_id``.

    Examples:
        >>> doc_id("seed-1")
        'seed-1'
        >>> doc_id("team/a%b")
        'team%2Fa%25b'
    """
    escaped = request_id.replace("%", "%25").replace("/", "%2F")
    too_long = len(escaped.encode("utf-8")) > MAX_DOC_ID_BYTES
    if not escaped or escaped in {".", ".."} or _RESERVED_DOC_ID.match(escaped) or too_long:
        return f"sha256-{_sha256(request_id)}"
    return escaped


def label_value(value: str) -> str:
    """Return a Vertex-label-safe form of ``value`` (see the module docstring).

    Examples:
        >>> label_value("seed-1")
        'seed-1'
        >>> label_value("Seed 1")[:7]
        'seed-1-'
    """
    if _LABEL_OK.match(value):
        return value
    cleaned = _LABEL_BAD_CHARS.sub("-", value.lower()).strip("-")[: MAX_LABEL_CHARS - 17]
    digest = _sha256(value)[:16]
    return f"{cleaned}-{digest}" if cleaned else digest
