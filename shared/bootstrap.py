"""Wire the services to their adapters once per function instance, lazily.

Nothing here runs at import time: the first invocation builds the settings and adapters, and
the Google clients themselves are created on their first call. Nothing heavy is imported with
this module either: each builder imports the context, the repositories, the policies and the
adapters it wires, so an entry point loads only what its own context needs (issue 41).

Every builder takes :class:`Ports`, whose given adapters replace the production ones: tests
wire the production contexts (retry policy, prices, settings) over in-memory fakes that way.
Tests may also install a prebuilt context with :func:`override` and :func:`override_tracker`,
and drop it with ``override(None)`` so the next call rebuilds.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from shared.kernel.config import Settings
from shared.kernel.logs import configure

if TYPE_CHECKING:
    from shared.adapters.firestore.database import Firestore
    from shared.app.context import Deployments, Intake, Tracker, Uploads
    from shared.app.ports import (
        AdmissionStore,
        AttemptStore,
        CheckpointStore,
        DeploymentBackend,
        DeploymentStore,
        JobBackend,
        JobStore,
        Notifier,
        QuotaLimits,
        RejectionLog,
        SeriesStore,
        StoredObjects,
        WatchStore,
    )
    from shared.app.repository.deployments import DeploymentRecords
    from shared.app.repository.jobs import JobRecords
    from shared.domain.admission.config import Queues
    from shared.domain.policy.pricing import PriceTable
    from shared.domain.policy.retry import RetryPolicy
    from shared.domain.serving.objective import PolicyTable
    from shared.status.ports import JobViews
    from shared.status.site import StatusSite

T = TypeVar("T")

_lock = threading.Lock()
_intake: Intake | None = None
_tracker: Tracker | None = None
_uploads: Uploads | None = None
_status_site: StatusSite | None = None


@dataclass
class Ports:
    """What the builders wire the contexts with, where not the production adapters.

    Each adapter left None is built for production (Firestore, Vertex AI, Pub/Sub, Cloud
    Storage) by the builder that needs it. The repositories over the stores are built once
    per Ports, so contexts built from one Ports share them, as the functions of one
    deployment share Firestore; each production builder takes a Ports of its own. The
    Firestore adapters it builds share one
    :class:`~shared.adapters.firestore.database.Firestore`: ``firestore`` when given.
    """

    firestore: Firestore | None = None
    job_store: JobStore | None = None
    attempt_store: AttemptStore | None = None
    admission_store: AdmissionStore | None = None
    watch_store: WatchStore | None = None
    series_store: SeriesStore | None = None
    job_backend: JobBackend | None = None
    rejections: RejectionLog | None = None
    notifier: Notifier | None = None
    deployment_store: DeploymentStore | None = None
    deployment_backend: DeploymentBackend | None = None
    checkpoints: CheckpointStore | None = None
    objects: StoredObjects | None = None
    quota_limits: QuotaLimits | None = None
    views: JobViews | None = None
    # None prices with prices.yaml; tests price in round numbers.
    prices: PriceTable | None = None
    # The backoff's full jitter, a float in [0, 1]; tests pass a constant.
    jitter: Callable[[], float] = random.random
    sleep: Callable[[float], None] = time.sleep
    _built: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def once(self, key: str, build: Callable[[], T]) -> T:
        """What ``build`` returns, built on the first call for ``key`` only."""
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]  # type: ignore[no-any-return]

    def price_table(self) -> PriceTable:
        from shared.adapters.packaged_prices import load_packaged_prices

        return _given(self.prices, load_packaged_prices)


def _given(port: T | None, build: Callable[[], T]) -> T:
    """``port`` when one was given, else the production one ``build`` makes."""
    return build() if port is None else port


def _firestore(settings: Settings, ports: Ports) -> Firestore:
    """The one Firestore database of a Ports (its client too), for every Firestore adapter."""
    from shared.adapters.firestore.database import Firestore

    return _given(ports.firestore, lambda: ports.once("firestore", lambda: Firestore(settings)))


def job_records(settings: Settings, ports: Ports) -> JobRecords:
    """The job records of a Ports, over its job stores (built once): those it gives, the
    Firestore ones on its database for the rest."""
    from shared.adapters.firestore.admission_store import FirestoreAdmissionStore
    from shared.adapters.firestore.job_store import FirestoreAttemptStore, FirestoreJobStore
    from shared.adapters.firestore.series_store import FirestoreSeriesStore
    from shared.adapters.firestore.watch_store import FirestoreWatchStore
    from shared.app.repository.jobs import JobRecords

    def build() -> JobRecords:
        def db() -> Firestore:
            return _firestore(settings, ports)

        return JobRecords(
            job_store=_given(ports.job_store, lambda: FirestoreJobStore(db())),
            attempt_store=_given(ports.attempt_store, lambda: FirestoreAttemptStore(db())),
            admission_store=_given(ports.admission_store, lambda: FirestoreAdmissionStore(db())),
            watch_store=_given(ports.watch_store, lambda: FirestoreWatchStore(db())),
            series_store=_given(ports.series_store, lambda: FirestoreSeriesStore(db())),
            default_location=settings.location,
        )

    return ports.once("jobs", build)


def _deployment_records(settings: Settings, ports: Ports) -> DeploymentRecords:
    from shared.adapters.firestore.deployment_store import FirestoreDeploymentStore
    from shared.app.repository.deployments import DeploymentRecords

    def build() -> DeploymentRecords:
        store = _given(
            ports.deployment_store, lambda: FirestoreDeploymentStore(_firestore(settings, ports))
        )
        return DeploymentRecords(store)

    return ports.once("deployments", build)


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_intake(
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utc_now,
    ports: Ports | None = None,
) -> Intake:
    """The production wiring of :class:`Intake`: Firestore, Vertex AI and Pub/Sub adapters,
    but those ``ports`` gives."""
    from shared.adapters.firestore.rejection_log import FirestoreRejectionLog
    from shared.adapters.pubsub import PubsubNotifier
    from shared.adapters.vertex.jobs import VertexJobBackend
    from shared.app.context import Intake
    from shared.domain.request.validation import Guards, validators

    settings = settings or Settings.from_env()
    ports = ports or Ports()
    guards = Guards.from_settings(settings)
    queues = admission_queues(settings)
    return Intake(
        settings=settings,
        jobs=job_records(settings, ports),
        backend=_given(ports.job_backend, lambda: VertexJobBackend(settings)),
        rejections=_given(
            ports.rejections, lambda: FirestoreRejectionLog(_firestore(settings, ports))
        ),
        notifier=_given(ports.notifier, lambda: PubsubNotifier(settings)),
        # The body was parsed with the v1 proto by parse_request (shared.domain.request.canonical),
        # so what the protos refuse is already reported; these run on its canonical form.
        validators=validators(guards),
        clock=clock,
        deployments=build_deployments(settings, clock, ports),
        retry=retry_policy(settings, classify=False, jitter=ports.jitter),
        prices=ports.price_table(),
        queues=queues,
        quota_limits=_quota_limits(settings, ports) if queues is not None else None,
    )


def build_deployments(
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utc_now,
    ports: Ports | None = None,
) -> Deployments:
    """The production wiring of :class:`~shared.app.context.Deployments` (Firestore, Vertex),
    but those ``ports`` gives; its Firestore client is the one of ``ports``' other stores."""
    from shared.adapters.pubsub import PubsubNotifier
    from shared.adapters.vertex.endpoints import VertexDeploymentBackend
    from shared.app.context import Deployments

    settings = settings or Settings.from_env()
    ports = ports or Ports()
    return Deployments(
        settings=settings,
        records=_deployment_records(settings, ports),
        backend=_given(ports.deployment_backend, lambda: VertexDeploymentBackend(settings)),
        clock=clock,
        notifier=_given(ports.notifier, lambda: PubsubNotifier(settings)),
        retry=retry_policy(settings, classify=False, jitter=ports.jitter),
        policy_table=_policy_table,
    )


@functools.cache
def _policy_table() -> PolicyTable:
    """The measured serving policies shipped with the functions, read once per instance."""
    from shared.adapters.serving_table import load_policy_table

    return load_policy_table()


def intake() -> Intake:
    """The instance-wide :class:`Intake`, built on first use."""
    global _intake
    with _lock:
        if _intake is None:
            configure()
            _intake = build_intake()
        return _intake


def override(value: Intake | None) -> None:
    """Install a prebuilt :class:`Intake` (tests), or drop it so the next call rebuilds."""
    global _intake
    with _lock:
        _intake = value


#: A failure table is a few dozen rules (the default is about 2 KiB of YAML): 256 KiB holds
#: many times as many, and a larger file is not a table.
MAX_RULES_BYTES = 256 * 1024


def retry_policy(
    settings: Settings, *, classify: bool = True, jitter: Callable[[], float] = random.random
) -> RetryPolicy:
    """The one retry policy, from the settings: the failure table (``FLEXJOBS_FAILURE_RULES``,
    a path or the text), the budgets, and the backoff with random jitter.

    Intake and deployments only space parked creates with the backoff, so they build it with
    ``classify=False``: a malformed failure table then stops only the functions that
    classify failures (the event handler and the tick), never the intake of requests.
    """
    from shared.domain.policy.failures import DEFAULT_RULES, load_rules
    from shared.domain.policy.retry import Backoff, RetryPolicy
    from shared.kernel.errors import FieldError, InvalidConfiguration

    rules = DEFAULT_RULES
    if classify and settings.failure_rules:
        source = Path(settings.failure_rules)
        is_path = len(settings.failure_rules) < 4096 and source.is_file()
        text = settings.failure_rules
        if is_path:
            with source.open("rb") as file:
                # One byte past the bound: a file too large is refused, never read whole.
                data = file.read(MAX_RULES_BYTES + 1)
            if len(data) > MAX_RULES_BYTES:
                problem = FieldError(
                    "FLEXJOBS_FAILURE_RULES", f"the rules file is over {MAX_RULES_BYTES} bytes"
                )
                raise InvalidConfiguration([problem])
            text = data.decode("utf-8")
        rules = load_rules(text)
    backoff = Backoff(
        base_seconds=settings.backoff_base_seconds,
        cap_seconds=settings.backoff_cap_seconds,
        jitter=jitter,
    )
    return RetryPolicy(rules=rules, backoff=backoff)


def admission_queues(settings: Settings) -> Queues | None:
    """The admission queues of ``FLEXJOBS_QUEUES``; None when unset: admission is off.

    The value is the YAML text, or the path of the file: one line with no ``": "`` and no
    ``{`` (which every queue file's text has, on one line or many) is a path, and must name
    a file.

    Raises:
        InvalidConfiguration: no such file, the file is too large, is not UTF-8, or does not
            read; the instance then fails to start, as it must: admission off by accident
            would let every team past its quota.
    """
    from shared.domain.admission.config import MAX_FILE_BYTES, parse_queue_file
    from shared.kernel.errors import FieldError, InvalidConfiguration

    value = settings.queues
    if not value:
        return None
    if "\n" not in value and ": " not in value and "{" not in value:
        source = Path(value)
        try:
            with source.open("rb") as file:
                # One byte past the bound, so parse_queue_file refuses a file that is too
                # large without this reading all of it.
                data = file.read(MAX_FILE_BYTES + 1)
            value = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problem = FieldError(
                "FLEXJOBS_QUEUES", f"the queue file {value!r} does not read: {exc}"
            )
            raise InvalidConfiguration([problem]) from exc
    return parse_queue_file(value)


def build_tracker(
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utc_now,
    ports: Ports | None = None,
) -> Tracker:
    """The production wiring of :class:`Tracker`, but the adapters ``ports`` gives."""
    from shared.adapters.gcs import GcsCheckpointStore
    from shared.adapters.pubsub import PubsubNotifier
    from shared.adapters.vertex.jobs import VertexJobBackend
    from shared.app.context import Tracker

    settings = settings or Settings.from_env()
    ports = ports or Ports()
    queues = admission_queues(settings)
    return Tracker(
        settings=settings,
        jobs=job_records(settings, ports),
        backend=_given(ports.job_backend, lambda: VertexJobBackend(settings)),
        checkpoints=_given(ports.checkpoints, lambda: GcsCheckpointStore(project=settings.project)),
        notifier=_given(ports.notifier, lambda: PubsubNotifier(settings)),
        retry=retry_policy(settings, jitter=ports.jitter),
        prices=ports.price_table(),
        clock=clock,
        deployments=build_deployments(settings, clock, ports),
        sleep=ports.sleep,
        queues=queues,
        # Read only when admission is on; the client is built on the first read.
        quota_limits=_quota_limits(settings, ports) if queues is not None else None,
    )


def _quota_limits(settings: Settings, ports: Ports) -> QuotaLimits:
    """The quota limits port of a Ports (the Cloud Quotas adapter, built once: its client is
    built on its first read)."""

    def build() -> QuotaLimits:
        from shared.adapters.cloudquotas import CloudQuotasLimits

        return CloudQuotasLimits(settings)

    return _given(ports.quota_limits, lambda: ports.once("quota_limits", build))


def tracker() -> Tracker:
    """The instance-wide :class:`Tracker`, built on first use."""
    global _tracker
    with _lock:
        if _tracker is None:
            configure()
            _tracker = build_tracker()
        return _tracker


def override_tracker(value: Tracker | None) -> None:
    """Install a prebuilt :class:`Tracker` (tests), or drop it so the next call rebuilds."""
    global _tracker
    with _lock:
        _tracker = value


def build_uploads(
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utc_now,
    ports: Ports | None = None,
) -> Uploads:
    """The production wiring of :class:`~shared.app.context.Uploads`: an intake of its own (the
    upload function submits requests exactly as the requests function does) and GCS, but the
    adapters ``ports`` gives."""
    from shared.adapters.gcs import GcsCheckpointStore, GcsStoredObjects
    from shared.app.context import Uploads

    settings = settings or Settings.from_env()
    ports = ports or Ports()
    timeout = settings.call_timeout_seconds
    return Uploads(
        intake=build_intake(settings, clock, ports),
        objects=_given(
            ports.objects,
            lambda: GcsStoredObjects(project=settings.project, timeout_seconds=timeout),
        ),
        checkpoints=_given(
            ports.checkpoints,
            lambda: GcsCheckpointStore(project=settings.project, timeout_seconds=timeout),
        ),
    )


def uploads() -> Uploads:
    """The instance-wide :class:`~shared.app.context.Uploads`, built on first use."""
    global _uploads
    with _lock:
        if _uploads is None:
            configure()
            _uploads = build_uploads()
        return _uploads


def override_uploads(value: Uploads | None) -> None:
    """Install a prebuilt :class:`~shared.app.context.Uploads` (tests), or drop it."""
    global _uploads
    with _lock:
        _uploads = value


def build_status_site(
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utc_now,
    ports: Ports | None = None,
) -> StatusSite:
    """The production wiring of the status page: read-only Firestore views and the prices,
    but the views and prices ``ports`` gives."""
    from shared.adapters.firestore.views import FirestoreJobViews
    from shared.status.site import StatusSite

    settings = settings or Settings.from_env()
    ports = ports or Ports()
    timeout = settings.call_timeout_seconds
    return StatusSite(
        views=_given(
            ports.views, lambda: FirestoreJobViews(_firestore(settings, ports), timeout=timeout)
        ),
        prices=ports.price_table(),
        clock=clock,
        page_size=settings.status_page_size,
    )


def status_site() -> StatusSite:
    """The instance-wide :class:`~shared.status.site.StatusSite`, built on first use."""
    global _status_site
    with _lock:
        if _status_site is None:
            configure()
            _status_site = build_status_site()
        return _status_site


def override_status_site(value: StatusSite | None) -> None:
    """Install a prebuilt :class:`~shared.status.site.StatusSite` (tests), or drop it."""
    global _status_site
    with _lock:
        _status_site = value
