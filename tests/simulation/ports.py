"""Every port call a scheduling point: the fakes of flexjobs' ports, wrapped.

:class:`Port` stands in front of one fake (the job store, Vertex, Pub/Sub...). A call from a
delivery first stops at a scheduling point (:meth:`Scheduler.point`); once the scheduler picks
it, it is made with the outcome picked for it: as it is (``ok``), or with a fault the world
answers that call with (:data:`FAULTS`), each raised as the production adapter raises it
(``shared.adapters``: a timeout of a creating call is ``OutcomeUnknown``, RESOURCE_EXHAUSTED is
``QuotaExhausted``...). A call made inside another (a clock read inside a transaction) is part
of that call. A call from the main greenlet (the world moving on, the checks) goes straight to
the fake.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    OutcomeUnknown,
    PublishFailed,
    QuotaExhausted,
    QuotaUnreadable,
    StoreUnavailable,
)
from tests.simulation.scheduler import CRASHES, OK, Call, Crash, Scheduler

#: The call did not happen: the backend was not reached (UNAVAILABLE, a connection reset).
UNAVAILABLE = "unavailable"
#: Vertex refused it for good (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND).
REFUSED = "refused"
#: Vertex refused it for quota (RESOURCE_EXHAUSTED).
QUOTA = "quota"
#: A creating call timed out before Vertex received it: its outcome is unknown to the caller,
#: and nothing happened.
TIMEOUT = "timeout"
#: The call timed out after Vertex did it: the caller cannot tell, and it happened.
TIMEOUT_HAPPENED = "timeout-happened"
#: The quota system could not be read.
UNREADABLE = "unreadable"
#: The write is made by an older revision of the functions (a rollout in progress), which
#: does not stamp the record it writes (``touchedAt``), as a hand edit does not either.
OLD_REVISION = "old-revision"

_CREATES = (REFUSED, QUOTA, TIMEOUT, TIMEOUT_HAPPENED, UNAVAILABLE)
_READS = (UNAVAILABLE,)

#: The faults each port's methods may be answered with (any other method: none).
FAULTS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "store": {
        "create": (UNAVAILABLE, OLD_REVISION),
        "transact": (UNAVAILABLE, OLD_REVISION),
        **{
            method: _READS
            for method in (
                "get",
                "read",
                "get_attempt",
                "update_attempt",
                "find_by_job_id",
                "read_watch",
                "save_watch",
                "due_submissions",
                "with_outbox",
                "with_pending_cancels",
                "with_checkpoint_prefix",
                "transact_series",
                "read_ledger",
                "transact_ledger",
                "waiting_admission",
                "read_line",
                "save_line",
                "line_changed_since",
                "changed_since",
                "count_active",
                "active",
            )
        },
    },
    "deployments": {
        method: _READS
        for method in (
            "get",
            "create",
            "transact",
            "alive",
            "on_endpoint",
            "with_outbox",
            "count_alive",
            "changed_since",
            "read_followed",
            "save_followed",
        )
    },
    "vertex": {
        "create": _CREATES,
        "find": _READS,
        "get": _READS,
        "list_labelled": _READS,
        "cancel": (UNAVAILABLE, TIMEOUT_HAPPENED),
    },
    "endpoints": {
        "deploy": _CREATES,
        "deploy_on_demand": _CREATES,
        "resize": _CREATES,
        "undeploy": _CREATES,
        "set_traffic": (UNAVAILABLE, TIMEOUT_HAPPENED),
        "read": _READS,
        "find": _READS,
        "operation": _READS,
    },
    "pubsub": {"notify": _READS},
    "rejections": {"get": _READS, "record": _READS},
    "quotas": {"limits": (UNREADABLE,)},
    "gcs": {"latest": _READS, "confirm": _READS},
    "objects": {"read": _READS},
}

#: What each port raises for a call that did not happen, as its production adapter does.
_UNREACHED: Mapping[str, type[Exception]] = {
    "store": StoreUnavailable,
    "deployments": StoreUnavailable,
    "vertex": BackendUnavailable,
    "endpoints": BackendUnavailable,
    "pubsub": PublishFailed,
    "rejections": StoreUnavailable,
    "quotas": QuotaUnreadable,
    "gcs": StoreUnavailable,
    "objects": StoreUnavailable,
}

#: The calls whose timeout leaves the outcome unknown (the adapters' ``creates=True``).
CREATING = {
    ("vertex", "create"),
    ("endpoints", "deploy"),
    ("endpoints", "deploy_on_demand"),
    ("endpoints", "resize"),
    ("endpoints", "undeploy"),
}

#: Sees a call that was made: (port, method, args, kwargs, result). The world follows what
#: Vertex was asked, and the checks what flexjobs did, through it.
Observer = Callable[[str, str, tuple[Any, ...], dict[str, Any], Any], None]
#: Answers before a call whether the world itself refuses it (a region that does not answer,
#: a quota used up): an exception to raise, or None.
Gate = Callable[[str, str, tuple[Any, ...], dict[str, Any]], Exception | None]


def _about(args: tuple[Any, ...]) -> str:
    """What a call is about, for its label: its first argument when it is a short name."""
    if not args:
        return ""
    first = args[0]
    if isinstance(first, str):
        return first.rsplit("/", 1)[-1] if "/" in first else first[:40]
    request_id = getattr(first, "request_id", None)
    return str(request_id) if isinstance(request_id, str) else ""


class Port:
    """A fake behind a scheduling point at each call (see the module docstring)."""

    def __init__(
        self,
        name: str,
        target: Any,
        scheduler: Scheduler,
        *,
        observe: Observer | None = None,
        gate: Gate | None = None,
    ) -> None:
        self._name = name
        self._target = target
        self._scheduler = scheduler
        self._observe = observe
        self._gate = gate
        self._faults = FAULTS.get(name, {})

    @property
    def target(self) -> Any:
        return self._target

    def __getattr__(self, method: str) -> Any:
        attribute = getattr(self._target, method)
        if method.startswith("_") or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(method, attribute, args, kwargs)

        return call

    def _call(
        self, method: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        delivery = self._scheduler.delivering()
        if delivery is None or delivery.in_call:
            return self._made(method, fn, args, kwargs, OK)
        if delivery.crashed:
            raise Crash("the process is gone")
        call = Call(self._name, method, _about(args), self._faults.get(method, ()))
        outcome = self._scheduler.point(call)
        if outcome in CRASHES:
            raise Crash(call.label)
        delivery.in_call = True
        try:
            return self._made(method, fn, args, kwargs, outcome)
        finally:
            delivery.in_call = False

    def _made(
        self,
        method: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        outcome: str,
    ) -> Any:
        what = f"{self._name}.{method}"
        creating = (self._name, method) in CREATING
        if outcome == OK and self._gate is not None:
            refused = self._gate(self._name, method, args, kwargs)
            if refused is not None:
                raise refused
        if outcome == UNAVAILABLE:
            raise _UNREACHED[self._name](f"simulated: {what} unavailable")
        if outcome == REFUSED:
            raise BackendRejected(f"simulated: Vertex AI refused {what}: 400 INVALID_ARGUMENT")
        if outcome == QUOTA:
            raise QuotaExhausted(f"simulated: {what} refused for quota: 429 RESOURCE_EXHAUSTED")
        if outcome == UNREADABLE:
            raise QuotaUnreadable(f"simulated: {what}: 503 the quota system did not answer")
        if outcome == TIMEOUT:
            raise OutcomeUnknown(f"simulated: {what} timed out before Vertex received it")
        if outcome == OLD_REVISION:
            # The job stores' fakes stamp on the database they share.
            database = self._target.database
            database.stamping = False
            try:
                return fn(*args, **kwargs)
            finally:
                database.stamping = True
        result = fn(*args, **kwargs)
        if self._observe is not None:
            self._observe(self._name, method, args, kwargs, result)
        if outcome == TIMEOUT_HAPPENED:
            error = OutcomeUnknown if creating else BackendUnavailable
            raise error(f"simulated: {what} timed out after Vertex did it")
        return result


class Clock:
    """The simulated clock as a port: each read from a delivery is a scheduling point."""

    def __init__(self, scheduler: Scheduler, now: Callable[[], Any]) -> None:
        self._scheduler = scheduler
        self._now = now

    def __call__(self) -> Any:
        delivery = self._scheduler.delivering()
        if delivery is not None and not delivery.in_call:
            if delivery.crashed:
                raise Crash("the process is gone")
            if self._scheduler.point(Call("clock", "now")) in CRASHES:
                raise Crash("clock.now")
        return self._now()


class Sleep:
    """``sleep`` as a port: the delivery waits, as a scheduling point, until the simulated
    clock has moved on by ``seconds`` (the world moves it; nothing waits in real time)."""

    def __init__(self, scheduler: Scheduler, now: Callable[[], Any]) -> None:
        self._scheduler = scheduler
        self._now = now

    def __call__(self, seconds: float) -> None:
        from datetime import timedelta

        delivery = self._scheduler.delivering()
        if delivery is None:
            return
        if delivery.crashed:
            raise Crash("the process is gone")
        delivery.wake_at = self._now() + timedelta(seconds=max(0.0, seconds))
        try:
            if self._scheduler.point(Call("clock", "sleep", f"{seconds:.0f}s")) in CRASHES:
                raise Crash("clock.sleep")
        finally:
            delivery.wake_at = None
