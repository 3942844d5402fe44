"""Structured logs carry severity, message and the requestId label."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from shared.kernel.logs import (
    ERROR_EVENT_TYPE,
    CloudLoggingFormatter,
    Trace,
    request_context,
    trace_context,
    trace_of,
)


def test_cloud_logging_shape():
    record = logging.LogRecord("flexjobs.x", logging.WARNING, __file__, 1, "hello %s", ("w",), None)
    record.fields = {"vertexJob": "projects/p/locations/l/customJobs/1"}
    with request_context("seed-1"):
        line = json.loads(CloudLoggingFormatter().format(record))
    assert line["severity"] == "WARNING"
    assert line["message"] == "hello w"
    assert line["logging.googleapis.com/labels"] == {"requestId": "seed-1"}
    assert line["vertexJob"].endswith("/1")


def test_no_label_outside_a_request():
    record = logging.LogRecord("flexjobs.x", logging.INFO, __file__, 1, "m", (), None)
    assert "logging.googleapis.com/labels" not in json.loads(CloudLoggingFormatter().format(record))


def _line(level: int = logging.INFO, exc_info=None) -> dict:
    record = logging.LogRecord("flexjobs.x", level, "/src/shared/x.py", 7, "m", (), exc_info)
    record.funcName = "step"
    return json.loads(CloudLoggingFormatter().format(record))


def test_every_line_names_its_source():
    assert _line()["logging.googleapis.com/sourceLocation"] == {
        "file": "/src/shared/x.py",
        "line": "7",
        "function": "step",
    }


def test_only_error_lines_are_error_reporting_events(monkeypatch):
    monkeypatch.delenv("FLEXJOBS_BUILD", raising=False)
    monkeypatch.setenv("K_SERVICE", "flexjobs-handle-upload")
    monkeypatch.setenv("K_REVISION", "flexjobs-handle-upload-00007")
    assert "@type" not in _line(logging.WARNING)
    line = _line(logging.ERROR)
    assert line["@type"] == ERROR_EVENT_TYPE
    assert line["serviceContext"] == {
        "service": "flexjobs-handle-upload",
        "version": "flexjobs-handle-upload-00007",
    }
    assert line["context"]["reportLocation"] == {
        "filePath": "/src/shared/x.py",
        "lineNumber": 7,
        "functionName": "step",
    }
    try:
        raise ValueError("boom")
    except ValueError:
        with_traceback = _line(logging.ERROR, sys.exc_info())
    # The traceback in the message is what Error Reporting groups on: no location needed.
    assert "Traceback" in with_traceback["message"] and "context" not in with_traceback


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"traceparent": "garbage"},
        {"traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
        {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"},
        {"X-Cloud-Trace-Context": "not-a-trace"},
        {"X-Cloud-Trace-Context": "00000000000000000000000000000000/1;o=1"},
    ],
)
def test_an_unreadable_trace_header_is_no_trace(headers):
    assert trace_of(headers) is None


def test_traceparent_wins_over_the_cloud_header_and_flags_say_sampled():
    both = {
        "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        "X-Cloud-Trace-Context": "105445aa7843bc8bf206b12000100000/1;o=1",
    }
    assert trace_of(both) == Trace("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", False)
    # A later version may append fields; only version 00 must end after the flags.
    later = {"traceparent": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"}
    assert trace_of(later) == Trace("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)
    no_span = {"X-Cloud-Trace-Context": "105445AA7843BC8BF206B12000100000"}
    assert trace_of(no_span) == Trace("105445aa7843bc8bf206b12000100000", None, False)


def test_a_line_in_a_trace_names_it_under_the_project(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    with trace_context(Trace("4bf92f3577b34da6a3ce929d0e0e4736", None, True)):
        line = _line()
    assert (
        line["logging.googleapis.com/trace"]
        == "projects/proj/traces/4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert "logging.googleapis.com/spanId" not in line
    assert "logging.googleapis.com/trace" not in _line()  # the block's trace ended with it
