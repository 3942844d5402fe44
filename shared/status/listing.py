"""Listing records a page at a time: the filters a query string may give, the cursor of the
next page, and the fields each view reads (pure).

Lists are newest first by ``createdAt``, ties broken by document id, so a cursor (the last
row's ``createdAt`` and requestId) names an exact place and no row is shown twice or skipped
when records are added meanwhile. Every value read from a query string is checked here
before it reaches a query: unknown parameters, states that do not exist, ages and sizes out
of range and cursors that do not decode are refused, all problems at once.

Examples:
    >>> from datetime import UTC
    >>> now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    >>> asked = read_filters({"state": ["RUNNING"], "age": ["24h"]}, now=now)
    >>> asked.listing.states, asked.listing.since.isoformat(), asked.listing.size
    (('RUNNING',), '2026-11-29T12:00:00+00:00', 100)
    >>> try:
    ...     read_filters({"age": ["soon"], "state": ["DONE"], "x": ["1"]}, now=now)
    ... except InvalidRequest as refused:
    ...     print([e.path for e in refused.errors])
    ['x', 'state', 'age']
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from shared.domain.model.ids import MAX_REQUEST_ID_BYTES, check_request_id
from shared.domain.model.states import JobState
from shared.domain.model.values import parse_rfc3339, show
from shared.kernel.errors import FieldError, InvalidRequest

JOB_STATES: Final = tuple(state.value for state in JobState)
#: Rows per page when the query string names no ``limit``, and the most it may name.
DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 1000
#: The oldest ``age`` a filter may ask for.
MAX_AGE: Final = timedelta(days=366)
_AGE: Final = re.compile(r"([0-9]{1,6})([mhd])")
_UNITS: Final = {"m": 60, "h": 3600, "d": 86400}
#: A cursor token is short: a time and a requestId (at most MAX_REQUEST_ID_BYTES, each byte
#: at worst 6 once JSON escapes it: \u0001), as UTF-8 JSON, base64url (4 characters for 3).
_MAX_TOKEN: Final = 4 * (6 * MAX_REQUEST_ID_BYTES + 64) // 3 + 4

#: The fields each view reads (Firestore ``select()``): what it shows, nothing more (the status
#: page's list, and ``flexjobs list``, which shows the location too).
LIST_FIELDS: Final = (
    "requestId",
    "displayName",
    "kind",
    "state",
    "attempt",
    "acceleratorType",
    "gpus",
    "strategy",
    "location",
    "createdAt",
    "attemptSubmittedAt",
    "attemptStartedAt",
    "vertexCreateTime",
    "vertexJob",
    "queuedSeconds",
    "runningSeconds",
    "gpuSeconds",
    "cost",
)
JOB_FIELDS: Final = (
    *LIST_FIELDS,
    "reason",
    "baseLocation",
    "vertexState",
    "maxWaitSeconds",
    "updatedAt",
    "endedAt",
    "workLostSeconds",
    "latestCheckpoint",
    "progress",
    "retries",
    "lastFailureClass",
    "nextAttemptAt",
    "cancelRequested",
    "source",
    "object",
    "line",
    "series",
    "slot",
    "outbox",
    "notified",
    "admission",
)
ATTEMPT_FIELDS: Final = (
    "attempt",
    "vertexJob",
    "state",
    "vertexState",
    "strategy",
    "location",
    "submittedAt",
    "startedAt",
    "endedAt",
    "resumedFrom",
    "errorCode",
    "errorMessage",
    "errorClass",
    "queuedSeconds",
    "runningSeconds",
    "gpuSeconds",
    "cost",
    "workLostSeconds",
)
#: What the totals add up, of the jobs ended in the window.
TOTAL_FIELDS: Final = ("endedAt", "gpuSeconds", "cost")
DEPLOYMENT_LIST_FIELDS: Final = (
    "requestId",
    "displayName",
    "state",
    "endpoint",
    "model",
    "spot",
    "createdAt",
    "deployedAt",
    "endedAt",
    "reason",
    # What the tick recorded of the deployment's serving (at most 64 KiB; list shows "last").
    "serving",
)
DEPLOYMENT_FIELDS: Final = (
    *DEPLOYMENT_LIST_FIELDS,
    "kind",
    "operation",
    "deployedModelId",
    "errorCode",
    "updatedAt",
    "nextAttemptAt",
    "quotaRetries",
    # Its notifications (DEPLOYED, FAILED, HEDGED, RESTORED, UNDEPLOYED): the published ones
    # and those still owed, each list bounded by MAX_NOTIFIED.
    "outbox",
    "notified",
)
#: A job page reads at most this many attempts (retry budgets keep real jobs far below it).
MAX_ATTEMPTS: Final = 200


def attempt_numbers(record: Mapping[str, Any]) -> range:
    """The attempts a job page reads of a record: 1 to its ``attempt``, the first
    :data:`MAX_ATTEMPTS` only. Read by key, not by a query of the subcollection: a batch get
    costs the documents it names, whatever the database holds.

    Examples:
        >>> attempt_numbers({"attempt": 3}), len(attempt_numbers({"attempt": 10**6}))
        (range(1, 4), 200)
        >>> attempt_numbers({"attempt": "3"}), attempt_numbers({})
        (range(1, 1), range(1, 1))
    """
    raw = record.get("attempt")
    count = raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
    return range(1, max(0, min(count, MAX_ATTEMPTS)) + 1)


#: The totals read at most this many jobs ended in the last 7 days; past it they say so.
MAX_TOTALED: Final = 2000


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts: just after this row (newest first)."""

    created_at: datetime
    request_id: str

    def token(self) -> str:
        """The opaque form put in a ``cursor`` query parameter."""
        raw = json.dumps(
            {"t": self.created_at.isoformat(), "id": self.request_id}, ensure_ascii=False
        )
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def parse(cls, token: str) -> Cursor:
        """The cursor of :meth:`token`.

        Raises:
            ValueError: ``token`` is not one.
        """
        if len(token) > _MAX_TOKEN:
            raise ValueError("too long")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            decoded = json.loads(raw)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("not a cursor this page made") from exc
        if not isinstance(decoded, dict) or set(decoded) != {"t", "id"}:
            raise ValueError("not a cursor this page made")
        at, request_id = parse_rfc3339(decoded["t"]), decoded["id"]
        if at is None or not isinstance(request_id, str) or not request_id:
            raise ValueError("not a cursor this page made")
        if check_request_id(request_id):
            raise ValueError("too long")
        return cls(at, request_id)


@dataclass(frozen=True)
class Listing:
    """One page to read: the states (none: any), created at or after ``since``, ``size``
    rows, after ``after``."""

    states: tuple[str, ...] = ()
    since: datetime | None = None
    size: int = DEFAULT_PAGE_SIZE
    after: Cursor | None = None


@dataclass(frozen=True)
class Page:
    """Rows as stored (only the fields the view reads), and the cursor of the next page."""

    rows: list[dict[str, Any]]
    next: Cursor | None = None


@dataclass(frozen=True)
class Filters:
    """What a query string asked for: the listing, and its words to show back."""

    listing: Listing
    age: str | None = None
    limit: int | None = None
    states: tuple[str, ...] = field(default=())


def parse_age(text: str) -> timedelta:
    """``30m``, ``24h``, ``7d`` as a time span.

    Raises:
        ValueError: not such a span, or longer than :data:`MAX_AGE`.
    """
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"must be a number of minutes, hours or days such as 30m, 24h or 7d, not {show(text)}"
        )
    span = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if not timedelta(0) < span <= MAX_AGE:
        raise ValueError(f"must be more than 0 and at most {MAX_AGE.days}d")
    return span


def read_filters(
    params: Mapping[str, Sequence[str]],
    *,
    now: datetime,
    states: Sequence[str] = JOB_STATES,
    filters: bool = True,
    default_size: int = DEFAULT_PAGE_SIZE,
) -> Filters:
    """The listing a query string asks for (``state`` repeated, ``age``, ``limit``,
    ``cursor``; only ``limit`` and ``cursor`` when ``filters`` is False). Empty values count
    as not given, as a form sends them.

    Raises:
        InvalidRequest: every problem found, each at its parameter's name.
    """
    allowed = {"limit", "cursor", *({"state", "age"} if filters else ())}
    problems = [
        FieldError(name, "is not a parameter of this page")
        for name in params
        if name not in allowed
    ]
    given = {
        name: [v for v in values if v != ""] for name, values in params.items() if name in allowed
    }
    for name in ("age", "limit", "cursor"):
        if len(given.get(name, [])) > 1:
            problems.append(FieldError(name, "is given more than once"))
    chosen = tuple(dict.fromkeys(given.get("state", [])))
    problems += [
        FieldError("state", f"must be one of {', '.join(states)}, not {show(s)}")
        for s in chosen
        if s not in states
    ]
    age, since = _one(given, "age"), None
    if age is not None:
        try:
            since = now - parse_age(age)
        except ValueError as exc:
            problems.append(FieldError("age", str(exc)))
    limit, size = _one(given, "limit"), default_size
    if limit is not None:
        if re.fullmatch(r"[0-9]{1,4}", limit) and 1 <= int(limit) <= MAX_PAGE_SIZE:
            size = int(limit)
        else:
            problems.append(
                FieldError("limit", f"must be a whole number from 1 to {MAX_PAGE_SIZE}")
            )
    token, after = _one(given, "cursor"), None
    if token is not None:
        try:
            after = Cursor.parse(token)
        except ValueError as exc:
            problems.append(FieldError("cursor", str(exc)))
    if problems:
        raise InvalidRequest(problems)
    listing = Listing(states=chosen, since=since, size=size, after=after)
    return Filters(listing, age, int(limit) if limit is not None else None, chosen)


def _one(given: Mapping[str, list[str]], name: str) -> str | None:
    values = given.get(name) or []
    return values[0] if len(values) == 1 else None


def next_cursor(rows: Sequence[Mapping[str, Any]], size: int) -> Cursor | None:
    """The cursor after a page, when more rows follow: a store reads ``size`` + 1 rows, and
    the extra one only says there is a next page."""
    if len(rows) <= size:
        return None
    last = rows[size - 1]
    created, request_id = last.get("createdAt"), last.get("requestId")
    if not isinstance(created, datetime) or not isinstance(request_id, str):
        return None
    return Cursor(created, request_id)
