"""A sweep isolates its items: one failure is counted, the others still run."""

from __future__ import annotations

import io
import json
import logging

from shared.app.steps.sweep import Sweep
from shared.kernel.logs import CloudLoggingFormatter


def test_one_failing_item_is_counted_and_the_rest_run():
    sweep = Sweep("tick")
    done = []

    def work(item: str) -> str:
        if item == "bad":
            raise RuntimeError("only this record")
        done.append(item)
        return item

    results = [sweep.each(item, "retry", work, item) for item in ("a", "bad", "b")]

    assert results == ["a", None, "b"]
    assert done == ["a", "b"]
    assert (sweep.failed, sweep.failures) == (1, {"retry": 1})


def test_a_failure_is_logged_with_its_request_id():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(CloudLoggingFormatter())
    logger = logging.getLogger("flexjobs.sweep")
    logger.addHandler(handler)
    try:
        Sweep("tick").each("r-7", "outbox", lambda: 1 / 0)
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    (entry,) = [e for e in lines if e.get("step") == "outbox"]
    assert entry["severity"] == "ERROR"
    assert entry["logging.googleapis.com/labels"] == {"requestId": "r-7"}
    assert entry["error"] == "ZeroDivisionError"
