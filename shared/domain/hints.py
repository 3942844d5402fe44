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
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.domain.record import JobRecord

# Every resource flexjobs creates: custom jobs, hyperparameter-tuning jobs, training pipelines.
_JOB_NAME = re.compile(
    r"^projects/[^/]+/locations/([^/]+)/(?:customJobs|hyperparameterTuningJobs|trainingPipelines)"
    r"/(\d+)$"
)


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
    if isinstance(resource, dict) and resource.get("type") == "ml_job":
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
# covering a hint only when it began at least this long after the hint was published.
CLOCK_SKEW_SECONDS = 1.0


def hint_action(
    last_read: datetime | None, published: datetime, now: datetime, interval_seconds: float
) -> HintAction:
    """Where a hint stands against the job's read lease (READ, COVERED or PENDING).

    Examples:
        >>> from datetime import UTC, datetime, timedelta
        >>> t = datetime(2026, 1, 1, tzinfo=UTC)
        >>> hint_action(None, t, t, 10)
        <HintAction.READ: 'read'>
        >>> hint_action(t + timedelta(seconds=5), t, t + timedelta(seconds=6), 10)
        <HintAction.COVERED: 'covered'>
        >>> hint_action(t, t + timedelta(seconds=2), t + timedelta(seconds=3), 10)
        <HintAction.PENDING: 'pending'>
    """
    if last_read is None:
        return HintAction.READ
    if (last_read - published).total_seconds() >= CLOCK_SKEW_SECONDS:
        return HintAction.COVERED
    if (now - last_read).total_seconds() < interval_seconds:
        return HintAction.PENDING
    return HintAction.READ


def take_hint(
    record: JobRecord, published: datetime, now: datetime, interval_seconds: float
) -> tuple[HintAction, dict[str, Any]]:
    """Coalesce hint storms to at most one Vertex read per job per window, losing nothing.

    Returns the action and the record fields to write with it. The first hint inside a
    window becomes the *trailing* reader: it waits for the window to close, then reads once
    for every hint of the window, so a storm costs one read per window and one waiting
    delivery, and a single hint costs no wait at all. No hint is ever refused for coalescing
    (a refused push slows the whole subscription).
    """
    action = hint_action(record.last_read_at, published, now, interval_seconds)
    if action is HintAction.READ:
        return action, {"lastReadAt": now, "hintPending": False}
    if action is HintAction.PENDING and not record.hint_pending:
        return HintAction.TRAIL, {"hintPending": True}
    return action, {}
