"""State hints: what arrives on the job-events topic, reduced to the job it is about.

A hint is never trusted for state, order or count; it only says *which* job to read again.
Three shapes are understood:

* a Cloud Logging sink entry for ``resource.type="ml_job"`` (``resource.labels.job_id``);
* an audit-log entry (``protoPayload.resourceName`` naming a custom job);
* ``{"jobName": "projects/…/locations/…/customJobs/ID"}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_JOB_NAME = re.compile(r"^projects/[^/]+/locations/([^/]+)/customJobs/(\d+)$")


@dataclass(frozen=True)
class JobHint:
    """The job a hint is about: its numeric id, and its location when the hint names it."""

    job_id: str
    location: str | None = None
    source: str = "unknown"


def _from_name(name: object, source: str) -> JobHint | None:
    match = _JOB_NAME.match(name) if isinstance(name, str) else None
    return JobHint(job_id=match.group(2), location=match.group(1), source=source) if match else None


def parse_hint(body: Any) -> JobHint | None:
    """Return the job a hint names, or None for a foreign or malformed hint.

    Examples:
        >>> parse_hint({"jobName": "projects/p/locations/us-central1/customJobs/42"}).job_id
        '42'
        >>> parse_hint({"resource": {"type": "ml_job", "labels": {"job_id": "42"}}}).source
        'ml_job'
    """
    if not isinstance(body, dict):
        return None
    if "jobName" in body:
        return _from_name(body["jobName"], "jobName")
    payload = body.get("protoPayload")
    if isinstance(payload, dict):
        return _from_name(payload.get("resourceName"), "audit")
    resource = body.get("resource")
    if isinstance(resource, dict) and resource.get("type") == "ml_job":
        labels = resource.get("labels")
        job_id = labels.get("job_id") if isinstance(labels, dict) else None
        if isinstance(job_id, str) and job_id.isdigit():
            return JobHint(job_id=job_id, source="ml_job")
    return None
