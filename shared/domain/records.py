"""What a job record holds, and the pure decisions behind each store write.

The Firestore adapter and the in-memory fake both apply these, so the rules of the record
(what a claim sees, when a submission is recorded) live in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.domain.attempts import gpu_shape
from shared.domain.ids import label_value
from shared.domain.jobs import JobState, VertexJob, from_vertex
from shared.domain.request import JobRequest


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a request for submission.

    Either ``record`` is the already-submitted record (a duplicate delivery), or ``token`` is a
    fresh claim this delivery now holds.
    """

    token: str | None = None
    record: dict[str, Any] | None = None
    taken_over: bool = False


@dataclass(frozen=True)
class Submission:
    """What to write once the Vertex job of an attempt exists."""

    request_id: str
    attempt: int
    vertex_job: VertexJob
    strategy: str
    location: str
    resumed_from: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    record_extra: dict[str, Any] = field(default_factory=dict)


def new_record(request: JobRequest, default_location: str, now: datetime) -> dict[str, Any]:
    """The record of a request just claimed for its first attempt (state ACCEPTED)."""
    accelerator, gpus = gpu_shape(request.kind, request.spec)
    location = request.location or default_location
    return {
        "requestId": request.request_id,
        "kind": request.kind,
        "state": JobState.ACCEPTED.value,
        "attempt": 1,
        "vertexJob": None,
        "strategy": request.strategy,
        "location": location,
        "baseLocation": location,
        "displayName": request.display_name,
        "maxWaitSeconds": request.max_wait_seconds,
        "acceleratorType": accelerator,
        "gpus": gpus,
        "runId": label_value(request.request_id),
        # Kept as JSON text: Firestore cannot store arrays of arrays, which REST bodies may
        # hold, and later attempts must resubmit exactly this body.
        "request": json.dumps(request.spec, sort_keys=True),
        "options": json.dumps(request.options, sort_keys=True),
        "createdAt": now,
        "updatedAt": now,
    }


class ClaimSeen(StrEnum):
    """What a delivery finds when the record of its request already exists."""

    SUBMITTED = "submitted"  # a duplicate: acknowledge
    HELD = "held"  # another live delivery is submitting: redeliver later
    EXPIRED = "expired"  # the holder died or released it: take the claim over


def job_settled(current: dict[str, Any]) -> bool:
    """A job record is past its first claim once it has a Vertex job or left ACCEPTED."""
    return bool(current.get("vertexJob")) or current.get("state") != JobState.ACCEPTED.value


def existing_claim(current: dict[str, Any], now: datetime, settled: bool) -> ClaimSeen:
    """Classify an existing record for a delivery that wants to claim it.

    ``settled`` says whether the record is past its claim (submitted, deploying, finished).
    """
    if settled:
        return ClaimSeen.SUBMITTED
    expires = (current.get("claim") or {}).get("expiresAt")
    return ClaimSeen.HELD if expires is not None and expires > now else ClaimSeen.EXPIRED


@dataclass(frozen=True)
class SubmissionWrite:
    """The writes that record one submission; ``recorded`` False means the record is over."""

    recorded: bool
    record: dict[str, Any] = field(default_factory=dict)
    attempt: dict[str, Any] = field(default_factory=dict)
    # Fields to delete from the record (the finished claim and retry schedule).
    deletes: tuple[str, ...] = ()


def submission_write(current: dict[str, Any], sub: Submission, now: datetime) -> SubmissionWrite:
    """Decide how to record ``sub`` on the record ``current``."""
    state = JobState(current.get("state", JobState.ACCEPTED.value))
    if state.terminal or current.get("cancelRequested"):
        return SubmissionWrite(recorded=False)  # cancelled meanwhile: no attempt may start
    recorded_attempt = int(current.get("attempt", 0))
    if recorded_attempt > sub.attempt or (
        recorded_attempt == sub.attempt and current.get("vertexJob")
    ):
        # A redelivery already recorded this attempt (it found the same job by label).
        return SubmissionWrite(recorded=True)
    job = sub.vertex_job
    state = from_vertex(job.state) or JobState.QUEUED
    record = {
        "state": state.value,
        "attempt": sub.attempt,
        "vertexJob": job.name,
        "vertexJobId": job.job_id,
        "vertexState": job.state,
        # Every attempt's job id, so a late hint about an older attempt is known as stale.
        "vertexJobIds": [*list(current.get("vertexJobIds") or []), job.job_id],
        "strategy": sub.strategy,
        "location": sub.location,
        "updatedAt": now,
        "attemptSubmittedAt": now,
        **sub.record_extra,
    }
    attempt = {
        "attempt": sub.attempt,
        "vertexJob": job.name,
        "state": state.value,
        "strategy": sub.strategy,
        "location": sub.location,
        "submittedAt": now,
        "resumedFrom": sub.resumed_from,
        **sub.extra,
    }
    return SubmissionWrite(True, record, attempt, deletes=("claim", "nextAttemptAt"))
