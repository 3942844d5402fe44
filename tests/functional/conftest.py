from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cloudevents.conversion import to_structured
from functions_framework import create_app

from shared import bootstrap
from shared.app.context import Deployments, Intake, Tracker
from shared.app.repository.deployments import DeploymentRecords
from shared.app.repository.jobs import JobRecords
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import Backoff, RetryPolicy
from shared.domain.request.validation import Guards, validators
from shared.kernel.config import Settings
from tests.fakes import (
    FakeClock,
    InMemoryCheckpointStore,
    InMemoryDeploymentBackend,
    InMemoryDeploymentStore,
    InMemoryJobBackend,
    InMemoryJobStore,
    InMemoryNotifier,
    InMemoryRejectionLog,
)

SOURCE = str(Path(__file__).resolve().parents[2] / "functions" / "main.py")


ENDPOINT = "projects/p/locations/us-central1/endpoints/123"

# Five seconds after the publishTime of tests/events/pubsub_push_envelope.json.
START = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)
PRICES = "accelerators: {NVIDIA_TESLA_A100: {STANDARD: 4.00, SPOT: 1.60, FLEX_START: 2.00}}"


#: The request bucket of the fakes' settings (FLEXJOBS_REQUEST_BUCKET): uploads come from it.
REQUEST_BUCKET = "flexjobs-uploads"


def wire_fakes(settings: Settings | None = None) -> Intake:
    """An :class:`Intake` on the in-memory fakes, validated like production."""
    settings = settings or Settings(project="p", request_bucket=REQUEST_BUCKET)
    guards = Guards.from_settings(settings)
    clock = lambda: datetime.now(UTC)  # noqa: E731
    deployments = Deployments(
        settings=settings,
        store=DeploymentRecords(InMemoryDeploymentStore()),
        backend=InMemoryDeploymentBackend(),
        clock=clock,
    )
    deployments.backend.add_endpoint(ENDPOINT)
    return Intake(
        settings=settings,
        store=JobRecords(InMemoryJobStore(), settings.location),
        backend=InMemoryJobBackend(),
        rejections=InMemoryRejectionLog(),
        notifier=InMemoryNotifier(),
        # The production validators; parse_request already read the body with the v1 protos.
        validators=validators(guards),
        clock=clock,
        deployments=deployments,
    )


@pytest.fixture
def intake() -> Iterator[Intake]:
    wired = wire_fakes()
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
def tracker(
    intake: Intake, clock: FakeClock, checkpoints: InMemoryCheckpointStore
) -> Iterator[Tracker]:
    """A :class:`Tracker` on the same fakes as ``intake``, on a clock that moves when told.

    Retries are due at once (backoff base 0) and ``sleep`` returns at once; ``intake`` is put
    on the same clock, so a cancel and a hint see the same time.
    """
    intake.clock = clock
    wired = Tracker(
        settings=intake.settings,
        store=intake.store,
        backend=intake.backend,
        checkpoints=checkpoints,
        notifier=intake.notifier,
        retry=RetryPolicy(backoff=Backoff(base_seconds=0, jitter=lambda: 0.5)),
        prices=PriceTable.load(PRICES),
        clock=clock,
        sleep=lambda _seconds: None,
    )
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
