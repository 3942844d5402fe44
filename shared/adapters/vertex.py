"""VertexJobBackend: the JobBackend port on the ``aiplatform_v1`` GAPIC clients.

Only the GAPIC clients are imported (not the ``google.cloud.aiplatform`` SDK, which costs about
two seconds of cold start). Clients are built on first use, one per location, and reused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from shared.config import Settings
from shared.domain.jobs import VertexJob
from shared.domain.request import JobRequest
from shared.errors import BackendRejected, BackendUnavailable, FieldError

T = TypeVar("T")

LABEL_REQUEST = "flexjobs-request"
LABEL_ATTEMPT = "flexjobs-attempt"

# Faults that may pass: the caller raises so Pub/Sub redelivers. PermissionDenied is here too:
# it is an operator's IAM mistake, and once fixed the same message succeeds (a dead-letter
# topic bounds the redeliveries meanwhile).
_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.ResourceExhausted,
    gexc.InternalServerError,
    gexc.Aborted,
    gexc.Unknown,
    gexc.PermissionDenied,
    gexc.Unauthenticated,
    gexc.RetryError,
)
_REJECTED = (gexc.InvalidArgument, gexc.FailedPrecondition, gexc.NotFound, gexc.OutOfRange)

# Reads are safe to repeat, so api_core retries them briefly. Creates are never retried here:
# a create that timed out may have happened, and only the label lookup of the redelivery can
# tell; Pub/Sub's redelivery is the retry.
_READ_RETRY = gretry.Retry(
    predicate=gretry.if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded),
    initial=0.2,
    maximum=2.0,
    multiplier=2.0,
    timeout=10.0,
)


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except _TRANSIENT as exc:
        raise BackendUnavailable(f"Vertex AI {what} failed: {exc}") from exc
    except _REJECTED as exc:
        raise BackendRejected(f"Vertex AI refused {what}: {exc}") from exc


def to_vertex_job(job: Any) -> VertexJob:
    """Convert a CustomJob (or HyperparameterTuningJob, TrainingPipeline) proto."""
    error = getattr(job, "error", None)
    code = int(error.code) if error is not None and error.code else None
    return VertexJob(
        name=job.name,
        state=job.state.name,
        labels=dict(job.labels),
        create_time=job.create_time,
        start_time=job.start_time,
        end_time=job.end_time,
        error_code=code,
        error_message=(error.message or None) if error is not None and code else None,
    )


class VertexJobBackend:
    """Creates, reads, lists and cancels Vertex AI custom jobs for flexjobs."""

    def __init__(self, settings: Settings, client_factory: Callable[[str], Any] | None = None):
        self._settings = settings
        self._factory = client_factory or self._build_client
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _build_client(self, location: str) -> Any:
        from google.cloud import aiplatform_v1

        if self._settings.vertex_is_local:
            import grpc
            from google.cloud.aiplatform_v1.services.job_service.transports.grpc import (
                JobServiceGrpcTransport,
            )

            channel = grpc.insecure_channel(str(self._settings.vertex_endpoint))
            return aiplatform_v1.JobServiceClient(
                transport=JobServiceGrpcTransport(channel=channel)
            )
        endpoint = self._settings.vertex_endpoint or f"{location}-aiplatform.googleapis.com"
        return aiplatform_v1.JobServiceClient(client_options={"api_endpoint": endpoint})

    def _client(self, location: str) -> Any:
        with self._lock:
            if location not in self._clients:
                self._clients[location] = self._factory(location)
            return self._clients[location]

    def _parent(self, location: str) -> str:
        return f"projects/{self._settings.project}/locations/{location}"

    def check(self, request: JobRequest) -> list[FieldError]:
        """Parse the REST body into the v1 proto, as Vertex would, and report what it refuses."""
        from google.cloud.aiplatform_v1.types import CustomJob

        try:
            CustomJob.from_json(json.dumps(request.spec))
        except (ValueError, RecursionError, TypeError) as exc:
            # json_format.ParseError is a ValueError; its text names the offending field.
            return [FieldError(request.kind, f"not a valid Vertex AI v1 body: {exc}")]
        return []

    def find(self, request_label: str, attempt: int, location: str) -> VertexJob | None:
        query = f'labels.{LABEL_REQUEST}="{request_label}" AND labels.{LABEL_ATTEMPT}="{attempt}"'
        for job in self._list(location, query):
            return job
        return None

    def create(self, request: JobRequest, labels: Mapping[str, str], location: str) -> VertexJob:
        from google.cloud.aiplatform_v1.types import CustomJob

        job = CustomJob.from_json(json.dumps(request.spec))
        job.labels.update(labels)
        client = self._client(location)
        created = _call(
            "CreateCustomJob",
            lambda: client.create_custom_job(
                parent=self._parent(location),
                custom_job=job,
                retry=None,
                timeout=self._settings.call_timeout_seconds,
            ),
        )
        return to_vertex_job(created)

    def get(self, name: str) -> VertexJob:
        client = self._client(_location_of(name))
        job = _call(
            "GetCustomJob",
            lambda: client.get_custom_job(
                name=name, retry=_READ_RETRY, timeout=self._settings.call_timeout_seconds
            ),
        )
        return to_vertex_job(job)

    def list_labelled(self, location: str) -> Iterable[VertexJob]:
        return self._list(location, f"labels.{LABEL_REQUEST}:*")

    def _list(self, location: str, query: str) -> Iterator[VertexJob]:
        client = self._client(location)
        pager = _call(
            "ListCustomJobs",
            lambda: client.list_custom_jobs(
                request={"parent": self._parent(location), "filter": query, "page_size": 100},
                retry=_READ_RETRY,
                timeout=self._settings.call_timeout_seconds,
            ),
        )
        # The pager fetches later pages lazily; faults there must be translated too.
        iterator = iter(pager)
        while True:
            job = _call("ListCustomJobs", lambda: next(iterator, None))
            if job is None:
                return
            yield to_vertex_job(job)

    def cancel(self, name: str) -> None:
        client = self._client(_location_of(name))
        _call(
            "CancelCustomJob",
            lambda: client.cancel_custom_job(
                name=name, retry=_READ_RETRY, timeout=self._settings.call_timeout_seconds
            ),
        )


def _location_of(name: str) -> str:
    parts = name.split("/")
    try:
        return parts[parts.index("locations") + 1]
    except (ValueError, IndexError) as exc:
        raise BackendRejected(f"not a Vertex resource name: {name!r}") from exc
