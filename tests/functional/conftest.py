from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cloudevents.conversion import to_structured
from functions_framework import create_app

from shared import bootstrap
from shared.app.context import Intake, Tracker
from shared.bootstrap import Ports
from shared.domain.policy.pricing import PriceTable
from shared.kernel.config import Settings
from tests.fakes import (
    FakeClock,
    InMemoryCheckpointStore,
    InMemoryDeploymentBackend,
    InMemoryDeploymentStore,
    InMemoryJobBackend,
    InMemoryNotifier,
    InMemoryQuotaLimits,
    InMemoryRejectionLog,
    in_memory_job_stores,
)

SOURCE = str(Path(__file__).resolve().parents[2] / "functions" / "main.py")


ENDPOINT = "projects/p/locations/us-central1/endpoints/123"

# Five seconds after the publishTime of tests/events/pubsub_push_envelope.json.
START = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)
PRICES = "accelerators: {NVIDIA_TESLA_A100: {STANDARD: 4.00, SPOT: 1.60, FLEX_START: 2.00}}"


#: The request bucket of the fakes' settings (FLEXJOBS_REQUEST_BUCKET): uploads come from it.
REQUEST_BUCKET = "flexjobs-uploads"


#: The environment of the fakes' settings, read as the functions read theirs.
ENV = {"GOOGLE_CLOUD_PROJECT": "p", "FLEXJOBS_REQUEST_BUCKET": REQUEST_BUCKET}


def fake_ports(checkpoints: InMemoryCheckpointStore | None = None) -> Ports:
    """The in-memory fakes, for the bootstrap's builders to wire as production is wired.

    The jitter is constant, so a backoff is a known time; ``sleep`` returns at once.
    """
    deployment_backend = InMemoryDeploymentBackend()
    deployment_backend.add_endpoint(ENDPOINT)
    return Ports(
        # The five job stores, on one in-memory database.
        **in_memory_job_stores(),
        job_backend=InMemoryJobBackend(),
        rejections=InMemoryRejectionLog(),
        notifier=InMemoryNotifier(),
        deployment_store=InMemoryDeploymentStore(),
        deployment_backend=deployment_backend,
        checkpoints=checkpoints or InMemoryCheckpointStore(),
        # Reports no limit: the queue file's projectQuota is the ceiling unless a test sets one.
        quota_limits=InMemoryQuotaLimits(),
        prices=PriceTable.load(PRICES),
        jitter=lambda: 0.5,
        sleep=lambda _seconds: None,
    )


def wire_fakes(settings: Settings | None = None, ports: Ports | None = None) -> Intake:
    """An :class:`Intake` on the in-memory fakes, wired by the production builder."""
    settings = settings or Settings.from_env(ENV)
    return bootstrap.build_intake(settings, ports=ports or fake_ports())


@pytest.fixture
def ports(checkpoints: InMemoryCheckpointStore) -> Ports:
    """The fakes ``intake`` and ``tracker`` share, as the functions share Firestore."""
    return fake_ports(checkpoints)


@pytest.fixture
def intake(ports: Ports) -> Iterator[Intake]:
    wired = wire_fakes(ports=ports)
    bootstrap.override(wired)
    yield wired
    bootstrap.override(None)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def checkpoints() -> InMemoryCheckpointStore:
    """The checkpoint buckets, shared by the lifecycle and the upload function."""
    return InMemoryCheckpointStore()


@pytest.fixture
def tracker(intake: Intake, ports: Ports, clock: FakeClock) -> Iterator[Tracker]:
    """A :class:`Tracker` on the same fakes as ``intake``, on a clock that moves when told.

    Retries are due at once (backoff base 0) and ``sleep`` returns at once; ``intake`` is put
    on the same clock, so a cancel and a hint see the same time.
    """
    intake.clock = clock
    if intake.deployments is not None:
        intake.deployments.clock = clock
    settings = Settings.from_env({**ENV, "FLEXJOBS_BACKOFF_BASE_SECONDS": "0"})
    wired = bootstrap.build_tracker(settings, clock, ports)
    bootstrap.override_tracker(wired)
    yield wired
    bootstrap.override_tracker(None)


@pytest.fixture
def post_event():
    """Post a CloudEvent to an entry point through functions-framework; returns the response."""
    clients = {}

    def post(target: str, event):
        if target not in clients:
            clients[target] = create_app(target, SOURCE, "cloudevent").test_client()
        headers, body = to_structured(event)
        return clients[target].post("/", headers=headers, data=body)

    return post
