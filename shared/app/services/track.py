"""Following a state hint: the job it names is read from Vertex and its record settled, at most
once per coalescing window (a read lease on the record)."""

from __future__ import annotations

import json
from datetime import datetime

from shared.app.context import Tracker
from shared.app.services.settle import settle_current
from shared.domain.decisions.hints import HintAction, parse_hint, read_start
from shared.domain.model.delivery import Delivery
from shared.domain.model.values import parse_rfc3339
from shared.kernel.errors import HintDeferred
from shared.kernel.logs import get_logger, request_context

log = get_logger("lifecycle")


def follow_hint(message: Delivery, tracker: Tracker) -> str | None:
    """Follow one state hint; returns the record's new state when it changed.

    Raises:
        HintDeferred: the hint names a job no record knows yet, and is recent: Vertex can
            log a job before its attempt is recorded, so redelivery tries again.
    """
    try:
        body = json.loads(message.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        log.warning(f"unreadable hint acknowledged: {exc}")
        return None
    hint = parse_hint(body)
    if hint is None:
        log.info("foreign hint acknowledged", extra={"fields": {"messageId": message.message_id}})
        return None
    now = tracker.clock()
    published = _published(message.publish_time, now)
    # One query finds the record and reads it: the lease, the settle and the outbox below
    # decide on what it returned and on what each of them wrote, with no read in between.
    record = tracker.jobs.by_job_id(hint.job_id)
    if record is None:
        # Vertex can log a new job before its attempt is recorded: a recent hint is kept for
        # redelivery; an old one is about a job that is not flexjobs'.
        if (now - published).total_seconds() < tracker.settings.hint_recent_seconds:
            raise HintDeferred(f"job {hint.job_id} is not a recorded attempt yet")
        log.info(
            "hint about a job flexjobs does not own acknowledged",
            extra={"fields": {"jobId": hint.job_id}},
        )
        return None
    request_id = record.request_id
    with request_context(request_id):
        if record.vertex_job_id != hint.job_id:
            log.info(
                "hint about an earlier attempt acknowledged",
                extra={"fields": {"jobId": hint.job_id}},
            )
            return None
        interval = tracker.settings.hint_coalesce_seconds
        action, lease_start, leased = tracker.jobs.begin_read(
            request_id, now, interval, published, record.stored, message_id=message.message_id
        )
        if action is HintAction.TRAIL and lease_start is not None:
            # The first hint inside the window reads for all of them once the window closes.
            wait = (lease_start - now).total_seconds() + interval
            tracker.sleep(max(0.0, wait))
            tracker.jobs.renew_read(request_id, tracker.clock())
            # A trailing read must see the record as it is now.
            leased = None
        elif action is not HintAction.READ:
            log.debug(f"hint {action.value}", extra={"fields": {"jobId": hint.job_id}})
            return None  # covered by a read, or a trailing read is promised
        else:
            # The lease dates the read from read_start: begin it then, not before.
            wait = (read_start(published, now) - now).total_seconds()
            if wait > 0:
                tracker.sleep(wait)
        try:
            return settle_current(tracker, request_id, leased)
        except Exception:
            # The read failed (a control-plane fault): drop the lease, so the redelivery of
            # this hint reads Vertex instead of finding itself covered or pending.
            tracker.jobs.release_reader(request_id)
            raise


def _published(raw: str | None, fallback: datetime) -> datetime:
    # An unreadable publish time is treated as "now": the hint is then never "covered".
    return parse_rfc3339(raw) or fallback
