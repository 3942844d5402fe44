"""The scheduler tick: due submissions, one paged listing per location, strays, overdue flags,
outboxes, pending cancels, admission and deployments, each item isolated."""

from __future__ import annotations

import functools
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from shared.app.context import Tracker
from shared.app.services import admission
from shared.app.services.deploy import refresh_deployments
from shared.app.services.settle import run_retry, settle_current, settle_job, submitter
from shared.app.steps.cancels import cancel_until_confirmed, drive_cancels
from shared.app.steps.outbox import apply_and_notify, flush_outbox
from shared.app.steps.sweep import Sweep
from shared.app.steps.switches import yield_attempt
from shared.app.steps.watch import save as save_watch
from shared.app.steps.watch import watched
from shared.domain.capacity.situations import waited_in_vain
from shared.domain.decisions.jobs import observe
from shared.domain.decisions.recovery import GAVE_UP, finish
from shared.domain.decisions.submissions import (
    is_overdue,
    is_stray,
    overdue_change,
)
from shared.domain.model.changes import Change
from shared.domain.model.ids import LABEL_ATTEMPT, LABEL_REQUEST
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState, from_vertex
from shared.domain.model.values import clip
from shared.domain.model.vertex_jobs import VertexJob, location_of
from shared.kernel.errors import JobGone
from shared.kernel.events import Event, logged
from shared.kernel.logs import get_logger

log = get_logger("lifecycle")

LIST_MARGIN = timedelta(hours=1)
# How long a record that ended is still watched for stray jobs under its labels.
STRAY_WATCH = timedelta(hours=2)


def reconcile(tracker: Tracker) -> int:
    """The scheduler tick: due submissions, one paged list per location, strays, overdue
    flags, outboxes, pending cancels and deployments. Returns how many records changed state.

    Every record, every listing and every query is isolated
    (:class:`~shared.app.steps.sweep.Sweep`): a failure is logged with its requestId, counted, and
    left for the next tick, and the tick still acknowledges. Only when Firestore answered none of
    its queries does it raise (then nothing could run, and Pub/Sub redelivers the tick).

    Raises:
        StoreUnavailable: every query of the tick failed.
    """
    now = tracker.clock()
    store = tracker.jobs
    sweep = Sweep("tick")
    for request_id in sweep.query("due submissions", store.due_submissions, now):
        sweep.each(request_id, "submit", run_retry, tracker, request_id)
    # Every active record, and those that ended lately: they are still watched for strays (a
    # create that lands after its request ended, a timed-out create or a cancel that came
    # first, has no other sweeper). From the watch list: a quiet record costs no read.
    seen = sweep.read(
        "watched records", watched, None, store.watch_store, store.job_store, now, STRAY_WATCH
    )
    active = seen.active if seen is not None else []
    ended = seen.ended if seen is not None else []
    changed = _reconcile_listings(tracker, sweep, active, ended)
    if tracker.queues is not None:
        queues = tracker.queues
        # The waiting records are among the active ones: the pass takes them from there, as
        # of the watch list's mark, and saves the admission line built from them.
        mark = seen.watch.mark if seen is not None and seen.watch is not None else None
        sweep.each(
            None,
            "admission",
            functools.partial(
                admission.tick, quota=tracker.quota_limits, read=seen is not None, mark=mark
            ),
            tracker,
            queues,
            active,
            submitter(tracker),
        )
    for record in active:
        if is_overdue(record, now):
            sweep.each(record.request_id, "overdue", _flag_overdue, tracker, record, now)
    for request_id in sweep.query("outboxes", store.with_outbox):
        sweep.each(request_id, "outbox", flush_outbox, request_id, store, tracker.notifier)
    for request_id in sweep.query("pending cancels", store.with_pending_cancels):
        sweep.each(request_id, "cancel", _retry_cancels, tracker, request_id)
    if tracker.deployments is not None:
        changed += (
            sweep.each(None, "deployments", refresh_deployments, tracker.deployments, sweep) or 0
        )
    if seen is not None:
        # Saved once the records were used: a tick that dies before this saves nothing, and
        # the next one syncs from the same mark (the tally adds each end once).
        sweep.each(None, "save watch", save_watch, store.watch_store, seen)
    watch = {"watch": seen.how, "recordsRead": seen.reads} if seen is not None else {}
    log.info(
        "tick done",
        extra=logged(
            Event.TICK_DONE, changed=changed, failed=sweep.failed, **watch, **sweep.failures
        ),
    )
    sweep.raise_if_nothing_ran()
    return changed


def _reconcile_listings(
    tracker: Tracker, sweep: Sweep, active: list[JobRecord], ended: list[JobRecord]
) -> int:
    """One paged listing per location, each listed job settled against its record (or
    cancelled as a stray), then every active record whose job its listing no longer shows
    read whole. Returns how many records changed state."""
    by_name = {r.vertex_job: r for r in active if r.vertex_job}
    by_label = {r.run_id: r for r in [*ended, *active] if r.run_id}
    changed = 0
    listed: list[VertexJob] = []
    answered: set[str] = set()
    for location, since in _listing_windows(active, ended, tracker.settings.location):
        jobs = sweep.each(None, f"list {location}", _listed, tracker, location, since)
        if jobs is not None:
            listed += jobs
            answered.add(location)
    # A request's jobs side by side: one may show that another is a stray (is_stray).
    by_request: dict[str, list[VertexJob]] = defaultdict(list)
    for job in listed:
        by_request[job.labels.get(LABEL_REQUEST, "")].append(job)
    for job in listed:
        # A listed job belongs to the record that follows it, else to the request its label
        # names (then it may be a stray).
        label = job.labels.get(LABEL_REQUEST, "")
        record = by_name.get(job.name) or by_label.get(label)
        siblings = by_request[label]
        if record is None:
            state_now = from_vertex(job.state)
            if state_now is not None and not state_now.terminal:
                # A live job under flexjobs' labels that no watched record follows: its record
                # is looked up (the list may have missed it), so no live job goes unfollowed.
                found = sweep.each(None, "unmatched", _settle_unmatched, tracker, job, siblings)
                changed += found is not None
            continue
        state = sweep.each(
            record.request_id, "reconcile", _settle_listed, tracker, record, job, siblings
        )
        changed += state is not None
    # Level triggering: a record whose job its location's listing no longer shows (deleted in
    # Vertex, say) is read whole and its job read, as a hint would have it read: its entry in
    # the watch list says nothing about that.
    names = {job.name for job in listed}
    for record in active:
        name = record.vertex_job
        if name and name not in names and location_of(name) in answered:
            state = sweep.each(record.request_id, "unlisted", _read_unlisted, tracker, record)
            changed += state is not None
    return changed


def _settle_unmatched(tracker: Tracker, job: VertexJob, siblings: list[VertexJob]) -> str | None:
    """A live labelled job no entry of the watch list matches: settled on the record that
    names it, if any (a record the list missed); one without a record is not flexjobs'."""
    record = tracker.jobs.by_job_id(job.job_id)
    if record is None:
        return None
    log.warning("a live job's record was not in the watch list", extra=_fields(job))
    return _settle_listed(tracker, record, job, siblings)


def _read_unlisted(tracker: Tracker, record: JobRecord) -> str | None:
    """A record whose job its listing no longer shows: its job read as a hint would read it;
    a job Vertex no longer has (deleted) ends the record FAILED, saying so, rather than be
    looked for every tick."""
    try:
        return settle_current(tracker, record.request_id)
    except JobGone as exc:
        name = record.vertex_job
        reason = clip(f"its Vertex job {name} no longer exists (deleted?): {exc}")

        def gone(current: JobRecord) -> Change | None:
            if current.vertex_job != name:
                return None  # moved on meanwhile: that job is not the record's any more
            return finish(current, JobState.FAILED, tracker.clock(), reason)

        change = apply_and_notify(tracker, record.request_id, gone)
        if change is None:
            return None
        if tracker.queues is not None:
            admission.release(tracker, tracker.queues, [record.request_id], submitter(tracker))
        log.warning("job gone from Vertex: record failed", extra=_fields_of(record))
        return change.state.value


def _fields_of(record: JobRecord) -> dict[str, Any]:
    return {"fields": {"vertexJob": record.vertex_job, "attempt": record.attempt}}


def _listed(tracker: Tracker, location: str, since: datetime | None) -> list[VertexJob]:
    return list(tracker.backend.list_labelled(location, created_since=since))


def _listing_windows(
    active: list[JobRecord], ended: list[JobRecord], default_location: str
) -> list[tuple[str, datetime | None]]:
    """One listing per location of a watched record (each it used), from the oldest time a
    job of it may have been created.

    An active record is anchored on its current job's create time as Vertex reports it
    (``vertexCreateTime``), not on when the record was written: a job adopted hours after
    Vertex made it must stay in reach. An ended record is watched only for strays created
    after it ended (while it was active, its strays were found with it).
    """
    anchors: dict[str, datetime] = {}
    watched = [(r, r.vertex_create_time or r.attempt_submitted_at) for r in active]
    watched += [(r, r.ended_at) for r in ended]
    for record, since in watched:
        anchor = since or record.created_at
        if anchor is None:
            continue
        # Every location the request used or chose (locationsUsed): a create that timed out
        # in one it has since left may still have landed there.
        for location in record.locations or (default_location,):
            anchors[location] = min(anchor, anchors.get(location, anchor))
    return [(loc, anchors[loc] - LIST_MARGIN) for loc in sorted(anchors)]


def _settle_listed(
    tracker: Tracker, record: JobRecord, job: VertexJob, siblings: list[VertexJob]
) -> str | None:
    """Settle one listed job against the tick's (partial) read of its record: a job whose
    state moves the record on is settled on the record read whole; one that does not costs
    no read at all. ``siblings``: every listed job under the same request label."""
    request_id = record.request_id
    if record.vertex_job == job.name:
        moves = observe(record, job, tracker.clock()) is not None
        state = settle_job(tracker, request_id, job, record) if moves else None
        reason = waited_in_vain(record, job.name, job.state, tracker.clock())
        if state is None and reason is not None:
            # An AUTO attempt queued past its waitUntil: the policy chooses again, with no
            # retry budget charged (the wait cost nothing but time).
            given_up = yield_attempt(
                tracker, request_id, job.name, why=GAVE_UP, reason=reason, known=record
            )
            if not given_up:
                # The record moved on meanwhile (the next tick sees it as it is now), or it
                # cannot keep one more pending cancel: say so, the wait goes on.
                log.warning(f"not given up: {reason}", extra=_fields(job))
        return state
    ended = from_vertex(job.state)
    attempt = job.labels.get(LABEL_ATTEMPT, "")
    earlier = attempt.isdigit() and int(attempt) < record.attempt
    if ended is not None and ended.terminal and earlier:
        return None  # an earlier attempt's job, ended: nothing to follow, nothing to cancel
    # A job of the current attempt (live, or ended) or a live one under the request's label
    # that the entry does not name: the entry may be stale (its record written without its
    # stamp, by an older revision or by hand, which no sync of the list sees), so the record
    # is read whole before anything is decided on it.
    fresh = tracker.jobs.get(request_id)
    if fresh is None:
        return None
    if fresh.vertex_job == job.name:
        log.warning("a record the watch list held stale follows a job", extra=_fields(job))
        return _settle_listed(tracker, fresh, job, siblings)
    if ended is not None and ended.terminal:
        return None  # not the record's job, and ended: nothing to follow, nothing to cancel
    if is_stray(fresh, job, tracker.clock(), siblings):
        # Created under one of this request's attempts but not the job its record follows (a
        # create that landed after its claim expired, a crash after a cancel): nothing will
        # ever follow it, so it is cancelled rather than left holding GPUs.
        log.warning("stray job found under the request's labels", extra=_fields(job))
        cancel_until_confirmed(tracker, request_id, [job.name])
    return None


def _retry_cancels(tracker: Tracker, request_id: str) -> list[str]:
    record = tracker.jobs.get(request_id)
    return drive_cancels(tracker, request_id, list(record.pending_cancels if record else ()))


def _fields(job: VertexJob) -> dict[str, Any]:
    return {"fields": {"vertexJob": job.name, "labels": job.labels, "vertexState": job.state}}


def _flag_overdue(tracker: Tracker, record: JobRecord, now: datetime) -> None:
    fields = {"vertexJob": record.vertex_job, "maxWaitSeconds": record.max_wait_seconds}
    log.warning("job queued past its max wait", extra={"fields": fields})
    tracker.jobs.apply(record.request_id, lambda current: overdue_change(current, now))
