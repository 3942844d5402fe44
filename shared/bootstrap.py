"""Wire the services to their adapters once per function instance, lazily.

Nothing here runs at import time: the first invocation builds the settings and adapters, and
the Google clients themselves are created on their first call. Tests install their own
wiring (in-memory fakes) with :func:`override` and :func:`override_tracker`, and drop it with
``override(None)`` so the next call rebuilds.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from shared.app.context import Deployments, Intake, Tracker
from shared.app.repository.deployments import DeploymentRecords
from shared.app.repository.jobs import JobRecords
from shared.app.uploads import Uploads
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import Backoff, RetryPolicy
from shared.kernel.config import Settings
from shared.kernel.logs import configure
from shared.status.site import StatusSite

if TYPE_CHECKING:
    from shared.adapters.firestore.job_store import FirestoreJobStore

_lock = threading.Lock()
_intake: Intake | None = None
_tracker: Tracker | None = None
_uploads: Uploads | None = None
_status_site: StatusSite | None = None


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_intake(
    settings: Settings | None = None, clock: Callable[[], datetime] = utc_now
) -> Intake:
    """The production wiring of :class:`Intake`: Firestore, Vertex AI and Pub/Sub adapters."""
    from shared.adapters.firestore.job_store import FirestoreJobStore, FirestoreRejectionLog
    from shared.adapters.pubsub import PubsubNotifier
    from shared.adapters.vertex.jobs import VertexJobBackend
    from shared.domain.request.validation import Guards, validators

    settings = settings or Settings.from_env()
    store = FirestoreJobStore(settings)
    backend = VertexJobBackend(settings)
    deployments = build_deployments(settings, clock, jobs=store)
    guards = Guards.from_settings(settings)
    return Intake(
        settings=settings,
        store=JobRecords(store, settings.location),
        backend=backend,
        rejections=FirestoreRejectionLog(store),
        notifier=PubsubNotifier(settings),
        # The body was parsed with the v1 proto by parse_request (shared.domain.request.canonical),
        # so what the protos refuse is already reported; these run on its canonical form.
        validators=validators(guards),
        clock=clock,
        deployments=deployments,
        retry=retry_policy(settings, classify=False),
        prices=PriceTable.default(),
    )


def build_deployments(
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utc_now,
    jobs: FirestoreJobStore | None = None,
) -> Deployments:
    """The production wiring of :class:`~shared.app.deploy.Deployments` (Firestore, Vertex).

    ``jobs`` shares its Firestore client; without it a store of its own is built (lazily).
    """
    from shared.adapters.firestore.deployment_store import FirestoreDeploymentStore
    from shared.adapters.firestore.job_store import FirestoreJobStore
    from shared.adapters.vertex.endpoints import VertexDeploymentBackend

    settings = settings or Settings.from_env()
    return Deployments(
        settings=settings,
        store=DeploymentRecords(FirestoreDeploymentStore(jobs or FirestoreJobStore(settings))),
        backend=VertexDeploymentBackend(settings),
        clock=clock,
        retry=retry_policy(settings, classify=False),
    )


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


def retry_policy(settings: Settings, *, classify: bool = True) -> RetryPolicy:
    """The one retry policy, from the settings: the failure table (``FLEXJOBS_FAILURE_RULES``,
    a path or the text), the budgets, and the backoff with random jitter.

    Intake and deployments only space parked creates with the backoff, so they build it with
    ``classify=False``: a malformed failure table then stops only the functions that
    classify failures (the event handler and the tick), never the intake of requests.
    """
    from shared.domain.policy.failures import DEFAULT_RULES, load_rules

    rules = DEFAULT_RULES
    if classify and settings.failure_rules:
        source = Path(settings.failure_rules)
        is_path = len(settings.failure_rules) < 4096 and source.is_file()
        rules = load_rules(source.read_text() if is_path else settings.failure_rules)
    backoff = Backoff(
        base_seconds=settings.backoff_base_seconds,
        cap_seconds=settings.backoff_cap_seconds,
        jitter=random.random,
    )
    return RetryPolicy(rules=rules, backoff=backoff)


def build_tracker(
    settings: Settings | None = None, clock: Callable[[], datetime] = utc_now
) -> Tracker:
    """The production wiring of :class:`Tracker`."""
    from shared.adapters.firestore.job_store import FirestoreJobStore
    from shared.adapters.gcs import GcsCheckpointStore
    from shared.adapters.pubsub import PubsubNotifier
    from shared.adapters.vertex.jobs import VertexJobBackend

    settings = settings or Settings.from_env()
    store = FirestoreJobStore(settings)
    return Tracker(
        settings=settings,
        store=JobRecords(store, settings.location),
        backend=VertexJobBackend(settings),
        checkpoints=GcsCheckpointStore(project=settings.project),
        notifier=PubsubNotifier(settings),
        retry=retry_policy(settings),
        prices=PriceTable.default(),
        clock=clock,
        deployments=build_deployments(settings, clock, jobs=store),
    )


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
    settings: Settings | None = None, clock: Callable[[], datetime] = utc_now
) -> Uploads:
    """The production wiring of :class:`~shared.app.uploads.Uploads`: an intake of its own (the
    upload function submits requests exactly as the requests function does) and GCS."""
    from shared.adapters.gcs import GcsCheckpointStore, GcsStoredObjects

    settings = settings or Settings.from_env()
    timeout = settings.call_timeout_seconds
    return Uploads(
        intake=build_intake(settings, clock),
        objects=GcsStoredObjects(project=settings.project, timeout_seconds=timeout),
        checkpoints=GcsCheckpointStore(project=settings.project, timeout_seconds=timeout),
    )


def uploads() -> Uploads:
    """The instance-wide :class:`~shared.app.uploads.Uploads`, built on first use."""
    global _uploads
    with _lock:
        if _uploads is None:
            configure()
            _uploads = build_uploads()
        return _uploads


def override_uploads(value: Uploads | None) -> None:
    """Install a prebuilt :class:`~shared.app.uploads.Uploads` (tests), or drop it."""
    global _uploads
    with _lock:
        _uploads = value


def build_status_site(
    settings: Settings | None = None, clock: Callable[[], datetime] = utc_now
) -> StatusSite:
    """The production wiring of the status page: read-only Firestore views and the prices."""
    from shared.adapters.firestore.job_store import FirestoreJobStore
    from shared.adapters.firestore.views import FirestoreJobViews

    settings = settings or Settings.from_env()
    views = FirestoreJobViews(FirestoreJobStore(settings), timeout=settings.call_timeout_seconds)
    return StatusSite(
        views=views,
        prices=PriceTable.default(),
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
