"""VertexJobBackend: the JobBackend port on the ``aiplatform_v1`` GAPIC clients.

Only the GAPIC clients are imported (not the ``google.cloud.aiplatform`` SDK, which costs about
two seconds of cold start). Clients are built on first use, one per (service, location), and
reused.

The training kinds differ only in their proto class, the service that owns them and the
method names, so one table (:data:`TRAINING_KINDS`), read from the kinds' declarations
(:mod:`shared.domain.model.kinds`), drives every call: ``customJob`` and
``hyperparameterTuningJob`` live in JobService, ``trainingPipeline`` in PipelineService.
Creates and lists dispatch on the request's kind; reads and cancels on the collection in the
resource name (``/customJobs/``, ``/hyperparameterTuningJobs/``, ``/trainingPipelines/``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from shared.domain.model.ids import LABEL_ATTEMPT, LABEL_REQUEST
from shared.domain.model.kinds import TRAINING, JobKind, training_kind_of
from shared.domain.model.strategies import runs_as
from shared.domain.model.values import snake_case
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.request.message import JobRequest, parse_duration
from shared.kernel.config import Settings
from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    JobGone,
    OutcomeUnknown,
    QuotaExhausted,
)
from shared.kernel.regions import REGION_HINT, is_region

T = TypeVar("T")


# Faults that may pass: the caller raises so Pub/Sub redelivers. RESOURCE_EXHAUSTED (quota) is
# its own class: a create refused for quota is parked and retried from the tick.
_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.Aborted,
    gexc.Unknown,
    gexc.Unauthenticated,
    gexc.RetryError,
)
# Refusals for good. PermissionDenied is one: redelivering a create the function may not make
# only fills the dead-letter topic, so the request is FAILED with the reason instead.
_REJECTED = (
    gexc.InvalidArgument,
    gexc.FailedPrecondition,
    gexc.NotFound,
    gexc.OutOfRange,
    gexc.PermissionDenied,
)
# After these, a create may still have happened (the request reached Vertex, the answer did
# not reach us). gRPC documents UNAVAILABLE as "not always safe to retry" for calls that are
# not idempotent: a connection can break after the server acted, so it is ambiguous too.
_AMBIGUOUS = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.Unknown,
    gexc.InternalServerError,
    gexc.Aborted,
)

# Reads and cancels are safe to repeat (idempotent), so api_core retries them briefly.
# Creates are never retried here: a create that timed out may have happened, and only the
# label lookup of the redelivery can tell; Pub/Sub's redelivery is the retry.
IDEMPOTENT_RETRY = gretry.Retry(
    predicate=gretry.if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded),
    initial=0.2,
    maximum=2.0,
    multiplier=2.0,
    timeout=10.0,
)

JOB_SERVICE = "JobService"
PIPELINE_SERVICE = "PipelineService"
ENDPOINT_SERVICE = "EndpointService"

#: GAPIC client and gRPC transport of each service, as (module path, client, transport).
_SERVICES: dict[str, tuple[str, str, str]] = {
    JOB_SERVICE: ("job_service", "JobServiceClient", "JobServiceGrpcTransport"),
    PIPELINE_SERVICE: ("pipeline_service", "PipelineServiceClient", "PipelineServiceGrpcTransport"),
    ENDPOINT_SERVICE: ("endpoint_service", "EndpointServiceClient", "EndpointServiceGrpcTransport"),
}


@dataclass(frozen=True)
class TrainingKind:
    """How one training request kind maps onto Vertex AI v1's GAPIC clients.

    ``resource`` is the proto class (``CustomJob``), ``collection`` the resource-name segment
    (``customJobs``), ``field`` the snake_case name used by the client's methods
    (``create_custom_job``, the ``custom_job=`` argument).
    """

    kind: str
    resource: str
    collection: str
    field: str
    service: str
    #: The proto attributes holding the CustomJobSpec (``job_spec``, ``trial_job_spec``).
    spec_attributes: tuple[str, ...] = ()
    #: Whether the proto holds that spec untyped, as a ``google.protobuf.Value``.
    untyped_spec: bool = False

    @classmethod
    def of(cls, declared: JobKind) -> TrainingKind:
        """The client's view of a declared training kind."""
        return cls(
            declared.name,
            declared.message,
            declared.collection,
            snake_case(declared.name),
            declared.service,
            tuple(snake_case(key) for key in declared.job_spec),
            declared.untyped_spec is not None,
        )

    @property
    def plural_field(self) -> str:
        return f"{self.field}s"

    def rpc(self, verb: str) -> str:
        """The RPC name for messages, such as ``CreateCustomJob`` or ``ListTrainingPipelines``."""
        return f"{verb}{self.resource}{'s' if verb == 'List' else ''}"


TRAINING_KINDS: dict[str, TrainingKind] = {k.name: TrainingKind.of(k) for k in TRAINING}


def call_vertex(what: str, fn: Callable[[], T], *, creates: bool = False) -> T:
    """Run one Vertex call, translating its faults into flexjobs errors.

    ``creates`` marks a call that makes something (a job, a deployment): a timeout or a
    broken-off answer then means the outcome is unknown, not merely that the call failed.

    Raises:
        QuotaExhausted: RESOURCE_EXHAUSTED (a quota is used up for now).
        OutcomeUnknown: a creating call that may have happened.
        BackendUnavailable: a fault that may pass (redeliver).
        BackendRejected: Vertex refused the call for good.
    """
    try:
        return fn()
    except gexc.ResourceExhausted as exc:
        raise QuotaExhausted(f"Vertex AI {what} refused for quota: {exc}") from exc
    except _TRANSIENT as exc:
        if creates and isinstance(exc, _AMBIGUOUS):
            raise OutcomeUnknown(f"Vertex AI {what} may have happened: {exc}") from exc
        raise BackendUnavailable(f"Vertex AI {what} failed: {exc}") from exc
    except _REJECTED as exc:
        raise BackendRejected(f"Vertex AI refused {what}: {exc}") from exc


def require_region(location: str) -> str:
    """Return ``location`` when it is a region name.

    Defence in depth: the location goes into the host name (``{location}-aiplatform...``) and
    into resource paths, so nothing else may reach a client, whatever the caller checked.

    Raises:
        BackendRejected: ``location`` is not a Vertex AI region name.
    """
    if not is_region(location):
        raise BackendRejected(f"location {location!r} is not {REGION_HINT}; no call was made")
    return location


def build_gapic_client(settings: Settings, service: str, location: str) -> Any:
    """Build the ``aiplatform_v1`` client of ``service`` for ``location``.

    With a local endpoint (the simulator) the client runs on a plaintext gRPC channel with no
    credentials; otherwise on the regional endpoint, or ``FLEXJOBS_VERTEX_ENDPOINT`` if set.

    Raises:
        BackendRejected: ``location`` is not a region name.
    """
    import importlib

    require_region(location)

    from google.cloud import aiplatform_v1

    module, client_name, transport_name = _SERVICES[service]
    client_cls = getattr(aiplatform_v1, client_name)
    if settings.vertex_is_local:
        import grpc

        transports = importlib.import_module(
            f"google.cloud.aiplatform_v1.services.{module}.transports.grpc"
        )
        channel = grpc.insecure_channel(str(settings.vertex_endpoint))
        return client_cls(transport=getattr(transports, transport_name)(channel=channel))
    endpoint = settings.vertex_endpoint or f"{location}-aiplatform.googleapis.com"
    return client_cls(client_options={"api_endpoint": endpoint})


class GapicClients:
    """One lazily built client per (service, location), shared by the threads of an instance."""

    def __init__(
        self, settings: Settings, factory: Callable[[str, str], Any] | None = None
    ) -> None:
        self._factory = factory or (lambda service, loc: build_gapic_client(settings, service, loc))
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def get(self, service: str, location: str) -> Any:
        """The client of ``service`` in ``location``, built on first use.

        Raises:
            BackendRejected: ``location`` is not a region name (whatever the factory).
        """
        require_region(location)
        with self._lock:
            key = (service, location)
            if key not in self._clients:
                self._clients[key] = self._factory(service, location)
            return self._clients[key]


def to_vertex_job(job: Any) -> VertexJob:
    """Convert a CustomJob, HyperparameterTuningJob or TrainingPipeline proto.

    ``state`` is the enum name: ``JOB_STATE_*`` for jobs, ``PIPELINE_STATE_*`` for pipelines;
    :func:`shared.domain.model.states.from_vertex` maps both.

    The fields are read from the protobuf message under the proto-plus one: each proto-plus
    field access marshals a value (a wrapper, a map, a datetime), and that was most of the
    cost of this conversion, which every create, read and listed job goes through. Each value
    is the one proto-plus would give (an unset time is None, a set one a
    ``DatetimeWithNanoseconds``).
    """
    pb = type(job).pb(job)
    error = pb.error if "error" in pb.DESCRIPTOR.fields_by_name else None
    code = int(error.code) if error is not None and error.code else None
    strategy, max_wait = _scheduling_of(job)
    return VertexJob(
        name=pb.name,
        state=job.state.name,
        labels=dict(pb.labels),
        create_time=_timestamp(pb, "create_time"),
        start_time=_timestamp(pb, "start_time"),
        end_time=_timestamp(pb, "end_time"),
        error_code=code,
        error_message=(error.message or None) if error is not None and code else None,
        strategy=strategy,
        max_wait_seconds=max_wait,
    )


def _timestamp(pb: Any, name: str) -> datetime | None:
    """A Timestamp field as proto-plus reads it: None when unset."""
    from proto.datetime_helpers import DatetimeWithNanoseconds

    if not pb.HasField(name):
        return None
    stamp: datetime = DatetimeWithNanoseconds.from_timestamp_pb(getattr(pb, name))
    return stamp


def _scheduling_of(job: Any) -> tuple[str | None, float | None]:
    """The strategy and max wait a job runs with, from its own spec (the custom job's
    ``jobSpec``, the tuning job's ``trialJobSpec``, the pipeline's ``trainingTaskInputs``).

    A proto has the spec attribute of its own kind only; the others read as None.
    """
    pb = type(job).pb(job)
    typed: tuple[TrainingKind, Any] | None = None
    for kind in TRAINING_KINDS.values():
        if not kind.untyped_spec and (typed is None or not _truthy(job, *typed)):
            # ``job.job_spec or job.trial_job_spec``: an unset CustomJobSpec is falsy, so a
            # custom job without one reads as no scheduling (None), a tuning job's as STANDARD.
            spec = _raw_attribute(pb, kind)
            typed = (kind, spec) if spec is not None else None
    if typed is not None:
        scheduling = typed[1].scheduling
        strategy = _enum_name(scheduling, "strategy")
        wait = (
            _seconds(scheduling.max_wait_duration)
            if scheduling.HasField("max_wait_duration")
            else None
        )
        # Unspecified is what Vertex runs as on-demand (STANDARD): flexjobs always names one.
        return runs_as(strategy), wait
    inputs = next(
        (
            spec
            for kind in TRAINING_KINDS.values()
            if kind.untyped_spec and (spec := _spec_attribute(job, kind)) is not None
        ),
        None,
    )
    scheduling = inputs.get("scheduling") if inputs is not None else None
    if not scheduling:
        return None, None
    strategy, raw = scheduling.get("strategy"), scheduling.get("maxWaitDuration")
    try:
        wait = parse_duration(raw) if isinstance(raw, str) else None
    except ValueError:
        wait = None
    return (strategy if isinstance(strategy, str) else None), wait


def _raw_attribute(pb: Any, kind: TrainingKind) -> Any:
    """:func:`_spec_attribute` on the protobuf message: None when it has no such field."""
    node = pb
    for attribute in kind.spec_attributes:
        if attribute not in node.DESCRIPTOR.fields_by_name:
            return None
        node = getattr(node, attribute)
    return node


def _truthy(job: Any, kind: TrainingKind, spec: Any) -> bool:
    """Whether proto-plus takes ``spec`` (``kind``'s spec of ``job``, as a protobuf message)
    for true: some field of it holds a true value.

    A non-empty repeated field or a scalar that is not zero says so at once, as it does for
    proto-plus; a spec whose only set fields are messages is asked of proto-plus itself (its
    truth of a time or a duration is that of the Python value it reads them as).
    """
    messages = False
    for field, value in spec.ListFields():
        if field.is_repeated or (field.message_type is None and value):
            return True
        messages = messages or field.message_type is not None
    return messages and bool(_spec_attribute(job, kind))


def _enum_name(message: Any, name: str) -> str:
    """An enum field's value name, as proto-plus's enum gives it."""
    number = getattr(message, name)
    value = message.DESCRIPTOR.fields_by_name[name].enum_type.values_by_number.get(number)
    if value is None:
        # proto-plus reads a number its enum does not know as a plain int, which has no name.
        raise AttributeError(f"{name}: {number} is no value of its enum")
    return str(value.name)


def _seconds(duration: Any) -> float:
    """A Duration's seconds as proto-plus reads it (a timedelta, microseconds floored)."""
    return timedelta(
        days=duration.seconds // 86400,
        seconds=duration.seconds % 86400,
        microseconds=duration.nanos // 1000,
    ).total_seconds()


def _spec_attribute(job: Any, kind: TrainingKind) -> Any:
    """The proto's CustomJobSpec where ``kind`` holds it; None when the proto has no such field."""
    node = job
    for attribute in kind.spec_attributes:
        node = getattr(node, attribute, None)
    return node


def kind_of_name(name: str) -> TrainingKind:
    """The training kind a resource name belongs to, by its collection segment.

    Raises:
        BackendRejected: the name is not a job or pipeline resource name.
    """
    declared = training_kind_of(name)
    if declared is not None:
        return TRAINING_KINDS[declared.name]
    raise BackendRejected(f"not a Vertex AI job or training pipeline name: {name!r}")


def _from_body(proto_class: Any, body: Mapping[str, Any]) -> Any:
    """The proto-plus message of a REST body (a dict), as ``proto_class.from_json`` reads
    its JSON text: parsed by json_format, unknown fields refused. The body is JSON already,
    so it is handed to ``ParseDict`` itself rather than written out and read back.
    """
    from google.protobuf import json_format

    instance = proto_class()
    json_format.ParseDict(body, proto_class.pb(instance))
    return instance


def _proto_class(kind: TrainingKind) -> Any:
    from google.cloud.aiplatform_v1 import types

    return getattr(types, kind.resource)


class VertexJobBackend:
    """Creates, reads, lists and cancels Vertex AI custom jobs, tuning jobs and pipelines."""

    def __init__(
        self, settings: Settings, client_factory: Callable[[str, str], Any] | None = None
    ) -> None:
        """``client_factory(service, location)`` replaces :func:`build_gapic_client` (tests)."""
        self._settings = settings
        self._clients = GapicClients(settings, client_factory)

    def _client(self, kind: TrainingKind, location: str) -> Any:
        return self._clients.get(kind.service, location)

    def _parent(self, location: str) -> str:
        return f"projects/{self._settings.project}/locations/{location}"

    def find(
        self, request_label: str, attempt: int, location: str, kind: str | None = None
    ) -> list[VertexJob]:
        """Every job of this request and attempt in ``location``, looked up by its labels.

        ``kind`` narrows the lookup to one request kind; without it every training kind is
        searched (one list call each), which is always correct but costs more calls.
        """
        query = f'labels.{LABEL_REQUEST}="{request_label}" AND labels.{LABEL_ATTEMPT}="{attempt}"'
        kinds = [TRAINING_KINDS[kind]] if kind is not None else list(TRAINING_KINDS.values())
        return [job for each in kinds for job in self._list(each, location, query)]

    def create(
        self,
        request: JobRequest,
        labels: Mapping[str, str],
        location: str,
        *,
        before_send: Callable[[], None] | None = None,
    ) -> VertexJob:
        """Create the job (or pipeline) of one attempt, with ``labels`` on the resource.
        ``before_send`` runs last before the call is sent: building the request may take a
        while (a cold instance imports the proto types), and what it raises sends nothing.

        Raises:
            BackendRejected: the request is not a training kind, or Vertex refused it.
        """
        kind = TRAINING_KINDS.get(request.kind)
        if kind is None:
            raise BackendRejected(f"{request.kind} is not a training job kind")
        resource = _from_body(_proto_class(kind), request.spec)
        resource.labels.update(labels)
        client = self._client(kind, location)
        method = getattr(client, f"create_{kind.field}")
        if before_send is not None:
            before_send()
        created = call_vertex(
            kind.rpc("Create"),
            lambda: method(
                parent=self._parent(location),
                **{kind.field: resource},
                retry=None,
                timeout=self._settings.call_timeout_seconds,
            ),
            creates=True,
        )
        return to_vertex_job(created)

    def get(self, name: str) -> VertexJob:
        """Read one job's (or pipeline's) authoritative state."""
        kind = kind_of_name(name)
        method = getattr(self._client(kind, location_of(name)), f"get_{kind.field}")
        try:
            job = call_vertex(
                kind.rpc("Get"),
                lambda: method(
                    name=name, retry=IDEMPOTENT_RETRY, timeout=self._settings.call_timeout_seconds
                ),
            )
        except BackendRejected as exc:
            if isinstance(exc.__cause__, gexc.NotFound):
                raise JobGone(f"{name}: {exc}") from exc
            raise
        return to_vertex_job(job)

    def list_labelled(
        self, location: str, created_since: datetime | None = None
    ) -> Iterable[VertexJob]:
        """Every flexjobs-labelled job, tuning job and pipeline in ``location`` (paged).

        ``created_since`` bounds the listing, so it does not grow with every job ever run.
        """
        query = f"labels.{LABEL_REQUEST}:*"
        if created_since is not None:
            stamp = created_since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            query += f' AND create_time>="{stamp}"'
        for kind in TRAINING_KINDS.values():
            yield from self._list(kind, location, query)

    def _list(self, kind: TrainingKind, location: str, query: str) -> Iterator[VertexJob]:
        method = getattr(self._client(kind, location), f"list_{kind.plural_field}")
        rpc = kind.rpc("List")
        pager = call_vertex(
            rpc,
            lambda: method(
                request={"parent": self._parent(location), "filter": query, "page_size": 100},
                retry=IDEMPOTENT_RETRY,
                timeout=self._settings.call_timeout_seconds,
            ),
        )
        # The pager fetches later pages lazily; faults there must be translated too.
        iterator = iter(pager)
        while True:
            job = call_vertex(rpc, lambda: next(iterator, None))
            if job is None:
                return
            yield to_vertex_job(job)

    def cancel(self, name: str) -> None:
        """Ask Vertex to cancel a job or pipeline; idempotent.

        A job that already ended (FAILED_PRECONDITION) or no longer exists (NOT_FOUND) is as
        cancelled as it will get, so that counts as confirmed, not as an error.
        """
        kind = kind_of_name(name)
        method = getattr(self._client(kind, location_of(name)), f"cancel_{kind.field}")
        try:
            call_vertex(
                kind.rpc("Cancel"),
                lambda: method(
                    name=name, retry=IDEMPOTENT_RETRY, timeout=self._settings.call_timeout_seconds
                ),
            )
        except BackendRejected as exc:
            if not isinstance(exc.__cause__, gexc.FailedPrecondition | gexc.NotFound):
                raise


def location_of(name: str) -> str:
    """The location segment of a Vertex resource name.

    Raises:
        BackendRejected: the name has no ``locations/<id>`` segment.
    """
    parts = name.split("/")
    try:
        return parts[parts.index("locations") + 1]
    except (ValueError, IndexError) as exc:
        raise BackendRejected(f"not a Vertex resource name: {name!r}") from exc
