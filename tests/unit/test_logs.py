"""Structured logs carry severity, message and the requestId label."""

from __future__ import annotations

import json
import logging

from shared.kernel.logs import CloudLoggingFormatter, request_context


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
