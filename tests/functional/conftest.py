from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cloudevents.conversion import to_structured
from functions_framework import create_app
from shared.domain.rules import Guards, check_request

from shared import bootstrap
from shared.config import Settings
from shared.services import Intake
from tests.fakes import (
    InMemoryJobBackend,
    InMemoryJobStore,
    InMemoryNotifier,
    InMemoryRejectionLog,
)

SOURCE = str(Path(__file__).resolve().parents[2] / "functions" / "main.py")


@pytest.fixture
def intake() -> Iterator[Intake]:
    settings = Settings(project="p")
    guards = Guards.from_settings(settings)
    wired = Intake(
        settings=settings,
        store=InMemoryJobStore(),
        backend=InMemoryJobBackend(),
        rejections=InMemoryRejectionLog(),
        notifier=InMemoryNotifier(),
        validators=(lambda r: check_request(r, guards=guards),),
        clock=lambda: datetime.now(UTC),
    )
    bootstrap.override(wired)
    yield wired
    bootstrap.override(None)


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
