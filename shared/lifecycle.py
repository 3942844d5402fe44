"""Lifecycle services: follow every job's authoritative state from hints and ticks.

Every hint is only a hint: the state written is always the one read from Vertex. A failed or
timed-out Vertex read raises before anything is written, so a control-plane error never
changes a job's state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared.commands import Reconcile, TrackJob
from shared.config import Settings
from shared.domain.hints import parse_hint
from shared.domain.jobs import VertexJob
from shared.logs import get_logger, request_context
from shared.ports import JobBackend, JobStore

log = get_logger("lifecycle")


@dataclass
class Tracker:
    """Ports for the lifecycle handlers, wired once per instance by the bootstrap."""

    settings: Settings
    store: JobStore
    backend: JobBackend
    clock: Callable[[], datetime]


def track_job(cmd: TrackJob, tracker: Tracker) -> str | None:
    """Handle one state hint; returns the record's new state when it changed."""
    try:
        body = json.loads(cmd.message.data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        log.warning(f"unreadable hint acknowledged: {exc}")
        return None
    hint = parse_hint(body)
    if hint is None:
        log.info(
            "foreign hint acknowledged", extra={"fields": {"messageId": cmd.message.message_id}}
        )
        return None
    request_id = tracker.store.find_by_job_id(hint.job_id)
    if request_id is None:
        log.info("hint for a job flexjobs does not own", extra={"fields": {"jobId": hint.job_id}})
        return None
    with request_context(request_id):
        record = tracker.store.get(request_id) or {}
        now = tracker.clock()
        if not tracker.store.begin_read(request_id, now, tracker.settings.hint_coalesce_seconds):
            return None  # coalesced: another hint read Vertex a moment ago
        job = tracker.backend.get(str(record["vertexJob"]))
        return _apply(tracker, request_id, job)


def reconcile(cmd: Reconcile, tracker: Tracker) -> int:
    """Reconcile every active record with one paged list per location; returns changes."""
    active = [r for r in tracker.store.active() if r.get("vertexJob")]
    by_name = {str(r["vertexJob"]): str(r["requestId"]) for r in active}
    locations = {str(r.get("location") or tracker.settings.location) for r in active}
    changed = 0
    for location in sorted(locations):
        for job in tracker.backend.list_labelled(location):
            request_id = by_name.get(job.name)
            if request_id is not None:
                with request_context(request_id):
                    changed += _apply(tracker, request_id, job) is not None
    return changed


def _apply(tracker: Tracker, request_id: str, job: VertexJob) -> str | None:
    state = tracker.store.apply_observation(request_id, job, tracker.clock())
    if state is not None:
        log.info(
            f"job is {state}", extra={"fields": {"vertexJob": job.name, "vertexState": job.state}}
        )
    return state
