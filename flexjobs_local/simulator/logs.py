"""The jobs' Cloud Logging entries, served as the Logging API serves them (``entries:list``).

Vertex writes a training job's lines under ``resource.type="ml_job"`` and
``resource.labels.job_id=<the job's id>``: the containers' output, and the service's own
state-change lines. The simulator runs no container, so the lines it keeps are the
service's: one entry per state change, the same LogEntry it publishes as a hint
(:func:`flexjobs_local.simulator.effects.hint_entry`), kept whether hints are on or not.

``POST /v2/entries:list`` on the control port takes the v2 request body (``resourceNames``,
``filter``, ``orderBy``, ``pageSize``, ``pageToken``) and answers ``{"entries": [...],
"nextPageToken"}``. The filter may be what ``flexjobs logs`` sends: comparisons joined by
``AND``, of ``resource.type``, ``resource.labels.KEY``, ``logName`` or ``severity`` with
``=``, and of ``timestamp`` with ``=``, ``>``, ``>=``, ``<`` or ``<=``, each value in double
quotes. Anything else is refused (400), never read loosely. At most :data:`MAX_ENTRIES`
entries are kept, the oldest dropped first.
"""

from __future__ import annotations

import collections
import itertools
import operator
import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from flexjobs_local.simulator.common import CheckpointWrite, StateChanged
from flexjobs_local.simulator.effects import hint_entry
from flexjobs_local.simulator.engine import Engine

MAX_ENTRIES: Final = 20_000
MAX_PAGE_SIZE: Final = 1000
_TERM: Final = re.compile(r'\s*([A-Za-z_.]+)\s*(>=|<=|=|>|<)\s*"((?:[^"\\]|\\.)*)"\s*')
_FIELDS: Final = re.compile(r"resource\.type|resource\.labels\.[a-z_]+|logName|severity|timestamp")


class BadFilter(ValueError):
    """A filter, order or page the simulator's Logging API does not take."""


def _value(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.replace("resource.labels.", "resource.labels/").split("."):
        for key in part.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
    return value


def _time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadFilter(f"timestamp {text!r} is not RFC 3339") from exc


_COMPARE: Final[dict[str, Callable[[datetime, datetime], bool]]] = {
    "=": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _timestamp_test(op: str, at: datetime) -> Callable[[dict[str, Any]], bool]:
    compare = _COMPARE[op]
    return lambda entry: compare(_time(str(entry.get("timestamp", ""))), at)


def _equal_test(field: str, wanted: str) -> Callable[[dict[str, Any]], bool]:
    return lambda entry: _value(entry, field) == wanted


def parse_filter(text: str) -> list[Callable[[dict[str, Any]], bool]]:
    """The tests of a filter, one per ``AND``ed comparison.

    Examples:
        >>> [t] = parse_filter('resource.labels.job_id="7"')
        >>> t({"resource": {"labels": {"job_id": "7"}}}), t({"resource": {}})
        (True, False)
        >>> parse_filter('textPayload:"x"')
        Traceback (most recent call last):
        ...
        flexjobs_local.simulator.logs.BadFilter: unsupported filter term 'textPayload:"x"'
    """
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for term in (t for t in re.split(r"\s+AND\s+", text.strip()) if t.strip()):
        match = _TERM.fullmatch(term)
        if not match or not _FIELDS.fullmatch(match.group(1)):
            raise BadFilter(f"unsupported filter term {term.strip()!r}")
        field, op, raw = match.groups()
        wanted = raw.replace('\\"', '"').replace("\\\\", "\\")
        if field == "timestamp":
            tests.append(_timestamp_test(op, _time(wanted)))
        elif op == "=":
            tests.append(_equal_test(field, wanted))
        else:
            raise BadFilter(f"{field} takes only =, not {op}")
    return tests


class JobLogs:
    """The state-change entries of every ``ml_job`` (custom and tuning jobs), newest last."""

    def __init__(self, engine: Engine, project: str) -> None:
        self._project = project
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_ENTRIES)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        engine.add_listener(self._on_event)

    def _on_event(self, event: StateChanged | CheckpointWrite) -> None:
        # Under the engine's lock: append only. A pipeline's lines are not ml_job lines.
        if isinstance(event, StateChanged) and event.resource != "TrainingPipeline":
            with self._lock:
                self._entries.append(hint_entry(event, f"simlog-{next(self._ids)}"))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def list_entries(self, body: dict[str, Any]) -> dict[str, Any]:
        """``entries:list``: the entries of ``resourceNames`` that pass ``filter``, in
        ``orderBy`` order (``timestamp asc``, the API's default, or ``timestamp desc``), a page
        of ``pageSize`` (at most 1,000) after ``pageToken``."""
        names = body.get("resourceNames")
        if not isinstance(names, list) or f"projects/{self._project}" not in names:
            raise BadFilter(f"resourceNames must name projects/{self._project}")
        tests = parse_filter(str(body.get("filter") or ""))
        order = str(body.get("orderBy") or "timestamp asc").strip().lower()
        if order not in ("timestamp asc", "timestamp desc"):
            raise BadFilter(f"orderBy {order!r}: only 'timestamp asc' or 'timestamp desc'")
        size = body.get("pageSize", 50)
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_PAGE_SIZE:
            raise BadFilter(f"pageSize must be 1 to {MAX_PAGE_SIZE}")
        token = str(body.get("pageToken") or "0")
        if not token.isdigit() or len(token) > 9:
            raise BadFilter("pageToken is not one this API gave")
        start = int(token)
        with self._lock:
            chosen = [e for e in self._entries if all(test(e) for test in tests)]
        # Stable: entries of one instant stay in the order they were written.
        chosen.sort(key=lambda e: _time(e["timestamp"]))
        if order == "timestamp desc":
            chosen.reverse()
        page = chosen[start : start + size]
        answer: dict[str, Any] = {"entries": page}
        if start + size < len(chosen):
            answer["nextPageToken"] = str(start + size)
        return answer
