"""The events the log lines that matter name, and the fields each carries: one place, read by
the code that logs them and by the log-based metrics in ``infra/monitoring.tf``.

Such a line carries ``event`` (an :class:`Event` value) among its ``jsonPayload`` fields, and
its variable parts as fields of their own: a log-based metric filters on fields, never on the
message, which is for people. :data:`FIELDS` is the contract the metrics may rely on; the
infra drift test (``tests/unit/test_monitoring.py``) refuses a filter naming an event or a
field not declared here, and ``tests/functional/test_events.py`` checks that the code logs
every field declared.

Examples:
    >>> logged(Event.TICK_DONE, changed=2, failed=0)
    {'fields': {'event': 'tick.done', 'changed': 2, 'failed': 0}}
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final


class Event(StrEnum):
    """What a log line reports; each value is its wire form (``jsonPayload.event``)."""

    #: An attempt's Vertex job was created (or adopted) and recorded.
    JOB_SUBMITTED = "job.submitted"
    #: A record's state moved; when an attempt ended, with what it used and cost.
    JOB_STATE_CHANGED = "job.state_changed"
    #: An attempt ended preempted: the capacity was reclaimed under it.
    JOB_PREEMPTED = "job.preempted"
    #: A request was refused for good, and recorded in ``rejections``.
    JOB_REJECTED = "job.rejected"
    #: A request started waiting in its admission queue.
    JOB_WAITING = "job.waiting"
    #: A waiting request was admitted: its job is created next.
    JOB_ADMITTED = "job.admitted"
    #: The scheduler tick finished its sweep.
    TICK_DONE = "tick.done"


#: The fields each event's line carries (some only where they apply: the accounting fields
#: only on the change that ends an attempt, ``recoveryGapSeconds`` only on a retry).
FIELDS: Final[Mapping[Event, frozenset[str]]] = {
    Event.JOB_SUBMITTED: frozenset(
        {"vertexJob", "attempt", "strategy", "location", "outcome", "recoveryGapSeconds"}
    ),
    Event.JOB_STATE_CHANGED: frozenset(
        {
            "state",
            "attempt",
            "strategy",
            "reason",
            "vertexJob",
            "vertexState",
            "failureClass",
            "gpuSeconds",
            "costUsd",
            "queueSeconds",
        }
    ),
    Event.JOB_PREEMPTED: frozenset({"vertexJob", "attempt", "strategy"}),
    Event.JOB_REJECTED: frozenset({"errors", "count"}),
    Event.JOB_WAITING: frozenset({"queue", "priority", "gpus"}),
    Event.JOB_ADMITTED: frozenset({"queue", "priority", "gpus", "waitedSeconds"}),
    # watch: how the tick read its records (synced, built, whole); recordsRead: how many.
    Event.TICK_DONE: frozenset({"changed", "failed", "watch", "recordsRead"}),
}


def logged(event: Event, **fields: Any) -> dict[str, Any]:
    """The ``extra`` of a log line reporting ``event`` with ``fields``."""
    return {"fields": {"event": event.value, **fields}}
