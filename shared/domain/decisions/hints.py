"""State hints: what arrives on the job-events topic, reduced to the job it is about.

A hint is never trusted for state, order or count; it only says *which* job to read again.
Three shapes are understood:

* a Cloud Logging sink entry for ``resource.type="ml_job"`` (``resource.labels.job_id``);
* an audit-log entry (``protoPayload.resourceName`` naming a custom job, a
  hyperparameter-tuning job or a training pipeline);
* ``{"jobName": "projects/…/locations/…/customJobs/ID"}`` (or ``hyperparameterTuningJobs/ID``,
  ``trainingPipelines/ID``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain.model.kinds import TRAINING
from shared.domain.model.records import JobRecord

# Every resource flexjobs creates: one collection per training kind (custom jobs,
# hyperparameter-tuning jobs, training pipelines).
_JOB_NAME = re.compile(
    r"^projects/[^/]+/locations/([^/]+)/"
    rf"(?:{'|'.join(re.escape(kind.collection) for kind in TRAINING)})"
    r"/(\d+)$"
)
# The log resource types whose entries name a job by its id (``ml_job``). A tuple, not a set:
# a hint's type is untrusted and may be unhashable (a list), which ``in`` a set would raise on.
_LOG_RESOURCES = tuple(dict.fromkeys(k.log_resource for k in TRAINING if k.log_resource))


@dataclass(frozen=True)
class JobHint:
    """The job a hint is about: its numeric id (all a hint is trusted for)."""

    job_id: str


def _from_name(name: object) -> JobHint | None:
    match = _JOB_NAME.fullmatch(name) if isinstance(name, str) else None
    return JobHint(job_id=match.group(2)) if match else None


def parse_hint(body: Any) -> JobHint | None:
    """Return the job a hint names, or None for a foreign or malformed hint.

    Examples:
        >>> parse_hint({"jobName": "projects/p/locations/us-central1/customJobs/42"}).job_id
        '42'
        >>> parse_hint({"resource": {"type": "ml_job", "labels": {"job_id": "42"}}}).job_id
        '42'
    """
    if not isinstance(body, dict):
        return None
    if "jobName" in body:
        return _from_name(body["jobName"])
    payload = body.get("protoPayload")
    if isinstance(payload, dict):
        return _from_name(payload.get("resourceName"))
    resource = body.get("resource")
    if isinstance(resource, dict) and resource.get("type") in _LOG_RESOURCES:
        labels = resource.get("labels")
        job_id = labels.get("job_id") if isinstance(labels, dict) else None
        if isinstance(job_id, str) and job_id.isdigit():
            return JobHint(job_id=job_id)
    return None


class HintAction(StrEnum):
    """What to do with a hint for a job flexjobs owns."""

    READ = "read"  # read Vertex now (this delivery takes the read lease for one window)
    COVERED = "covered"  # a read that began after the hint was published already saw it
    PENDING = "pending"  # inside the window: a trailing read is already promised
    TRAIL = "trail"  # inside the window, the first such hint: read when the window closes


# Pub/Sub's publish time and the function's clock are different clocks: a read counts as
# covering a hint only when it began at least this long after the hint was published. A hint
# is published after the state change it announces (Vertex, then the log sink, then Pub/Sub,
# seconds in all), so a read that begins at its publish time already sees the change while
# the clocks disagree by less than that; hosts synchronised by NTP do, by far. Were they
# ever to disagree by more, a change a covered hint announced is still settled by the next
# tick: a hint is never the only way a change is seen.
CLOCK_SKEW_SECONDS = 0.0
# A hint published "in the future" by the function's clock waits at most this long for it.
MAX_READ_WAIT_SECONDS = 1.0


def read_start(published: datetime, now: datetime) -> datetime:
    """When a read for a hint published at ``published`` begins: now, or once the skew margin
    after the publish has passed by this function's clock (waiting at most
    :data:`MAX_READ_WAIT_SECONDS`).

    A read dated so covers every copy of the hint published with it (a log sink sends
    several entries per state change): they are acknowledged as covered, instead of each
    holding a delivery for a window as the trailing reader.
    """
    start = published + timedelta(seconds=CLOCK_SKEW_SECONDS)
    return max(now, min(start, now + timedelta(seconds=MAX_READ_WAIT_SECONDS)))


def hint_action(
    last_read: datetime | None,
    published: datetime,
    now: datetime,
    interval_seconds: float,
    previous_read: datetime | None = None,
) -> HintAction:
    """Where a hint stands against the job's reads (READ, COVERED or PENDING).

    At most two reads begin in any window of ``interval_seconds``: a second distinct change
    soon after a read (a job preempted seconds after it was seen starting) is read at once,
    and only a third waits for the window. ``previous_read`` is the read before the last.

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> t = datetime(2026, 1, 1, tzinfo=UTC)
        >>> hint_action(None, t, t, 10)
        <HintAction.READ: 'read'>
        >>> hint_action(t + timedelta(seconds=5), t, t + timedelta(seconds=6), 10)
        <HintAction.COVERED: 'covered'>
        >>> hint_action(t, t + timedelta(seconds=2), t + timedelta(seconds=3), 10)
        <HintAction.READ: 'read'>
        >>> hint_action(t, t + timedelta(seconds=2), t + timedelta(seconds=3), 10, t)
        <HintAction.PENDING: 'pending'>
    """
    if last_read is None:
        return HintAction.READ
    if (last_read - published).total_seconds() >= CLOCK_SKEW_SECONDS:
        return HintAction.COVERED
    if (now - last_read).total_seconds() >= interval_seconds:
        return HintAction.READ
    if previous_read is None or (now - previous_read).total_seconds() >= interval_seconds:
        return HintAction.READ  # the window's second read
    return HintAction.PENDING


def take_hint(
    record: JobRecord,
    published: datetime,
    now: datetime,
    interval_seconds: float,
    message_id: str | None = None,
) -> tuple[HintAction, dict[str, Any]]:
    """Coalesce hint storms to at most two Vertex reads per job per window (and one trailing
    read), losing nothing.

    Returns the action and the record fields to write with it. The first hint inside a
    window becomes the *trailing* reader: it waits for the window to close, then reads once
    for every hint of the window, so a storm costs one read per window and one waiting
    delivery, and a single hint costs no wait at all. No hint is ever refused for coalescing
    (a refused push slows the whole subscription).

    The promise of a trailing read is a lease held by one delivery (``hintHolder``, its
    message id): were that delivery killed while it waits, its redelivery (the same message)
    takes the promise up again, rather than find it promised and leave with nothing read;
    once the window has closed, any hint reads.
    """
    action = hint_action(
        record.last_read_at, published, now, interval_seconds, record.previous_read_at
    )
    if action is HintAction.READ:
        fields = {
            "lastReadAt": read_start(published, now),
            "previousReadAt": record.last_read_at,
            "hintPending": False,
        }
        return action, fields
    if action is HintAction.PENDING and not record.hint_pending:
        return HintAction.TRAIL, {"hintPending": True, "hintHolder": message_id}
    if action is HintAction.PENDING and message_id is not None and record.hint_holder == message_id:
        return HintAction.TRAIL, {}  # the holder, redelivered: it reads for the window still
    return action, {}
