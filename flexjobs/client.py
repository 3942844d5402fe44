"""The client: validate, submit, status and cancel, on one configuration.

A :class:`Client` holds where it points (project, requests topic, Firestore database) and
builds its Google clients on first use. The module's functions (``flexjobs.submit`` ...) use
one default client, built on the first call from the environment.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from flexjobs.bodies import request_body, scheduling_fields
from flexjobs.connection import check_emulator, google_errors, resolve_project
from flexjobs.messages import (
    DEFAULT_ID_PREFIX,
    Message,
    assign_request_id,
    check,
    request_id_of,
    stamp_schedule_time,
)
from flexjobs.publisher import Publisher, PubsubPublisher
from flexjobs.records import Status, status_of
from shared.kernel.config import Settings
from shared.kernel.errors import ConfigurationError, FieldError, InvalidRequest, RequestNotFound

if TYPE_CHECKING:
    from shared.app.ports import RejectionLog
    from shared.status.ports import JobViews


class SubmitOptions(TypedDict, total=False):
    """What :meth:`Client.submit` and :meth:`Client.validate` take besides the request."""

    request_id: str | None
    region: str | None
    display_name: str | None
    scheduling_strategy: Any
    max_wait_duration: int | None
    timeout: int | None
    restart_job_on_worker_restart: bool | None


def utc_now() -> datetime:
    return datetime.now(UTC)


def load_settings() -> Settings:
    """The ``FLEXJOBS_*`` settings as the functions read them (the validators' guards)."""
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc


class Client:
    """flexjobs as a publisher sees it.

    ``project``: else ``GOOGLE_CLOUD_PROJECT`` / ``GCLOUD_PROJECT``, else
    ``google.auth.default()``'s (resolved on the first call that needs one: ``validate``
    needs none). ``topic``: the requests topic id (default ``FLEXJOBS_REQUESTS_TOPIC``, else
    ``job-requests``). ``database``: the Firestore database id (default ``(default)``).
    ``settings``: the operator guards ``validate`` applies (default: the ``FLEXJOBS_*``
    environment, as the deployed functions read it). ``publisher``, ``views`` and
    ``rejections`` replace the Google adapters (tests pass in-memory ones).

    Examples:
        >>> client = Client(project="p", settings=Settings(project=""))
        >>> [e.path for e in client.validate({"customJob": {}})]
        ['customJob.displayName', 'customJob.jobSpec']
    """

    def __init__(
        self,
        project: str | None = None,
        *,
        topic: str | None = None,
        database: str | None = None,
        settings: Settings | None = None,
        publisher: Publisher | None = None,
        views: JobViews | None = None,
        rejections: RejectionLog | None = None,
        id_prefix: str = DEFAULT_ID_PREFIX,
        clock: Callable[[], datetime] = utc_now,
        project_default: Callable[[], str | None] | None = None,
    ) -> None:
        self._explicit_project = project
        self._settings = settings
        self._topic = topic
        self.database = database
        self._publisher = publisher
        self._views = views
        self._rejections = rejections
        self._db: Any = None
        self.id_prefix = id_prefix
        self.clock = clock
        self._project_default = project_default
        self._project: str | None = None
        self._lock = threading.RLock()

    # -- configuration ---------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @property
    def topic(self) -> str:
        return self._topic or self.settings.requests_topic

    @property
    def project(self) -> str:
        """The project this client publishes to and reads from.

        Raises:
            ConfigurationError: no argument, no environment variable and no ADC project.
        """
        with self._lock:
            if self._project is None:
                if self._project_default is not None:
                    self._project = resolve_project(
                        self._explicit_project, default=self._project_default
                    )
                else:
                    self._project = resolve_project(self._explicit_project)
            return self._project

    @property
    def timeout(self) -> float:
        return self.settings.call_timeout_seconds

    def firestore(self) -> Any:
        """The Firestore client (built once, on first use)."""
        with self._lock:
            if self._db is None:
                project = self.project
                check_emulator("FIRESTORE_EMULATOR_HOST", "Firestore")
                from google.cloud import firestore

                options = {"database": self.database} if self.database else {}
                with google_errors("Firestore"):
                    self._db = firestore.Client(project=project, **options)
            return self._db

    def _store_settings(self) -> Settings:
        return dataclasses.replace(self.settings, project=self.project)

    @property
    def views(self) -> JobViews:
        with self._lock:
            if self._views is None:
                from shared.adapters.firestore.database import Firestore
                from shared.adapters.firestore.views import FirestoreJobViews

                database = Firestore(self._store_settings(), client=self.firestore())
                self._views = FirestoreJobViews(database, timeout=self.timeout)
            return self._views

    @property
    def rejections(self) -> RejectionLog:
        with self._lock:
            if self._rejections is None:
                from shared.adapters.firestore.database import Firestore
                from shared.adapters.firestore.rejection_log import FirestoreRejectionLog

                database = Firestore(self._store_settings(), client=self.firestore())
                self._rejections = FirestoreRejectionLog(database)
            return self._rejections

    @property
    def publisher(self) -> Publisher:
        with self._lock:
            if self._publisher is None:
                self._publisher = PubsubPublisher(self.project, self.timeout)
            return self._publisher

    # -- messages --------------------------------------------------------------------------

    def message(
        self,
        request: Any,
        *,
        request_id: str | None = None,
        region: str | None = None,
        display_name: str | None = None,
        scheduling_strategy: Any = None,
        max_wait_duration: int | None = None,
        timeout: int | None = None,
        restart_job_on_worker_restart: bool | None = None,
    ) -> Message:
        """The message ``request`` is published as: its body (see
        :func:`flexjobs.bodies.request_body`), its requestId and attributes."""
        scheduling = scheduling_fields(
            scheduling_strategy=scheduling_strategy,
            max_wait_duration=max_wait_duration,
            timeout=timeout,
            restart_job_on_worker_restart=restart_job_on_worker_restart,
        )
        body = request_body(
            request, region=region, display_name=display_name, scheduling=scheduling
        )
        return self.prepare(Message(body), request_id)

    def prepare(self, message: Message, request_id: str | None = None) -> Message:
        """Give ``message`` its requestId and, when scheduled, its slot time (now)."""
        assign_request_id(message, request_id, self.id_prefix)
        stamp_schedule_time(message, self.clock())
        return message

    def check(self, message: Message) -> list[FieldError]:
        """Every problem intake would find in ``message``; [] when it would be accepted."""
        return check(message, self.settings, self.clock())

    def validate(self, request: Any, **options: Unpack[SubmitOptions]) -> list[FieldError]:
        """Offline, with the function's own validators: every problem of ``request`` as it
        would be published (the same arguments as :meth:`submit`); [] when valid.

        A body that cannot even be built (an object of no kind flexjobs runs) is a problem
        too, at ``$``.
        """
        try:
            message = self.message(request, **options)
        except InvalidRequest as err:
            return list(err.errors)
        return self.check(message)

    def publish(self, message: Message) -> str:
        """Publish a prepared, checked message; its requestId."""
        request_id = request_id_of(message, self.clock())
        self.publisher.publish(self.topic, message.data, dict(message.attributes))
        return request_id

    def submit(self, request: Any, **options: Unpack[SubmitOptions]) -> str:
        """Validate ``request`` as intake will, then publish it; returns its requestId.

        ``request`` is a request message (a mapping), an SDK job as built
        (``aiplatform.CustomJob``, ``aiplatform.HyperparameterTuningJob``: ``submit()`` is
        never called) or an ``aiplatform_v1`` CustomJob / HyperparameterTuningJob /
        TrainingPipeline. Options: ``request_id`` (default: the message's, else
        ``flexjobs-<uuid>``), ``region`` (the envelope's ``location``; default: an SDK job's
        location), ``display_name``, and the SDK ``submit()``'s scheduling knobs
        ``scheduling_strategy``, ``max_wait_duration``, ``timeout`` (seconds) and
        ``restart_job_on_worker_restart``, set over what the job holds.

        Publishing the same requestId again is safe: flexjobs creates at most one job per
        requestId, so after a PublishFailed, submit again with the id it would have had.

        Raises:
            InvalidRequest: with every problem; nothing was published.
            ConfigurationError: no project, no credentials, the topic not found ...
            PublishFailed: the publish did not complete (it may still have happened).
        """
        message = self.message(request, **options)
        if problems := self.check(message):
            raise InvalidRequest(problems)
        return self.publish(message)

    def cancel(self, request_id: str) -> None:
        """Publish ``{"cancel": request_id}``: cancel that request and every retry after it.

        Raises:
            InvalidRequest: an empty requestId, or one longer than a requestId may be.
        """
        message = self.prepare(Message({"cancel": request_id}))
        if problems := self.check(message):
            raise InvalidRequest(problems)
        self.publisher.publish(self.topic, message.data, dict(message.attributes))

    # -- reads -----------------------------------------------------------------------------

    def status(self, request_id: str) -> Status:
        """The request as flexjobs holds it: its job record with attempts, its deployment
        record, or its rejection (``state == "REJECTED"``, the problems in ``errors``).

        Raises:
            RequestNotFound: nothing holds this requestId.
            StoreUnavailable: Firestore could not be read (retryable).
        """
        views = self.views
        with google_errors("Firestore"):
            record = views.job(request_id)
            if record is not None:
                from shared.status.listing import attempt_numbers

                attempts = views.attempts(request_id, attempt_numbers(record))
                return status_of(request_id, record, attempts, None)
            deployment = views.deployment(request_id)
            if deployment is not None:
                return status_of(request_id, deployment, [], None, collection="deployments")
            rejection = self.rejections.get(request_id)
        if rejection is not None:
            return status_of(request_id, None, [], rejection)
        raise RequestNotFound(request_id, self.project)

    def jobs(
        self, states: tuple[str, ...] = (), since: timedelta | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        """Job records newest first (the status page's list fields)."""
        from shared.status.listing import Listing

        listing = Listing(
            states=states, since=None if since is None else self.clock() - since, size=limit
        )
        views = self.views
        with google_errors("Firestore"):
            return views.jobs(listing).rows

    def queues(self) -> dict[str, Any] | None:
        """The admission queues as of the last scheduler tick: each queue's quota, usage,
        borrowing and waiting line, and the project's quota with its source (the
        ``admission/summary`` document, docs/admission.md); None when admission is off or
        no tick has run since it was turned on.

        Raises:
            StoreUnavailable: Firestore could not be read (retryable).
        """
        views = self.views
        with google_errors("Firestore"):
            return views.admission_summary()

    def deployments(self, limit: int = 20) -> list[dict[str, Any]]:
        """Deployment records newest first (the status page's list fields)."""
        from shared.status.listing import Listing

        views = self.views
        with google_errors("Firestore"):
            return views.deployments(Listing(size=limit)).rows


_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The client the module's functions use: built once, from the environment."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def set_default_client(client: Client | None) -> None:
    """Replace (or with None, forget) the module functions' client."""
    global _default
    with _default_lock:
        _default = client


def validate(request: Any, **options: Unpack[SubmitOptions]) -> list[FieldError]:
    """:meth:`Client.validate` on the default client."""
    return default_client().validate(request, **options)


def submit(request: Any, **options: Unpack[SubmitOptions]) -> str:
    """:meth:`Client.submit` on the default client."""
    return default_client().submit(request, **options)


def status(request_id: str) -> Status:
    """:meth:`Client.status` on the default client."""
    return default_client().status(request_id)


def cancel(request_id: str) -> None:
    """:meth:`Client.cancel` on the default client."""
    default_client().cancel(request_id)


__all__ = [
    "Client",
    "SubmitOptions",
    "cancel",
    "default_client",
    "set_default_client",
    "status",
    "submit",
    "validate",
]
