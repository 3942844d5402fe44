"""What a job record holds, and the pure decisions behind each store write.

The Firestore adapter and the in-memory fake both apply these, so the rules of the record
(what a claim sees, when a submission is recorded) live in one place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain.model.changes import Change
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.ids import LABEL_ATTEMPT, LABEL_CLAIM, label_value
from shared.domain.model.kinds import TRAINING_KINDS
from shared.domain.model.records import (
    MAX_LOCATIONS_USED,
    MAX_REGIONS_REFUSED,
    Claim,
    JobRecord,
    Stored,
)
from shared.domain.model.states import JobState, from_vertex
from shared.domain.model.values import clip
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.policy.checkpoints import checkpoint_prefix
from shared.domain.policy.retry import Placement, placement_for
from shared.domain.request.attempts import gpu_shape
from shared.domain.request.message import JobRequest, job_spec_of

#: The ``reason`` of a record whose attempt Vertex refused for quota, parked for the tick.
QUOTA_REASON = "quota"


#: Published notifications a record keeps (``notified``), the latest ones: each is at most
#: about 1 KiB (its reason is clipped), so the record stays far from Firestore's 1 MiB.
MAX_NOTIFIED = 20


def notification(request_id: str, state: str, attempt: int, reason: str | None) -> dict[str, Any]:
    """The notification message of the contract."""
    return {"requestId": request_id, "state": state, "attempt": attempt, "reason": reason}


@dataclass(frozen=True)
class Claimed:
    """The outcome of claiming a request for submission.

    Either ``record`` is the already-submitted record (a duplicate delivery), or ``token`` is a
    claim this delivery now holds.
    """

    token: str | None = None
    record: dict[str, Any] | None = None
    # The claim created the record: no delivery held it before, so nothing exists under its
    # key yet (see shared.app.steps.exactly_once).
    fresh: bool = False
    # The record as claimed, with its version: recording the submission decides on it.
    stored: Stored | None = None
    # When the claim expires (this delivery's clock): past it another delivery may take it
    # over, so no create may be sent on it any more (see shared.app.steps.attempts).
    expires_at: datetime | None = None


@dataclass(frozen=True)
class Submission:
    """What to write once the Vertex job of an attempt exists."""

    request_id: str
    attempt: int
    vertex_job: VertexJob
    strategy: str
    location: str
    resumed_from: str | None = None
    record_extra: dict[str, Any] = field(default_factory=dict)


def new_record(request: JobRequest, default_location: str, now: datetime) -> dict[str, Any]:
    """The record of a request just claimed for its first attempt (state ACCEPTED)."""
    accelerator, gpus = gpu_shape(request.kind, request.spec)
    location = request.location or default_location
    slot, watched = request.slot, request_checkpoint_prefix(request)
    return {
        **request.origin,
        **({"series": slot.series, "slot": slot.start} if slot else {}),
        # Indexed: a checkpoint upload finds the active jobs writing under it by this field.
        **({"checkpointPrefix": watched} if watched else {}),
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


def request_checkpoint_prefix(request: JobRequest) -> str | None:
    """Where a request's checkpoints go; see :func:`checkpoints_under`."""
    return checkpoints_under(request.kind, request.spec, request.options)


def checkpoints_under(kind: str, spec: dict[str, Any], options: dict[str, Any]) -> str | None:
    """Where a training job's checkpoints go (``checkpointUri``, else ``checkpoints/`` under
    the job's output directory), or None when unknown or not in Cloud Storage."""
    if kind not in TRAINING_KINDS:
        return None
    output = (job_spec_of(kind, spec) or {}).get("baseOutputDirectory")
    uri = output.get("outputUriPrefix") if isinstance(output, dict) else None
    try:
        return checkpoint_prefix(options, uri if isinstance(uri, str) else None)
    except ValueError:
        # An output directory outside Cloud Storage: nothing to watch.
        return None


#: A SKIPPED record is kept this long, then deleted by the TTL policy.
SKIPPED_TTL = timedelta(days=7)


def skipped_record(
    request: JobRequest, holder: str, default_location: str, now: datetime
) -> dict[str, Any]:
    """The record of a scheduled slot that does not run (SKIPPED): ``holder`` is the series'
    request that kept it from running. Nothing is created; the notification is in the outbox.
    """
    reason = holder
    message = notification(request.request_id, JobState.SKIPPED.value, 0, reason)
    return {
        **new_record(request, default_location, now),
        "state": JobState.SKIPPED.value,
        "attempt": 0,
        "reason": reason,
        "endedAt": now,
        # A short slot skipped during a long run leaves many of these: they expire, like
        # tombstones (the Firestore TTL policy on jobs.expireAt).
        "expireAt": now + SKIPPED_TTL,
        "outbox": [message],
        "outboxPending": True,
    }


def checkpoint_progress(current: JobRecord, checkpoint: Checkpoint, now: datetime) -> Change | None:
    """Record a checkpoint a live upload just completed, if it is news.

    Only an active job takes it, only a checkpoint of this run (no older than the record,
    unless the request named ``checkpointUri`` itself), and only forward: a higher step, or
    with no step, a later time. The state never changes.
    """
    if current.state.terminal or not current.state_known:
        return None
    created = current.created_at
    if not current.options.get("checkpointUri") and created and checkpoint.at < created:
        return None
    if not advances(current.latest_checkpoint, checkpoint):
        return None
    fields = {**progress_fields(current.options, checkpoint), "updatedAt": now}
    # A checkpoint without a step says nothing of progress: an older figure would mislead.
    stale = () if "progress" in fields else ("progress",)
    return Change(current.state, fields, deletes=stale)


def progress_fields(options: dict[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """``latestCheckpoint``, and ``progress`` (step / ``totalSteps``, at most 1) when the
    request declared ``totalSteps`` and the checkpoint has a step.

    Examples:
        >>> from datetime import UTC
        >>> cp = Checkpoint("gs://b/ck/step-250/", 250, datetime(2026, 1, 1, tzinfo=UTC))
        >>> progress_fields({"totalSteps": 1000}, cp)["progress"]
        0.25
    """
    fields: dict[str, Any] = {"latestCheckpoint": checkpoint.to_dict()}
    total = options.get("totalSteps")
    if isinstance(total, int) and total > 0 and checkpoint.step is not None:
        fields["progress"] = min(checkpoint.step / total, 1.0)
    return fields


def advances(old: Checkpoint | None, new: Checkpoint) -> bool:
    """Is ``new`` later than ``old``: a higher step, or without steps a later time?"""
    if old is None:
        return True
    if old.step is not None and new.step is not None:
        return new.step > old.step
    return new.at > old.at and new.uri != old.uri


class ClaimSeen(StrEnum):
    """What a delivery finds when the record of its request already exists."""

    SUBMITTED = "submitted"  # a duplicate: acknowledge
    HELD = "held"  # another live delivery is submitting: redeliver later
    EXPIRED = "expired"  # the holder died or released it: take the claim over


def job_settled(current: JobRecord) -> bool:
    """A job record is past its first claim once it has a Vertex job or left ACCEPTED."""
    return bool(current.vertex_job) or current.state is not JobState.ACCEPTED


def existing_claim(claim: Claim | None, now: datetime, settled: bool) -> ClaimSeen:
    """Classify an existing record, holding ``claim``, for a delivery that wants to claim it.

    ``settled`` says whether the record is past its claim (submitted, deploying, finished).
    """
    if settled:
        return ClaimSeen.SUBMITTED
    return ClaimSeen.HELD if claim is not None and claim.live(now) else ClaimSeen.EXPIRED


@dataclass(frozen=True)
class SubmissionChange:
    """The writes that record one submission; ``recorded`` False means the record is over."""

    recorded: bool
    record: dict[str, Any] = field(default_factory=dict)
    attempt: dict[str, Any] = field(default_factory=dict)
    # Fields to delete from the record (the finished claim and retry schedule).
    deletes: tuple[str, ...] = ()


def submission_change(current: JobRecord, sub: Submission, now: datetime) -> SubmissionChange:
    """Decide how to record ``sub`` on the record ``current``.

    ``recorded`` is True only when the record names ``sub``'s job afterwards. Otherwise the
    caller holds a job no record will ever follow, and must cancel it: the request was
    cancelled meanwhile, or another delivery recorded a different job for this attempt (two
    creates raced, one of them after a timeout), or the request has moved past this attempt.
    """
    job = sub.vertex_job
    if current.vertex_job == job.name or job.job_id in current.vertex_job_ids:
        return SubmissionChange(recorded=True)  # a redelivery recorded this very job already
    if current.state.terminal or current.cancel_requested:
        return SubmissionChange(recorded=False)  # cancelled meanwhile: no attempt may start
    if current.attempt > sub.attempt or (current.attempt == sub.attempt and current.vertex_job):
        return SubmissionChange(recorded=False)  # superseded: another job holds this attempt
    state = from_vertex(job.state) or JobState.QUEUED
    if state.terminal:
        # An adopted job that already ended: recording its end here would skip finish() (no
        # notification, no retry, no accounting). Record it as started or queued; the next
        # read (the tick's listing, a hint) settles the end through the one terminal path.
        state = JobState.RUNNING if job.start_time else JobState.QUEUED
    record = {
        "state": state.value,
        "attempt": sub.attempt,
        "vertexJob": job.name,
        "vertexJobId": job.job_id,
        "vertexState": job.state,
        # Every attempt's job id, so a late hint about an older attempt is known as stale.
        "vertexJobIds": [*current.vertex_job_ids, job.job_id],
        "strategy": sub.strategy,
        "location": sub.location,
        "locationsUsed": with_location(current, sub.location),
        "updatedAt": now,
        "attemptSubmittedAt": now,
        # The new attempt's: None until it starts (an adopted job may have started already).
        "attemptStartedAt": job.start_time,
        # When Vertex made the job: an adopted job may be hours older than its record, and the
        # tick's bounded listing must still reach it.
        "vertexCreateTime": job.create_time or now,
        **({"reason": None} if current.reason == QUOTA_REASON else {}),
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
    }
    if "capacity" in sub.record_extra:
        # AUTO: the capacity policy's decision and reason, on the attempt it chose for.
        attempt["capacity"] = sub.record_extra["capacity"]
    # A new job has not been read yet: the read leases were the previous job's, and the new
    # one's first hint (QUEUED, or RUNNING at once) must not wait out their window.
    reads = (
        "lastReadAt",
        "previousReadAt",
        "hintPending",
        *(("hintHolder",) if current.hint_holder else ()),
    )
    return SubmissionChange(True, record, attempt, deletes=("claim", "nextAttemptAt", *reads))


def pending_attempt(current: JobRecord) -> int | None:
    """The attempt a due submission would create, or None when none is waiting.

    RETRYING: attempt n ended, n+1 follows. QUEUED without a Vertex job: attempt n was parked
    (Vertex refused it for quota) and is submitted again. ACCEPTED: attempt 1 was claimed and
    never recorded (the delivery died, perhaps after its create): once the claim expires, it
    is taken over, and the job looked up by its labels, adopted or created.
    """
    attempt = current.attempt or 1
    if current.state is JobState.RETRYING:
        return attempt + 1
    if current.state in (JobState.QUEUED, JobState.ACCEPTED) and not current.vertex_job:
        return attempt
    return None


def submission_claimable(
    current: JobRecord, attempt: int, now: datetime, location: str | None = None
) -> bool:
    """May a delivery claim the submission of ``attempt`` (a retry or a parked attempt) now?

    Only when that attempt is the one waiting, it is due, no cancel was asked for, it is not
    waiting for admission (only an admission makes it due), and no live claim holds it (a
    create whose outcome is unknown keeps its claim until it expires). With ``location`` (the
    region the delivery planned it in), only when the record has not recorded another region
    for it since: a plan made on a read taken before a refusal sent the attempt home would
    create in the region that refused it.
    """
    due = current.next_attempt_at
    recorded = current.chosen_location(attempt)
    return (
        (location is None or recorded is None or recorded == location)
        and pending_attempt(current) == attempt
        and not current.cancel_requested
        and not current.awaiting_admission
        and (due is None or due <= now)
        and not (current.claim is not None and current.claim.live(now))
    )


def first_claim_of(current: JobRecord, attempt: int) -> bool:
    """Is a claim of ``attempt`` on ``current`` the first any delivery takes of it?

    Only then may its label lookup be skipped: an earlier claim of the same attempt (taken
    over, released after a failure, or kept after a create whose outcome is unknown) may have
    created a job. A claim that names no attempt may be of any, so it counts as earlier.
    """
    held = current.claim
    return held is None or (held.attempt is not None and held.attempt != attempt)


#: A cancel for a request not seen yet leaves its record as a tombstone for at least this long.
TOMBSTONE_TTL = timedelta(days=2)
TOMBSTONE_REASON = "cancelled before the request arrived"


def tombstone(request_id: str, now: datetime) -> dict[str, Any]:
    """The record a cancel leaves for a requestId flexjobs has not seen (state CANCELLED).

    A request arriving later finds it, so it creates nothing. ``expireAt`` is the Firestore
    TTL field: a tombstone no request ever claimed is deleted after :data:`TOMBSTONE_TTL`.
    """
    record: dict[str, Any] = {
        "requestId": request_id,
        "state": JobState.CANCELLED.value,
        "attempt": 0,
        "vertexJob": None,
        "cancelRequested": True,
        "reason": TOMBSTONE_REASON,
        "createdAt": now,
        "updatedAt": now,
        "endedAt": now,
        "expireAt": now + TOMBSTONE_TTL,
    }
    message = notification(request_id, JobState.CANCELLED.value, 0, TOMBSTONE_REASON)
    return {**record, "outbox": [message], "outboxPending": True}


def tombstone_claimed(
    current: JobRecord, request: JobRequest, default_location: str, now: datetime
) -> Change | None:
    """Fields that fill a tombstone in with the request that arrived after its cancel.

    The record stays CANCELLED and keeps no TTL any more; None when ``current`` is not an
    unclaimed tombstone.
    """
    if current.reason != TOMBSTONE_REASON or current.kind:
        return None
    fresh = new_record(request, default_location, now)
    kept = ("requestId", "state", "attempt", "vertexJob", "createdAt", "reason")
    fields = {k: v for k, v in fresh.items() if k not in kept}
    return Change(current.state, {**fields, "expireAt": None, "updatedAt": now})


def is_stray(
    record: JobRecord,
    job: VertexJob,
    now: datetime | None = None,
    listed: Iterable[VertexJob] = (),
) -> bool:
    """Is ``job``, listed under ``record``'s request label, a job nothing will ever follow?

    A live job is a stray when its attempt label names an attempt the record has settled with
    another job, or an attempt the request has moved past. A job of the attempt in flight (a
    later attempt than the record's, or the record's own before it names a job) is left to
    the delivery that claims it, with one exception: when the live claim's own create made a
    job (``listed`` holds one labelled with its token, ``LABEL_CLAIM``), that delivery will
    record its own job or none, so a job an expired claim's create left (a create that landed
    after its claim ran out) is a stray now, not only once the claim expires: cancelled while
    it is still queued.

    Examples:
        >>> raw = {"attempt": 1, "vertexJob": "p/customJobs/1", "state": "QUEUED"}
        >>> record = JobRecord.decode(raw)
        >>> job = VertexJob("p/customJobs/2", "JOB_STATE_QUEUED", {"flexjobs-attempt": "1"})
        >>> is_stray(record, job)
        True
    """
    state = from_vertex(job.state)
    if job.name == record.vertex_job or (state is not None and state.terminal):
        return False
    try:
        job_attempt = int(job.labels.get(LABEL_ATTEMPT, ""))
    except ValueError:
        return False
    if record.state.terminal:
        return True
    attempt = record.attempt
    if job_attempt < attempt or (job_attempt == attempt and bool(record.vertex_job)):
        return True
    return now is not None and _superseded(record, job, job_attempt, now, listed)


def _superseded(
    record: JobRecord, job: VertexJob, job_attempt: int, now: datetime, listed: Iterable[VertexJob]
) -> bool:
    """Did the live claim of ``job``'s attempt create a job of its own, so ``job`` (made under
    another claim) is one it will never record?"""
    claim = record.claim
    if claim is None or claim.token is None or not claim.live(now) or claim.attempt != job_attempt:
        return False
    holder = claim.token
    if job.labels.get(LABEL_CLAIM) == holder:
        return False
    return any(
        other.name != job.name
        and other.labels.get(LABEL_CLAIM) == holder
        and other.labels.get(LABEL_ATTEMPT) == str(job_attempt)
        for other in listed
    )


def next_placement(record: JobRecord, default_location: str) -> Placement:
    """Where and how the request's next attempt runs: its fallback ladder after the capacity
    failures so far, from its own strategy and base location; for AUTO across regions, the
    region recorded for it before its create (:func:`region_chosen`). The retry creates it
    there, and a cancel looks for it there."""
    request = JobRequest(record.request_id, str(record.kind), record.request)
    placement = placement_for(
        record.options.get("fallback"),
        record.capacity_failures,
        request.strategy,
        record.home or default_location,
    )
    pending = pending_attempt(record)
    chosen = record.chosen_location(pending) if pending is not None else None
    return placement if chosen is None else Placement(placement.strategy, chosen)


def with_location(record: JobRecord, location: str) -> list[str]:
    """``locationsUsed`` with ``location`` added: oldest first, each once, the latest
    :data:`~shared.domain.model.records.MAX_LOCATIONS_USED` (the oldest has had longest for
    its strays to be found).

    Examples:
        >>> with_location(JobRecord.decode({"location": "us-east1"}), "us-west1")
        ['us-east1', 'us-west1']
    """
    used = dict.fromkeys((*record.locations, location))
    return list(used)[-MAX_LOCATIONS_USED:]


def region_chosen(
    record: JobRecord, attempt: int, location: str, reason: str, now: datetime
) -> Change | None:
    """Record the region of ``attempt`` before anything creates it (AUTO across regions), and
    add it to ``locationsUsed`` so the tick lists it for strays from then on. Written once per
    attempt: a region already recorded for it stands (another delivery chose first, and its
    create may have happened), so every delivery creates in the same region. None when the
    record is not waiting for ``attempt``, or holds its region already.

    Examples:
        >>> from datetime import UTC
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> record = JobRecord.decode({"state": "RETRYING", "attempt": 1, "location": "us-east1"})
        >>> change = region_chosen(record, 2, "us-west1", "cheaper", now)
        >>> change.record["regionChoice"]["location"], change.record["locationsUsed"]
        ('us-west1', ['us-east1', 'us-west1'])
        >>> chosen = JobRecord.decode({**change.record, "state": "RETRYING", "attempt": 1})
        >>> region_chosen(chosen, 2, "us-central1", "cheaper still", now) is None
        True
    """
    if record.chosen_location(attempt) is not None:
        return None
    if pending_attempt(record) != attempt or not submission_claimable(record, attempt, now):
        return None
    choice = {"attempt": attempt, "location": location, "reason": clip(reason, 500), "at": now}
    fields = {"regionChoice": choice, "locationsUsed": with_location(record, location)}
    return Change(state=record.state, record={**fields, "updatedAt": now})


def refused_away(
    record: JobRecord, attempt: int, location: str, detail: str, now: datetime
) -> Change | None:
    """Send ``attempt`` back to the request's location after Vertex refused its create in the
    region the region rule moved it to (quota, or a body that region cannot run: an
    accelerator it does not offer, a regional key). A refused create made no job there, so
    the recorded region may be replaced, and the retry is due at once; without this the move
    would fail a job its own region runs, or park it there past its deadline. The claim is
    expired, not deleted, so the next delivery looks up (in every location used) before it
    creates. None unless the attempt is a retry recorded for ``location``, away from the
    request's location.

    Examples:
        >>> from datetime import UTC
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> record = JobRecord.decode({"state": "RETRYING", "attempt": 1,
        ...     "location": "us-east1", "baseLocation": "us-east1",
        ...     "regionChoice": {"attempt": 2, "location": "us-west1"}})
        >>> change = refused_away(record, 2, "us-west1", "quota", now)
        >>> change.record["regionChoice"]["location"], change.state.value
        ('us-east1', 'RETRYING')
        >>> change.record["regionsRefused"]
        ['us-west1']
        >>> refused_away(record, 2, "us-east1", "quota", now) is None
        True
    """
    home = record.home
    if home is None or location == home or record.chosen_location(attempt) != location:
        return None
    if record.state is not JobState.RETRYING or record.cancel_requested:
        return None
    reason = f"refused in {location}, back to {home}: {detail}"
    held = record.claim
    refused = list(dict.fromkeys((*record.regions_refused, location)))[-MAX_REGIONS_REFUSED:]
    fields = {
        "regionChoice": {
            "attempt": attempt,
            "location": home,
            "reason": clip(reason, 500),
            "at": now,
        },
        # A region that refused is not chosen again: its refusal would only recur.
        "regionsRefused": refused,
        "nextAttemptAt": now,  # at once: the request's own region has not refused it
        "claim": {"token": held.token if held else None, "expiresAt": now, "attempt": attempt},
        "updatedAt": now,
    }
    return Change(state=record.state, record=fields)


#: Why an attempt given up in a region that did not answer ended (its attempt's ``errorClass``).
UNANSWERED = "unanswered"


def unanswered_away(
    record: JobRecord, attempt: int, location: str, detail: str, now: datetime
) -> Change | None:
    """Give ``attempt`` up in the region the region rule moved it to, once that region has
    not answered a create and then a lookup (its create timed out, the claim expired, and
    the delivery that took it over could not look it up there): the next attempt goes back
    to the request's location, due at once, charged to no budget. Waiting for the region
    would spend the deadline's slack on a region that may never answer.

    Attempt ``attempt`` itself is not made again at home: its create may have happened in
    the region that does not answer, and two jobs must never run one attempt. It ends
    (``errorClass`` ``unanswered``) with no job; a job it made there is a stray of the
    request, found by the tick's listing of every location used once the region answers,
    and cancelled. None unless the attempt is a retry recorded for ``location``, away from
    the request's location, with no cancel asked.

    Examples:
        >>> from datetime import UTC
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> record = JobRecord.decode({"state": "RETRYING", "attempt": 1,
        ...     "location": "us-east1", "baseLocation": "us-east1",
        ...     "regionChoice": {"attempt": 2, "location": "us-west1"}})
        >>> change = unanswered_away(record, 2, "us-west1", "timed out", now)
        >>> change.record["attempt"], change.record["regionChoice"]["location"]
        (2, 'us-east1')
        >>> change.record["regionChoice"]["attempt"], change.attempt["errorClass"]
        (3, 'unanswered')
        >>> unanswered_away(record, 2, "us-east1", "timed out", now) is None
        True
    """
    home = record.home
    if home is None or location == home or record.chosen_location(attempt) != location:
        return None
    if record.state is not JobState.RETRYING or record.cancel_requested:
        return None
    if pending_attempt(record) != attempt:
        return None
    reason = clip(f"attempt {attempt} given up in {location}, which did not answer: {detail}")
    held = record.claim
    fields = {
        "attempt": attempt,
        "regionChoice": {
            "attempt": attempt + 1,
            "location": home,
            "reason": clip(f"{location} did not answer, back to {home}", 500),
            "at": now,
        },
        "regionsRefused": list(dict.fromkeys((*record.regions_refused, location)))[
            -MAX_REGIONS_REFUSED:
        ],
        "locationsUsed": with_location(record, location),
        "nextAttemptAt": now,
        "claim": {"token": held.token if held else None, "expiresAt": now, "attempt": attempt},
        "updatedAt": now,
    }
    ended = {
        "attempt": attempt,
        "state": JobState.FAILED.value,
        "location": location,
        "errorClass": UNANSWERED,
        "reason": reason,
        "submittedAt": now,
        "endedAt": now,
    }
    return Change(state=record.state, record=fields, attempt=ended, attempt_no=attempt)


#: A QUEUED job still waiting this long past its max wait is flagged: Vertex should have
#: expired it by then, so the record and Vertex disagree about something.
OVERDUE_GRACE = timedelta(minutes=10)


def is_overdue(record: JobRecord, now: datetime) -> bool:
    """A QUEUED job waiting past its max wait (plus a grace), not flagged yet."""
    wait, submitted = record.max_wait_seconds, record.attempt_submitted_at
    if record.state is not JobState.QUEUED or not wait or submitted is None:
        return False
    return not record.overdue_since and now >= submitted + timedelta(seconds=wait) + OVERDUE_GRACE


def overdue_change(record: JobRecord, now: datetime) -> Change | None:
    """Flag an overdue job (``overdueSince``); the state stays QUEUED."""
    if not is_overdue(record, now):
        return None
    return Change(state=JobState.QUEUED, record={"overdueSince": now, "updatedAt": now})
