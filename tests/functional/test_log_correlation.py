"""Log lines nest under the request that delivered them: through functions-framework, a
delivery with a ``traceparent`` header logs in that trace, with each line's source."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from cloudevents.conversion import to_structured
from functions_framework import create_app

from shared.kernel.errors import BackendRejected, StoreUnavailable
from shared.kernel.logs import ERROR_EVENT_TYPE, CloudLoggingFormatter, configure
from tests.events import load, pubsub_cloud_event
from tests.functional.conftest import SOURCE

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


class _Lines(logging.Handler):
    """Every flexjobs line, formatted as the function prints it."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(CloudLoggingFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def lines(monkeypatch) -> Iterator[list[dict]]:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    configure()  # first, or it would replace the handler added here
    handler = _Lines()
    logger = logging.getLogger("flexjobs")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def _deliver(target: str, event, headers: dict[str, str]):
    client = create_app(target, SOURCE, "cloudevent").test_client()
    structured, body = to_structured(event)
    return client.post("/", headers={**structured, **headers}, data=body)


def test_a_delivery_with_traceparent_logs_in_its_trace(intake, lines):
    response = _deliver(
        "handle_job_request",
        pubsub_cloud_event(load("seed_request")),
        {"traceparent": f"00-{TRACE}-{SPAN}-01"},
    )

    assert response.status_code == 200
    assert lines, "the delivery logged nothing"
    for line in lines:
        assert line["logging.googleapis.com/trace"] == f"projects/p/traces/{TRACE}"
        assert line["logging.googleapis.com/spanId"] == SPAN
        assert line["logging.googleapis.com/trace_sampled"] is True
        location = line["logging.googleapis.com/sourceLocation"]
        assert location["file"].endswith(".py") and int(location["line"]) > 0
        assert location["function"]


def test_an_error_line_of_a_delivery_is_an_error_reporting_event(intake, lines, monkeypatch):
    monkeypatch.setenv("K_SERVICE", "flexjobs-handle-job-request")
    monkeypatch.setenv("FLEXJOBS_BUILD", "function-source-0123abcd")
    intake.backend.fail_with = BackendRejected("the image is not allowed")
    event = pubsub_cloud_event(load("seed_request"))

    response = _deliver("handle_job_request", event, {"X-Cloud-Trace-Context": f"{TRACE}/1;o=0"})

    assert response.status_code == 200  # refused for good and recorded: acknowledged
    errors = [line for line in lines if line["severity"] == "ERROR"]
    assert errors, "a create Vertex refused for good logs an ERROR line"
    for line in errors:
        assert line["@type"] == ERROR_EVENT_TYPE
        assert line["serviceContext"] == {
            "service": "flexjobs-handle-job-request",
            "version": "function-source-0123abcd",
        }
        assert line["context"]["reportLocation"]["lineNumber"] > 0
        assert line["logging.googleapis.com/trace"] == f"projects/p/traces/{TRACE}"
        assert line["logging.googleapis.com/spanId"] == "0000000000000001"
        assert line["logging.googleapis.com/trace_sampled"] is False


def test_a_delivery_without_trace_headers_logs_no_trace(intake, lines):
    assert (
        _deliver("handle_job_request", pubsub_cloud_event(load("seed_request")), {}).status_code
        == 200
    )
    assert lines and all("logging.googleapis.com/trace" not in line for line in lines)


def test_a_status_page_request_logs_in_its_trace(intake, tracker, clock, lines):
    from shared import bootstrap
    from shared.domain.policy.pricing import PriceTable
    from shared.status.site import StatusSite
    from tests.fakes import InMemoryJobViews
    from tests.functional.conftest import PRICES

    views = InMemoryJobViews(
        tracker.jobs.job_store.database, intake.deployments.records.deployment_store
    )
    views.fail = StoreUnavailable("Firestore query failed: 503 unavailable")
    bootstrap.override_status_site(
        StatusSite(views, PriceTable.load(PRICES), clock, totals_seconds=0)
    )
    try:
        client = create_app("status_page", SOURCE, "http").test_client()
        response = client.get("/", headers={"traceparent": f"00-{TRACE}-{SPAN}-01"})
    finally:
        bootstrap.override_status_site(None)

    assert response.status_code == 503
    assert [line["severity"] for line in lines] == ["ERROR"]
    assert lines[0]["logging.googleapis.com/trace"] == f"projects/p/traces/{TRACE}"
    assert lines[0]["@type"] == ERROR_EVENT_TYPE
