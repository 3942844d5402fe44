"""Derive Firestore document ids and Vertex label values from a requestId.

Both mappings are injective: two different requestIds never share a document id, a label
value, a run id or a rejection id. Each maps a requestId either to a *readable* form or to a
*hashed* form, and the two ranges are kept disjoint by refusing the readable form to any
requestId that looks like a hashed one (it is hashed instead).

Document ids: ``%`` becomes ``%25`` and ``/`` becomes ``%2F`` (reversible, so readable ids never
collide); an id that is empty, ``.``, ``..``, shaped ``__x__``, longer than 200 bytes once
escaped, or that starts with ``sha256-`` (the hashed form's prefix) becomes
``sha256-<64 hex>`` of the original. The original is always kept in the record's ``requestId``.

Label values (``flexjobs-request``, also the run id): Vertex labels allow at most 63 characters
of lowercase letters, digits, ``-`` and ``_``. A requestId that already fits is used as it is,
unless it ends like a hashed value (16 hex digits, alone or after ``-``); otherwise the value is
a sanitised prefix plus ``-`` and 16 hex digits of its SHA-256 (``Team/Run 7`` becomes
``team-run-7-<16 hex>``), and the requestId ``team-run-7-<16 hex>`` itself is hashed too.
"""

from __future__ import annotations

import hashlib
import re

from shared.kernel.errors import FieldError

#: The Vertex labels that identify one attempt of one request: the idempotency key.
LABEL_REQUEST = "flexjobs-request"
LABEL_ATTEMPT = "flexjobs-attempt"
#: Which delivery's create made the job: its claim's token (32 hex digits). Not part of the
#: key (a lookup matches the two labels above): it lets the tick tell, while a claim is live
#: and nothing is recorded, the live holder's own job from one an expired claim's create left.
LABEL_CLAIM = "flexjobs-claim"

MAX_DOC_ID_BYTES = 200
#: The longest requestId flexjobs takes, in UTF-8 bytes. It is copied into the record, its
#: notifications (each kept ``notified``), the outbox, the rejection and the status page's
#: links and cursors: bounded here, none of them can grow a record past Firestore's 1 MiB.
MAX_REQUEST_ID_BYTES = 1500
MAX_LABEL_CHARS = 63
_LABEL_OK = re.compile(r"[a-z0-9_-]{1,63}")
_LABEL_BAD_CHARS = re.compile(r"[^a-z0-9_-]+")
_RESERVED_DOC_ID = re.compile(r"__.*__", re.DOTALL)
HASHED_DOC_PREFIX = "sha256-"
# The shape of every hashed label value: 16 hex digits, alone or after a "-".
_HASHED_LABEL = re.compile(r"(?:.*-)?[0-9a-f]{16}", re.DOTALL)


def check_request_id(request_id: str, path: str = "requestId") -> list[FieldError]:
    """The problem with a requestId that is too long, else nothing.

    Examples:
        >>> check_request_id("seed-1")
        []
        >>> check_request_id("é" * 751)[0].message
        'is 1502 bytes in UTF-8; a requestId may have at most 1500'
    """
    try:
        size = len(request_id.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate ("\ud800"): legal JSON, but no document id, label or UTF-8 text.
        return [FieldError(path, "is not valid Unicode (it holds a lone surrogate)")]
    if size <= MAX_REQUEST_ID_BYTES:
        return []
    return [FieldError(path, f"is {size} bytes in UTF-8; a requestId may have at most 1500")]


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
    if (
        not escaped
        or escaped in {".", ".."}
        or _RESERVED_DOC_ID.fullmatch(escaped)
        or too_long
        or escaped.startswith(HASHED_DOC_PREFIX)
    ):
        return f"{HASHED_DOC_PREFIX}{_sha256(request_id)}"
    return escaped


def label_value(value: str) -> str:
    """Return a Vertex-label-safe form of ``value`` (see the module docstring).

    Examples:
        >>> label_value("seed-1")
        'seed-1'
        >>> label_value("Seed 1")[:7]
        'seed-1-'
        >>> label_value(label_value("Seed 1")) == label_value("Seed 1")
        False
    """
    if _LABEL_OK.fullmatch(value) and not _HASHED_LABEL.fullmatch(value):
        return value
    cleaned = _LABEL_BAD_CHARS.sub("-", value.lower()).strip("-")[: MAX_LABEL_CHARS - 17]
    digest = _sha256(value)[:16]
    return f"{cleaned}-{digest}" if cleaned else digest


def labels_for(request_id: str, attempt: int) -> dict[str, str]:
    """The Vertex labels of one attempt of one request.

    Examples:
        >>> labels_for("seed-1", 2)
        {'flexjobs-request': 'seed-1', 'flexjobs-attempt': '2'}
    """
    return {LABEL_REQUEST: label_value(request_id), LABEL_ATTEMPT: str(attempt)}
