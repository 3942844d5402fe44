"""flexjobs for publishers: validate, submit, follow and cancel requests from Python.

Examples:
    >>> import flexjobs
    >>> problems = flexjobs.validate({"requestId": "r1", "customJob": {"displayName": "x"}})
    >>> problems[0].path
    'customJob.jobSpec'

``submit`` takes a request message or a job built with the official Vertex SDK, as built::

    job = aiplatform.CustomJob(display_name="train", worker_pool_specs=[...])
    job.job_spec.scheduling.strategy = "FLEX_START"
    request_id = flexjobs.submit(job, request_id="train-2026-12-02")
    flexjobs.status(request_id).state

See docs/client-library.md.
"""

from flexjobs.client import (
    Client,
    SubmitOptions,
    cancel,
    default_client,
    set_default_client,
    status,
    submit,
    validate,
)
from flexjobs.records import Attempt, Status
from shared.kernel.errors import (
    ConfigurationError,
    FieldError,
    FlexjobsError,
    InvalidRequest,
    PublishFailed,
    RequestNotFound,
    StoreUnavailable,
    TransientError,
)

__all__ = [
    "Attempt",
    "Client",
    "ConfigurationError",
    "FieldError",
    "FlexjobsError",
    "InvalidRequest",
    "PublishFailed",
    "RequestNotFound",
    "Status",
    "StoreUnavailable",
    "SubmitOptions",
    "TransientError",
    "cancel",
    "default_client",
    "set_default_client",
    "status",
    "submit",
    "validate",
]
