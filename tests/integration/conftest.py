"""Session fixtures: one embedded stack (real emulators, simulator, function servers) per run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flexjobs_local.stack import LocalStack, StackConfig

# The simulator's own tests share these fixtures; each module defines the ``sim`` they use.
from tests.integration.helpers import running_stack
from tests.integration.simulator_support import control, jobs  # noqa: F401

# The function servers' settings for the whole session: a short claim TTL so the crash-window
# test need not wait two minutes for a dead claim to expire, and no hint coalescing delay
# beyond what the hint tests set themselves.
# Backoff 0: a retryable failure is resubmitted at once from the event handler.
FUNCTION_ENV = {
    "FLEXJOBS_CLAIM_TTL_SECONDS": "5",
    "FLEXJOBS_HINT_COALESCE_SECONDS": "2",
    "FLEXJOBS_BACKOFF_BASE_SECONDS": "0",
}


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    config = StackConfig(time_factor=60.0, function_env=FUNCTION_ENV)
    # FLEXJOBS_STACK_LOGS=DIR keeps the stack's logs (every process's output) there after the
    # run, for a failure to be read; by default they go with the stack's temporary folder.
    kept = os.environ.get("FLEXJOBS_STACK_LOGS")
    with running_stack(config, workdir=Path(kept) if kept else None) as stack:
        yield stack


@pytest.fixture
def stack(local_stack: LocalStack) -> LocalStack:
    """The session's stack, with the simulator and Firestore reset for this test."""
    local_stack.simulator.reset()
    local_stack.simulator.set_hints(enabled=True)
    local_stack.reset_firestore()
    return local_stack


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Ids unique to this test, so late redeliveries of other tests never collide."""
    run = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{run}"


@pytest.fixture
def db(local_stack: LocalStack) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=local_stack.config.project)


@pytest.fixture
def notifications(local_stack: LocalStack) -> Callable[[str], list[dict[str, Any]]]:
    """Read what flexjobs published on the notifications topic for one requestId so far."""
    import json

    from flexjobs_local.stack import NOTIFICATIONS_TAP

    _, subscriber = local_stack.pubsub_clients()
    path = subscriber.subscription_path(local_stack.config.project, NOTIFICATIONS_TAP)
    seen: list[dict[str, Any]] = []

    def read(request_id: str) -> list[dict[str, Any]]:
        while True:
            response = subscriber.pull(
                request={"subscription": path, "max_messages": 100}, timeout=10
            )
            if not response.received_messages:
                break
            seen.extend(json.loads(m.message.data) for m in response.received_messages)
            subscriber.acknowledge(
                request={
                    "subscription": path,
                    "ack_ids": [m.ack_id for m in response.received_messages],
                }
            )
        return [m for m in seen if m.get("requestId") == request_id]

    return read
