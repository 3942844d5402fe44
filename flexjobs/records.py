"""What ``flexjobs.status`` returns: a request's record, typed, read from Firestore.

A request is in one of three places: ``jobs/{id}`` (a training request), ``deployments/{id}``
(a ``deployModel`` request) or ``rejections/{id}`` (refused, never a record). :class:`Status`
holds the fields a publisher acts on, typed, and the stored documents as they are
(``record``, ``attempts``) for anything else.

Examples:
    >>> s = status_of("r1", {"requestId": "r1", "kind": "customJob", "state": "RUNNING",
    ...                      "attempt": 2, "gpuSeconds": 7200.0}, [{"attempt": 1}], None)
    >>> s.state, s.attempt, s.terminal, s.gpu_hours, [a.attempt for a in s.attempts]
    ('RUNNING', 2, False, 2.0, [1])
    >>> r = status_of("r2", None, [], {"errors": [{"path": "location", "message": "bad"}]})
    >>> r.state, r.rejected, r.terminal, r.errors[0].path
    ('REJECTED', True, True, 'location')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from shared.domain.model.states import DeploymentState, JobState
from shared.kernel.errors import FieldError

REJECTED: Final = "REJECTED"
#: The states a request never leaves.
TERMINAL: Final = frozenset(
    {s.value for s in JobState if s.terminal}
    | {s.value for s in DeploymentState if s.terminal}
    | {REJECTED}
)
SUCCESS: Final = frozenset({JobState.SUCCEEDED.value, DeploymentState.DEPLOYED.value})


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Attempt:
    """One attempt of a training request (``jobs/{id}/attempts/{n}``)."""

    attempt: int | None
    state: str | None
    strategy: str | None
    location: str | None
    vertex_job: str | None
    error_class: str | None
    gpu_seconds: float | None
    document: Mapping[str, Any] = field(repr=False)

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> Attempt:
        return cls(
            attempt=_int(document.get("attempt")),
            state=_text(document.get("state")),
            strategy=_text(document.get("strategy")),
            location=_text(document.get("location")),
            vertex_job=_text(document.get("vertexJob")),
            error_class=_text(document.get("errorClass")),
            gpu_seconds=_number(document.get("gpuSeconds")),
            document=document,
        )


@dataclass(frozen=True)
class Status:
    """A request as flexjobs holds it now.

    ``state`` is the record's (``JobState`` or ``DeploymentState``), or ``REJECTED`` for a
    refused request, whose problems are in ``errors``. ``record`` and ``attempts`` are the
    stored documents (Firestore values: times are ``datetime``).
    """

    request_id: str
    collection: str
    state: str
    kind: str | None = None
    reason: str | None = None
    attempt: int | None = None
    strategy: str | None = None
    location: str | None = None
    display_name: str | None = None
    vertex_job: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    ended_at: datetime | None = None
    progress: float | None = None
    gpu_seconds: float | None = None
    cost_usd: float | None = None
    errors: tuple[FieldError, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def rejected(self) -> bool:
        return self.state == REJECTED

    @property
    def terminal(self) -> bool:
        """The request has ended: it will change no more."""
        return self.state in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.state in SUCCESS

    @property
    def gpu_hours(self) -> float | None:
        return None if self.gpu_seconds is None else self.gpu_seconds / 3600


def _errors(rejection: Mapping[str, Any]) -> tuple[FieldError, ...]:
    found = rejection.get("errors")
    return tuple(
        FieldError(str(e.get("path", "")), str(e.get("message", "")))
        for e in (found if isinstance(found, list) else [])
        if isinstance(e, Mapping)
    )


def status_of(
    request_id: str,
    record: Mapping[str, Any] | None,
    attempts: Sequence[Mapping[str, Any]],
    rejection: Mapping[str, Any] | None,
    collection: str = "jobs",
) -> Status:
    """The status of a request from its record (or its rejection, when it has none)."""
    if record is None:
        held = dict(rejection or {})
        return Status(
            request_id,
            "rejections",
            REJECTED,
            errors=_errors(held),
            record=held,
            created_at=_time(held.get("createdAt")),
        )
    cost = record.get("cost")
    ordered = sorted(attempts, key=lambda a: _int(a.get("attempt")) or 0)
    return Status(
        request_id=request_id,
        collection=collection,
        state=str(record.get("state") or "UNKNOWN"),
        kind=_text(record.get("kind")),
        reason=_text(record.get("reason")),
        attempt=_int(record.get("attempt")),
        strategy=_text(record.get("strategy")),
        location=_text(record.get("location")),
        display_name=_text(record.get("displayName")),
        vertex_job=_text(record.get("vertexJob")),
        created_at=_time(record.get("createdAt")),
        updated_at=_time(record.get("updatedAt")),
        ended_at=_time(record.get("endedAt")),
        progress=_number(record.get("progress")),
        gpu_seconds=_number(record.get("gpuSeconds")),
        cost_usd=_number(cost.get("costUsd")) if isinstance(cost, Mapping) else None,
        attempts=tuple(Attempt.of(a) for a in ordered),
        record=dict(record),
    )
