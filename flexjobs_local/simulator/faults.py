"""The call log and injected faults: every RPC is logged, and armed rules fail the next calls."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flexjobs_local.simulator.clock import rfc3339
from flexjobs_local.simulator.common import STATUS_CODES, SimError

MAX_CALL_LOG = 10000

_DEFAULT_FAULT_MESSAGES = {
    "UNAVAILABLE": "The service is currently unavailable.",
    "RESOURCE_EXHAUSTED": (
        "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit "
        "'Resource management (CRUD) requests per minute per region' of service "
        "'aiplatform.googleapis.com'."
    ),
    "DEADLINE_EXCEEDED": "Deadline Exceeded",
    "INTERNAL": "Internal error encountered.",
}


@dataclass
class FaultRule:
    """The next ``remaining`` calls of ``methods`` (all if empty) fail with ``code``, or with
    code ``OK`` and a ``delay_seconds``, are only slow."""

    code: str
    remaining: int
    methods: frozenset[str]
    message: str
    # "before": the call has no effect; "after": it takes effect first; "late": the caller is
    # answered at once, and the call takes effect ``late_seconds`` (wall time) afterwards, like
    # a create still in flight inside Vertex when its caller's deadline passed.
    when: str = "before"
    late_seconds: float = 0.0
    # The caller is answered this long (wall time) after the call arrives: a slow Vertex.
    # With when=before the call takes effect after the wait, even if its caller gave up
    # meanwhile (a create still in flight when its deadline passed); with when=after it takes
    # effect at once, is logged, and the answer waits (a crash then loses the answer).
    delay_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "remaining": self.remaining,
            "methods": sorted(self.methods),
            "message": self.message,
            "when": self.when,
            "lateSeconds": self.late_seconds,
            "delaySeconds": self.delay_seconds,
        }


def fault_rule(
    code: str,
    count: int,
    methods: Iterable[str] | None,
    *,
    when: str,
    message: str | None,
    late_seconds: float,
    delay_seconds: float = 0.0,
) -> FaultRule:
    """A checked rule (see :meth:`Engine.inject_faults`).

    Raises:
        SimError: INVALID_ARGUMENT for an unknown code or ``when``, a count or delay out of
            range, or code ``OK`` without a delay (or with ``late``: nothing would fail).
    """
    if code not in STATUS_CODES:
        raise SimError("INVALID_ARGUMENT", f"Unknown gRPC status code {code!r}.")
    if delay_seconds < 0:
        raise SimError("INVALID_ARGUMENT", "delaySeconds must not be negative.")
    if code == "OK" and (delay_seconds <= 0 or when == "late"):
        raise SimError(
            "INVALID_ARGUMENT", "code OK is a slow call: it needs delaySeconds, and no 'late'."
        )
    if count < 1:
        raise SimError("INVALID_ARGUMENT", "count must be at least 1.")
    if when not in ("before", "after", "late"):
        raise SimError("INVALID_ARGUMENT", "when must be 'before', 'after' or 'late'.")
    if late_seconds < 0:
        raise SimError("INVALID_ARGUMENT", "lateSeconds must not be negative.")
    return FaultRule(
        code=code,
        remaining=int(count),
        methods=frozenset(methods or ()),
        message=message or _DEFAULT_FAULT_MESSAGES.get(code, f"Injected fault ({code})."),
        when=when,
        late_seconds=float(late_seconds),
        delay_seconds=float(delay_seconds),
    )


class Faults:
    """Armed fault rules, first match wins. Not thread-safe: the engine holds its lock."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []

    def arm(self, rule: FaultRule) -> None:
        self._rules.append(rule)

    def clear(self) -> None:
        self._rules.clear()

    def to_json(self) -> dict[str, Any]:
        """``{"faults": [rule, ...]}`` still armed."""
        return {"faults": [rule.to_json() for rule in self._rules]}

    def take(self, method: str) -> FaultRule | None:
        """Consume one shot of the first armed rule that matches ``method``, if any."""
        for rule in self._rules:
            if not rule.methods or method in rule.methods:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                return rule
        return None


class CallLog:
    """The newest :data:`MAX_CALL_LOG` RPCs with the status each got. Not thread-safe."""

    def __init__(self, sim_now: Callable[[], float]) -> None:
        self._sim_now = sim_now
        self._calls: deque[dict[str, Any]] = deque(maxlen=MAX_CALL_LOG)

    def record(
        self, method: str, request: dict[str, Any], code: str, message: str, took_effect: bool
    ) -> None:
        self._calls.append(
            {
                "method": method,
                "time": datetime.now(UTC).isoformat(),
                "simTime": rfc3339(self._sim_now()),
                "request": request,
                "code": code,
                "message": message,
                # A lost reply (a fault ``after`` the call) took effect though its code says
                # it failed: a check of what reached Vertex reads this, not the code.
                "tookEffect": took_effect,
            }
        )

    def entries(self, method: str | None) -> list[dict[str, Any]]:
        """Copies of the entries, oldest first, optionally of one method only."""
        return [dict(c) for c in self._calls if method is None or c["method"] == method]

    def clear(self) -> int:
        """Drop every entry; returns how many there were."""
        count = len(self._calls)
        self._calls.clear()
        return count
