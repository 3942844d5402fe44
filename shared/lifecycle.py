"""Lifecycle services: follow every job's authoritative state, and recover from lost capacity.

Every hint is only a hint: the state written is always the one read from Vertex. A failed or
timed-out Vertex read raises before anything is written, so a control-plane error never
changes a job's state and never starts a retry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.commands import Reconcile, TrackJob
from shared.config import Settings
from shared.deployments import Deployments, refresh_deployments
from shared.domain.checkpoints import Checkpoint, checkpoint_prefix
from shared.domain.hints import HintAction, parse_hint
from shared.domain.jobs import Change, JobState, VertexJob
from shared.domain.recovery import RecoveryPolicy, failed, settle, work_lost_seconds
from shared.domain.request import JobRequest, job_spec_of
from shared.domain.retry import placement_for
from shared.errors import BackendRejected, HintDeferred
from shared.logs import get_logger, request_context
from shared.ports import CheckpointStore, JobBackend, JobStore, Notifier
from shared.services import AttemptPlan, Outcome, flush_outbox, submit_attempt

log = get_logger("lifecycle")

# A QUEUED job still waiting this long past its max wait is flagged: Vertex should have
# expired it by then, so the record and Vertex disagree about something.
OVERDUE_GRACE = timedelta(minutes=10)
LIST_MARGIN = timedelta(hours=1)


@dataclass
class Tracker:
    """Ports for the lifecycle handlers, wired once per instance by the bootstrap."""

    settings: Settings
    store: JobStore
    backend: JobBackend
    checkpoints: CheckpointStore
    notifier: Notifier
    recovery: RecoveryPolicy
    clock: Callable[[], datetime]
    # Spot deployments followed by the tick; None where an instance follows none.
    deployments: Deployments | None = None
    sleep: Callable[[float], None] = time.sleep


def track_job(cmd: TrackJob, tracker: Tracker) -> str | None:
    """Handle one state hint; returns the record's new state when it changed.

    Raises:
        HintDeferred: the hint names a job no record knows yet, and is recent: Vertex can
            log a job before its attempt is recorded, so redelivery tries again.
    """
    try:
        body = json.loads(cmd.message.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        log.warning(f"unreadable hint acknowledged: {exc}")
        return None
    hint = parse_hint(body)
    if hint is None:
        log.info(
            "foreign hint acknowledged", extra={"fields": {"messageId": cmd.message.message_id}}
        )
        return None
    now = tracker.clock()
    published = _published(cmd.message.publish_time, now)
    request_id = tracker.store.find_by_job_id(hint.job_id)
    if request_id is None:
        # Vertex can log a new job before its attempt is recorded: a recent hint is kept for
        # redelivery; an old one is about a job that is not flexjobs'.
        if (now - published).total_seconds() < tracker.settings.hint_recent_seconds:
            raise HintDeferred(f"job {hint.job_id} is not a recorded attempt yet")
        log.info(
            "hint about a job flexjobs does not own acknowledged",
            extra={"fields": {"jobId": hint.job_id}},
        )
        return None
    with request_context(request_id):
        record = tracker.store.get(request_id) or {}
        if record.get("vertexJobId") != hint.job_id:
            log.info(
                "hint about an earlier attempt acknowledged",
                extra={"fields": {"jobId": hint.job_id}},
            )
            return None
        interval = tracker.settings.hint_coalesce_seconds
        action, lease_start = tracker.store.begin_read(request_id, now, interval, published)
        if action is HintAction.TRAIL and lease_start is not None:
            # The first hint inside the window reads for all of them once the window closes.
            wait = (lease_start - now).total_seconds() + interval
            tracker.sleep(max(0.0, wait))
            tracker.store.renew_read(request_id, tracker.clock())
        elif action is not HintAction.READ:
            log.debug(f"hint {action.value}", extra={"fields": {"jobId": hint.job_id}})
            return None  # covered by a read, or a trailing read is promised
        try:
            # A trailing read must see the record as it is now; an immediate one has it.
            fresh = action is HintAction.TRAIL
            return _read_current(tracker, request_id, None if fresh else record)
        except Exception:
            # The read failed (a control-plane fault): drop the lease, so the redelivery of
            # this hint reads Vertex instead of finding itself covered or pending.
            tracker.store.release_reader(request_id)
            raise


def _read_current(
    tracker: Tracker, request_id: str, record: dict[str, Any] | None = None
) -> str | None:
    record = record if record is not None else tracker.store.get(request_id) or {}
    if not record.get("vertexJob") or JobState(record["state"]).terminal:
        return None
    return observe_job(tracker, request_id, tracker.backend.get(str(record["vertexJob"])))


def _published(raw: str | None, fallback: datetime) -> datetime:
    if not raw:
        return fallback
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        # An unreadable publish time is treated as "now": the hint is then never "covered".
        return fallback


def observe_job(tracker: Tracker, request_id: str, job: VertexJob) -> str | None:
    """Settle the record against one authoritative read; run a retry that is due at once."""
    now = tracker.clock()
    change = tracker.store.transact(
        request_id, lambda record: settle(record, job, now, tracker.recovery)
    )
    if change is None:
        # Nothing new to send; a notification a failed publish left behind is sent by the
        # tick, which flushes every pending outbox, so unchanged reads cost no extra read.
        return None
    flush_outbox(request_id, tracker.store, tracker.notifier)
    log.info(
        f"job is {change.state.value}",
        extra={
            "fields": {
                "vertexJob": job.name,
                "vertexState": job.state,
                "reason": change.record.get("reason"),
            }
        },
    )
    due = change.record.get("nextAttemptAt")
    if change.state is JobState.RETRYING and due is not None and due <= now:
        run_retry(tracker, request_id)
    return change.state.value


def run_retry(tracker: Tracker, request_id: str) -> Outcome | None:
    """Submit attempt n+1 of a RETRYING request, from its latest complete checkpoint."""
    with request_context(request_id):
        record = tracker.store.get(request_id) or {}
        if record.get("state") != JobState.RETRYING.value:
            return None
        attempt = int(record["attempt"])
        now = tracker.clock()
        token = tracker.store.claim_retry(
            request_id, attempt, now, tracker.settings.claim_ttl_seconds
        )
        if token is None:
            return None  # not due, or another delivery is submitting it
        try:
            return _resubmit(tracker, request_id, record, token)
        except BackendRejected as exc:
            reason = f"attempt {attempt + 1} refused by Vertex AI: {exc}"
            tracker.store.transact(request_id, lambda rec: failed(rec, tracker.clock(), reason))
            flush_outbox(request_id, tracker.store, tracker.notifier)
            return Outcome.FAILED
        except Exception:
            tracker.store.release(request_id, token, tracker.clock())
            raise


def _resubmit(tracker: Tracker, request_id: str, record: dict[str, Any], token: str) -> Outcome:
    kind = str(record["kind"])
    spec = json.loads(record["request"])
    options = json.loads(record.get("options") or "{}")
    attempt = int(record["attempt"])
    base_strategy = JobRequest(request_id, kind, spec).strategy
    placement = placement_for(
        options.get("fallback"),
        int(record.get("capacityFailures") or 0),
        base_strategy,
        str(record.get("baseLocation") or record.get("location") or tracker.settings.location),
    )
    latest = _latest_checkpoint(tracker, kind, spec, options)
    previous = tracker.store.get_attempt(request_id, attempt) or {}
    lost = work_lost_seconds(previous, latest, previous.get("resumedFrom"))
    tracker.store.update_attempt(request_id, attempt, {"workLostSeconds": lost})
    extra: dict[str, Any] = {"workLostSeconds": float(record.get("workLostSeconds") or 0) + lost}
    if latest is not None:
        extra["latestCheckpoint"] = latest.to_dict()
    plan = AttemptPlan(
        attempt=attempt + 1,
        strategy=placement.strategy,
        location=placement.location,
        resume_from=latest.uri if latest else None,
        record_extra=extra,
    )
    request = JobRequest(request_id, kind, spec, location=placement.location)
    return submit_attempt(
        request, token, plan, store=tracker.store, backend=tracker.backend, clock=tracker.clock
    )


def _latest_checkpoint(
    tracker: Tracker, kind: str, spec: dict[str, Any], options: dict[str, Any]
) -> Checkpoint | None:
    job_spec = job_spec_of(kind, spec) or {}
    output = job_spec.get("baseOutputDirectory") or {}
    prefix = checkpoint_prefix(options, output.get("outputUriPrefix"))
    return tracker.checkpoints.latest(prefix) if prefix else None


def reconcile(cmd: Reconcile, tracker: Tracker) -> int:
    """The scheduler tick: due retries, one paged list per location, overdue flags, outboxes.

    Returns how many records changed state.
    """
    now = tracker.clock()
    for request_id in tracker.store.due_retries(now):
        run_retry(tracker, request_id)
    active = [r for r in tracker.store.active() if r.get("vertexJob")]
    by_name = {str(r["vertexJob"]): r for r in active}
    locations = {str(r.get("location") or tracker.settings.location) for r in active}
    submitted = [r["attemptSubmittedAt"] for r in active if r.get("attemptSubmittedAt")]
    # Only jobs created since the oldest active attempt (less a margin for the two clocks).
    since = min(submitted) - LIST_MARGIN if submitted else None
    changed = 0
    for location in sorted(locations):
        for job in tracker.backend.list_labelled(location, created_since=since):
            record = by_name.get(job.name)
            if record is not None:
                with request_context(str(record["requestId"])):
                    changed += observe_job(tracker, str(record["requestId"]), job) is not None
    for record in active:
        _flag_overdue(tracker, record, now)
    for request_id in tracker.store.with_outbox():
        flush_outbox(request_id, tracker.store, tracker.notifier)
    if tracker.deployments is not None:
        changed += refresh_deployments(tracker.deployments)
    return changed


def _flag_overdue(tracker: Tracker, record: dict[str, Any], now: datetime) -> None:
    wait = record.get("maxWaitSeconds")
    submitted = record.get("attemptSubmittedAt")
    if record.get("state") != JobState.QUEUED.value or not wait or submitted is None:
        return
    if record.get("overdueSince") or now < submitted + timedelta(seconds=wait) + OVERDUE_GRACE:
        return
    request_id = str(record["requestId"])
    with request_context(request_id):
        log.warning(
            "job queued past its max wait",
            extra={"fields": {"vertexJob": record.get("vertexJob"), "maxWaitSeconds": wait}},
        )
        tracker.store.transact(request_id, lambda rec: _overdue_change(rec, now))


def _overdue_change(record: dict[str, Any], now: datetime) -> Change | None:
    if record.get("state") != JobState.QUEUED.value:
        return None
    return Change(state=JobState.QUEUED, record={"overdueSince": now, "updatedAt": now})
