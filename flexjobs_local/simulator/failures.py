"""The errors a job ends with, worded as Vertex AI words them."""

from __future__ import annotations

from flexjobs_local.simulator.clock import format_duration
from flexjobs_local.simulator.common import STATUS_CODES, SimError
from flexjobs_local.simulator.job import Job
from flexjobs_local.simulator.specs import describe

FAILURE_CLASSES = ("stockout", "user", "infrastructure", "preempted")


def failure_error(failure_class: str, job: Job) -> tuple[int, str]:
    """``(code, message)`` of a failure of ``failure_class`` (one of :data:`FAILURE_CLASSES`).

    Raises:
        SimError: INVALID_ARGUMENT for an unknown class.
    """
    if failure_class == "preempted":
        reason = (
            "Spot VM capacity was reclaimed"
            if job.strategy == "SPOT"
            else "the reserved capacity was reclaimed"
        )
        return STATUS_CODES["UNAVAILABLE"], (
            f"The replica workerpool0-0 was preempted by Compute Engine ({reason}). "
            "Resubmit the job to continue."
        )
    if failure_class == "stockout":
        return STATUS_CODES["RESOURCE_EXHAUSTED"], (
            f"The zone '{job.location}-a' does not have enough resources available to "
            "fulfill the request. Try a different zone, or try again later. "
            "(ZONE_RESOURCE_POOL_EXHAUSTED)"
        )
    if failure_class == "user":
        return STATUS_CODES["INVALID_ARGUMENT"], (
            "The replica workerpool0-0 exited with a non-zero status of 1. To find out more "
            "about why your job exited please check the logs: "
            f"https://console.cloud.google.com/logs/viewer?project={job.project}"
            f"&resource=ml_job%2Fjob_id%2F{job.job_id}&advancedFilter=resource.type"
            f"%3D%22ml_job%22%0Aresource.labels.job_id%3D%22{job.job_id}%22"
        )
    if failure_class == "infrastructure":
        return STATUS_CODES["INTERNAL"], "Internal error occurred for the current attempt."
    raise SimError(
        "INVALID_ARGUMENT",
        f"Unknown failure class {failure_class!r}; expected one of {', '.join(FAILURE_CLASSES)}.",
    )


def expiry_error(job: Job) -> tuple[int, str]:
    """A FLEX_START job whose max wait passed before its resources were free."""
    assert job.max_wait is not None
    message = (
        f"Job did not start: the requested resources ({describe(job.pools)}) were not "
        f"available within the max wait duration (maxWaitDuration="
        f"{format_duration(job.max_wait)}) of the FLEX_START scheduling strategy."
    )
    return STATUS_CODES["DEADLINE_EXCEEDED"], message


def timeout_error(job: Job) -> tuple[int, str]:
    """A job that ran longer than its scheduling timeout."""
    assert job.timeout is not None
    message = (
        "The job was stopped because it ran longer than the timeout set in its "
        f"scheduling (timeout={format_duration(job.timeout)})."
    )
    return STATUS_CODES["DEADLINE_EXCEEDED"], message
