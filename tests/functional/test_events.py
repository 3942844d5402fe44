"""The log lines the monitoring reads carry what ``shared.kernel.events`` declares.

The log-based metrics of ``infra/monitoring.tf`` may name only the events and fields that
:data:`~shared.kernel.events.FIELDS` declares (``tests/unit/test_monitoring.py``); here the
entry points run real scenarios on the fakes, every line is captured as Cloud Logging would
parse it (the production formatter), and each declared field must show up on a line of its
event. A field declared but logged by no line fails here, so a metric over it would be empty.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from shared import bootstrap
from shared.kernel.config import Settings
from shared.kernel.events import FIELDS, Event
from shared.kernel.logs import CloudLoggingFormatter, configure
from tests.events import pubsub_cloud_event
from tests.functional.conftest import ENV
from tests.functional.test_admission import QUEUES, body, finish, publish
from tests.functional.test_lifecycle_handlers import (
    PREEMPTED,
    STEP_SECONDS,
    cancel,
    current,
    end,
    hint,
    run,
    submit,
    tick,
)


class _Lines(logging.Handler):
    """Every flexjobs log line, as the JSON Cloud Logging reads from stdout."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(CloudLoggingFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))

    def of(self, event: Event) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == event.value]


@pytest.fixture
def lines() -> Iterator[_Lines]:
    # On the flexjobs logger itself, which configure() stops propagating to the root; and
    # configured first, since configuring replaces the logger's handlers.
    configure()
    handler, logger = _Lines(), logging.getLogger("flexjobs")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def _life_of_a_preempted_job(tracker, clock, post_event) -> None:
    """Attempt 1 runs and is preempted; attempt 2 resumes at once and succeeds; a tick."""
    submit(post_event)
    first = current(tracker)["vertexJob"]
    run(tracker, clock, first)
    assert hint(post_event, clock, first) == 200
    clock.advance(600)
    end(tracker, clock, first, "JOB_STATE_FAILED", PREEMPTED, code=14)
    assert hint(post_event, clock, first) == 200
    second = current(tracker)["vertexJob"]
    run(tracker, clock, second)
    clock.advance(3600)
    end(tracker, clock, second, "JOB_STATE_SUCCEEDED")
    assert hint(post_event, clock, second) == 200
    assert tick(post_event, clock) == 200


def _two_requests_for_one_queue(ports, clock, post_event) -> None:
    """With a queue file: one request is admitted, the next waits until the first ends."""
    env = {**ENV, "FLEXJOBS_QUEUES": QUEUES}
    intake = bootstrap.build_intake(Settings.from_env(env), ports=ports)
    intake.clock = clock
    tracker = bootstrap.build_tracker(Settings.from_env(env), clock, ports)
    bootstrap.override(intake)
    bootstrap.override_tracker(tracker)
    assert publish(post_event, clock, body("queued-1")) == 200
    assert publish(post_event, clock, body("queued-2")) == 200
    finish(post_event, clock, tracker, "queued-1")
    assert tracker.jobs.job_store.get("queued-2")["admission"]["stage"] == "ADMITTED"


def test_every_declared_field_is_logged_on_its_events_lines(
    tracker, ports, clock, post_event, lines
):
    _life_of_a_preempted_job(tracker, clock, post_event)
    bad = pubsub_cloud_event({"requestId": "bad-1"}, message_id="bad-1")
    assert post_event("handle_job_request", bad).status_code == 200
    _two_requests_for_one_queue(ports, clock, post_event)

    missing = {
        event.value: sorted(FIELDS[event] - {k for line in lines.of(event) for k in line})
        for event in Event
    }
    assert {event: fields for event, fields in missing.items() if fields} == {}


def test_the_lines_carry_the_values_the_metrics_extract(tracker, clock, post_event, lines):
    _life_of_a_preempted_job(tracker, clock, post_event)

    changed = [(line["state"], line["attempt"]) for line in lines.of(Event.JOB_STATE_CHANGED)]
    assert changed == [("RUNNING", 1), ("RETRYING", 1), ("SUCCEEDED", 2)]
    # Each attempt is accounted once, on the change that ends it.
    ended = [line for line in lines.of(Event.JOB_STATE_CHANGED) if "gpuSeconds" in line]
    assert [line["state"] for line in ended] == ["RETRYING", "SUCCEEDED"]
    succeeded = ended[-1]
    # One A100 for an hour on FLEX_START at 2.00 a GPU-hour (tests/functional/conftest.py).
    assert (succeeded["gpuSeconds"], succeeded["costUsd"]) == (3600.0, 2.0)
    assert succeeded["strategy"] == "FLEX_START" and "failureClass" not in succeeded
    assert ended[0]["failureClass"] == "preempted"
    assert all(line["queueSeconds"] >= 0 for line in ended)

    (preempted,) = lines.of(Event.JOB_PREEMPTED)
    assert (preempted["attempt"], preempted["strategy"]) == (1, "FLEX_START")
    submitted = lines.of(Event.JOB_SUBMITTED)
    assert [(line["attempt"], line["outcome"]) for line in submitted] == [
        (1, "submitted"),
        (2, "submitted"),
    ]
    assert "recoveryGapSeconds" not in submitted[0]
    # Attempt 1 ended, its hint came a step (and half a second) later, attempt 2 at once.
    assert submitted[1]["recoveryGapSeconds"] == pytest.approx(STEP_SECONDS + 0.5)
    (done,) = lines.of(Event.TICK_DONE)
    assert done["failed"] == 0


def test_a_state_decided_without_vertex_is_logged_too(tracker, clock, post_event, lines):
    submit(post_event)
    run(tracker, clock, current(tracker)["vertexJob"])
    cancel(post_event)

    changed = [(line["state"], line["attempt"]) for line in lines.of(Event.JOB_STATE_CHANGED)]
    assert changed == [("CANCELLED", 1)]
    bad = pubsub_cloud_event(b"not json", message_id="bad-2")
    assert post_event("handle_job_request", bad).status_code == 200
    (rejected,) = lines.of(Event.JOB_REJECTED)
    assert rejected["count"] >= 1 and rejected["severity"] == "WARNING"
