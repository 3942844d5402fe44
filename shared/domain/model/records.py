"""The typed job record: the Firestore ``jobs/{id}`` document, decoded in one place.

Stores keep and hand back plain documents (what Firestore holds). Every decision reads a
:class:`JobRecord` instead, so a field name is spelled once (here) and each value has its type:
``attempt`` is an int, ``state`` a :class:`~shared.domain.model.states.JobState`, ``request`` the
Vertex body as a dict. What a decision writes back is a
:class:`~shared.domain.model.changes.Change` of document fields.

Examples:
    >>> record = JobRecord.decode({"requestId": "r1", "state": "RETRYING", "attempt": 2})
    >>> record.state, record.attempt, record.pending_cancels
    (<JobState.RETRYING: 'RETRYING'>, 2, ())
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.states import DeploymentState, JobState
from shared.kernel.regions import is_region

#: At most this many locations a record remembers having used (``locationsUsed``): the 8 an
#: AUTO request may allow, or a fallback ladder's, with room; each is a listing per tick.
MAX_LOCATIONS_USED = 16
#: At most this many regions a record remembers refusing a create (``regionsRefused``): the
#: regions an AUTO request may allow.
MAX_REGIONS_REFUSED = 8


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _json(value: Any) -> dict[str, Any]:
    """A JSON-text field (``request``, ``options``): stored as text because Firestore cannot
    hold arrays of arrays, which Vertex bodies may. Unreadable text reads as empty."""
    try:
        decoded = json.loads(value) if isinstance(value, str) and value else {}
    except (ValueError, RecursionError):
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _count(value: Any) -> int:
    """A whole count; anything else (a hand-edited string, null) reads as 0."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _items(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list | tuple) else ()


def _fraction(value: Any) -> float | None:
    """A fraction from 0 to 1, else None (unknown)."""
    number = _number(value)
    return number if value is not None and number == value and 0.0 <= number <= 1.0 else None


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _messages(value: Any) -> tuple[dict[str, Any], ...]:
    return tuple(dict(m) for m in _items(value) if isinstance(m, Mapping))


@dataclass(frozen=True)
class Stored:
    """A document as the store holds it, and its version (Firestore's update time).

    A write decided on it commits only while the document is still at that version, so a path
    that has just read or written a record decides its next write without reading it again
    (see :meth:`shared.app.ports.JobStore.transact`).
    """

    raw: Mapping[str, Any]
    version: Any
    # Only some fields were read (a tick's page, :data:`TICK_FIELDS`): nothing may be decided
    # on it, and its write reads the record first (its version still guards nothing else).
    partial: bool = False
    # The document's id, where a query returned it (the tick's watch list is keyed by it).
    key: str | None = None


@dataclass(frozen=True)
class Claim:
    """A claim on a record: who holds it (``token``), until when, and for which attempt.

    ``attempt`` tells a later claim of the same attempt that a delivery held it before (and
    may have created its job): only a claim with no predecessor may skip the label lookup.
    """

    token: str | None
    expires_at: datetime | None
    attempt: int | None = None

    def live(self, now: datetime) -> bool:
        """Held by a delivery that may still be running."""
        return self.expires_at is not None and self.expires_at > now

    @classmethod
    def of(cls, raw: Any) -> Claim | None:
        """The ``claim`` field of any record (job or deployment), or None."""
        if not isinstance(raw, Mapping):
            return None
        attempt = raw.get("attempt")
        return cls(
            _text(raw.get("token")),
            _time(raw.get("expiresAt")),
            attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        )


#: The fields the tick reads of each active (and lately ended) record: what it matches the
#: listing on, windows the listing by, and judges a record on (overdue, stray, a wait given
#: up). Never the request body (up to 256 KiB) nor the notifications: memory stays small per
#: record, and a record whose job changed is read whole before anything is decided on it.
TICK_FIELDS: tuple[str, ...] = (
    "requestId",
    "state",
    "attempt",
    "kind",
    "vertexJob",
    "vertexState",
    "runId",
    "location",
    "baseLocation",
    "locationsUsed",
    "strategy",
    "vertexCreateTime",
    "attemptSubmittedAt",
    "createdAt",
    "endedAt",
    "maxWaitSeconds",
    "overdueSince",
    "capacity",
    "yielding",
    "cancelRequested",
    # The live claim's token: a job of the attempt in flight that another create superseded
    # is a stray (is_stray), so the tick cancels it before the holder's claim expires.
    "claim",
    # Admission: the tick gives back the ledger entries of records no longer admitted, and
    # estimates a waiting request's start from the running ones' (admission.runSeconds).
    "admission",
    "attemptStartedAt",
)


#: What a record with a missing or unknown state reads as: terminal, so no decision moves it
#: and a new delivery takes it for a duplicate (as the raw comparisons did before).
UNKNOWN_STATE = JobState.FAILED


@dataclass(frozen=True)
class JobRecord:
    """One ``jobs/{id}`` document, typed (docs/contract.md, *Firestore*, names each field)."""

    request_id: str
    state: JobState
    attempt: int
    # False when the stored state is missing or unknown (a hand-edited record).
    state_known: bool = True
    kind: str | None = None
    vertex_job: str | None = None
    vertex_job_id: str | None = None
    vertex_job_ids: tuple[str, ...] = ()
    strategy: str | None = None
    location: str | None = None
    base_location: str | None = None
    # Every location an attempt of the request was created (or chosen to be created) in,
    # oldest first, at most MAX_LOCATIONS_USED: where the tick and a cancel look for its jobs.
    locations_used: tuple[str, ...] = ()
    # AUTO across regions: the region chosen for the next attempt before its create
    # ({attempt, location, reason, at}), so every delivery of that attempt creates there.
    region_choice: dict[str, Any] = field(default_factory=dict)
    # AUTO across regions: the regions that refused an attempt's create (quota, a body they
    # cannot run), at most MAX_REGIONS_REFUSED: the region rule no longer moves the job there.
    regions_refused: tuple[str, ...] = ()
    accelerator_type: str | None = None
    gpus: int = 0
    run_id: str | None = None
    display_name: str | None = None
    # The body and options as stored (JSON text); parsed only when a decision reads them, so
    # the hint path's transactions never parse a request body of up to 256 KiB.
    request_text: str | None = field(default=None, repr=False)
    options_text: str | None = field(default=None, repr=False)
    reason: str | None = None
    claim: Claim | None = None
    cancel_requested: bool = False
    retries: dict[str, int] = field(default_factory=dict)
    capacity_failures: int = 0
    quota_retries: int = 0
    max_wait_seconds: float | None = None
    created_at: datetime | None = None
    ended_at: datetime | None = None
    attempt_submitted_at: datetime | None = None
    # When the current attempt's job started running (None: not yet, or not known).
    attempt_started_at: datetime | None = None
    vertex_create_time: datetime | None = None
    next_attempt_at: datetime | None = None
    overdue_since: datetime | None = None
    last_read_at: datetime | None = None
    previous_read_at: datetime | None = None
    hint_pending: bool = False
    # The message id of the hint delivery that promised the trailing read (see hints).
    hint_holder: str | None = None
    outbox: tuple[dict[str, Any], ...] = ()
    # Notifications already published (the latest MAX_NOTIFIED), oldest first.
    notified: tuple[dict[str, Any], ...] = ()
    pending_cancels: tuple[str, ...] = ()
    work_lost_seconds: float = 0.0
    latest_checkpoint: Checkpoint | None = None
    # latestCheckpoint's step / totalSteps, when the request declared totalSteps.
    progress: float | None = None
    totals: dict[str, float] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    # AUTO: the capacity policy's decision for the current attempt (CapacityDecision.to_dict).
    capacity: dict[str, Any] = field(default_factory=dict)
    # AUTO: the current attempt is being ended by choice ({attempt, vertexJob, why, reason,
    # at}); its job's CANCELLED end is a switch, not a user's cancel. Empty otherwise.
    yielding: dict[str, Any] = field(default_factory=dict)
    # AUTO: how many attempts were ended by choice (capacity.MAX_SWITCHES bounds them).
    switches: int = 0
    # Admission queues: {queue, priority, demand, stage WAITING | ADMITTED, waitingSince,
    # admittedAt, heldBy} (shared.domain.admission.ledger); empty when admission is off.
    admission: dict[str, Any] = field(default_factory=dict)
    # The document and version it was decoded from, when a store read or wrote it: the next
    # write may be decided on it without a read (a version check guards it).
    stored: Stored | None = field(default=None, repr=False, compare=False)

    @classmethod
    def decode(cls, raw: Mapping[str, Any], stored: Stored | None = None) -> JobRecord:
        """Read a stored document; missing or mistyped fields take their defaults, so decoding
        never fails (a sweep must survive one hand-edited record). A state that is missing or
        unknown reads as :data:`UNKNOWN_STATE`: no decision moves such a record."""
        wait = raw.get("maxWaitSeconds")
        state = str(raw.get("state"))
        known = state in JobState.__members__
        return cls(
            request_id=str(raw.get("requestId") or ""),
            state=JobState(state) if known else UNKNOWN_STATE,
            state_known=known,
            attempt=_count(raw.get("attempt")),
            kind=_text(raw.get("kind")),
            vertex_job=_text(raw.get("vertexJob")),
            vertex_job_id=_text(raw.get("vertexJobId")),
            vertex_job_ids=tuple(str(i) for i in _items(raw.get("vertexJobIds"))),
            strategy=_text(raw.get("strategy")),
            location=_text(raw.get("location")),
            base_location=_text(raw.get("baseLocation")),
            locations_used=tuple(
                r for r in _items(raw.get("locationsUsed"))[:MAX_LOCATIONS_USED] if is_region(r)
            ),
            region_choice=_mapping(raw.get("regionChoice")),
            regions_refused=tuple(
                r for r in _items(raw.get("regionsRefused"))[:MAX_REGIONS_REFUSED] if is_region(r)
            ),
            accelerator_type=_text(raw.get("acceleratorType")),
            gpus=_count(raw.get("gpus")),
            run_id=_text(raw.get("runId")),
            display_name=_text(raw.get("displayName")),
            request_text=_text(raw.get("request")),
            options_text=_text(raw.get("options")),
            reason=_text(raw.get("reason")),
            claim=Claim.of(raw.get("claim")),
            cancel_requested=bool(raw.get("cancelRequested")),
            retries={str(k): _count(v) for k, v in _mapping(raw.get("retries")).items()},
            capacity_failures=_count(raw.get("capacityFailures")),
            quota_retries=_count(raw.get("quotaRetries")),
            max_wait_seconds=_number(wait) or None,
            created_at=_time(raw.get("createdAt")),
            ended_at=_time(raw.get("endedAt")),
            attempt_submitted_at=_time(raw.get("attemptSubmittedAt")),
            attempt_started_at=_time(raw.get("attemptStartedAt")),
            vertex_create_time=_time(raw.get("vertexCreateTime")),
            next_attempt_at=_time(raw.get("nextAttemptAt")),
            overdue_since=_time(raw.get("overdueSince")),
            last_read_at=_time(raw.get("lastReadAt")),
            previous_read_at=_time(raw.get("previousReadAt")),
            hint_pending=bool(raw.get("hintPending")),
            hint_holder=_text(raw.get("hintHolder")),
            outbox=_messages(raw.get("outbox")),
            notified=_messages(raw.get("notified")),
            pending_cancels=tuple(str(n) for n in _items(raw.get("pendingCancels"))),
            work_lost_seconds=_number(raw.get("workLostSeconds")),
            latest_checkpoint=_checkpoint(raw.get("latestCheckpoint")),
            progress=_fraction(raw.get("progress")),
            totals={
                key: _number(raw.get(key))
                for key in ("queuedSeconds", "runningSeconds", "gpuSeconds")
            },
            cost=_mapping(raw.get("cost")),
            capacity=_mapping(raw.get("capacity")),
            yielding=_mapping(raw.get("yielding")),
            switches=_count(raw.get("switches")),
            admission=_mapping(raw.get("admission")),
            stored=stored,
        )

    @functools.cached_property
    def request(self) -> dict[str, Any]:
        """The Vertex body as submitted (defaults applied)."""
        return _json(self.request_text)

    @functools.cached_property
    def options(self) -> dict[str, Any]:
        """``retryPolicy``, ``fallback`` and ``checkpointUri`` as the request gave them."""
        return _json(self.options_text)

    @property
    def locations(self) -> tuple[str, ...]:
        """Where jobs of the request may be: its current location and every one it used."""
        here = (self.location,) if self.location else ()
        return tuple(dict.fromkeys((*here, *self.locations_used)))

    def chosen_location(self, attempt: int) -> str | None:
        """The region recorded for ``attempt`` before its create (AUTO across regions)."""
        choice = self.region_choice
        location = choice.get("location")
        if choice.get("attempt") == attempt and is_region(location):
            return str(location)
        return None

    @property
    def home(self) -> str | None:
        """Where the request's attempts start: its base location, else its current one."""
        return self.base_location or self.location

    @property
    def awaiting_admission(self) -> bool:
        """Waiting in an admission queue: nothing may create its job until it is admitted
        (the stage value is the ledger's ``Stage.WAITING``; the model imports no layer
        above it)."""
        return self.admission.get("stage") == "WAITING" and not self.state.terminal


def _checkpoint(raw: object) -> Checkpoint | None:
    if not isinstance(raw, Mapping):
        return None
    try:
        return Checkpoint.from_dict(raw)
    except (KeyError, ValueError, TypeError):
        # A hand-edited checkpoint reads as none: the next complete one replaces it.
        return None


@dataclass(frozen=True)
class DeploymentRecord:
    """One ``deployments/{id}`` document, typed (docs/contract.md, *Firestore*)."""

    request_id: str
    state: DeploymentState
    kind: str | None = None
    operation: str | None = None
    deployed_model_id: str | None = None
    request_text: str | None = field(default=None, repr=False)
    claim: Claim | None = None
    quota_retries: int = 0
    # Notifications owed (written with the change that owes them) and the latest published.
    outbox: tuple[dict[str, Any], ...] = ()
    notified: tuple[dict[str, Any], ...] = ()
    # The ``serving`` map as stored (decoded by shared.domain.serving.model.ServingState).
    serving: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # A cancel (a resume) asked the tick to take the deployment down (follow it again): the
    # flags of a record written before the serving machine, which holds them as intents now.
    undeploy_requested: bool = False
    resume_requested: bool = False
    options_text: str | None = field(default=None, repr=False)

    @classmethod
    def decode(cls, raw: Mapping[str, Any]) -> DeploymentRecord:
        """Read a stored document; missing or mistyped fields take their defaults."""
        state = str(raw.get("state"))
        return cls(
            request_id=str(raw.get("requestId") or ""),
            # Missing or unknown: read as an end, so nothing moves it (see UNKNOWN_STATE).
            state=(
                DeploymentState(state)
                if state in DeploymentState.__members__
                else DeploymentState.FAILED
            ),
            kind=_text(raw.get("kind")),
            operation=_text(raw.get("operation")),
            deployed_model_id=_text(raw.get("deployedModelId")),
            request_text=_text(raw.get("request")),
            claim=Claim.of(raw.get("claim")),
            quota_retries=_count(raw.get("quotaRetries")),
            outbox=_messages(raw.get("outbox")),
            notified=_messages(raw.get("notified")),
            serving=_mapping(raw.get("serving")),
            undeploy_requested=raw.get("undeployRequested") is True,
            resume_requested=raw.get("resumeRequested") is True,
            options_text=_text(raw.get("options")),
        )

    @functools.cached_property
    def request(self) -> dict[str, Any]:
        """The ``deployModel`` body as submitted; parsed only when a redeploy needs it."""
        return _json(self.request_text)

    @functools.cached_property
    def options(self) -> dict[str, Any]:
        """The request's envelope fields (its serving knobs), as submitted."""
        return _json(self.options_text)
