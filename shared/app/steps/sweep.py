"""Sweeps that isolate their items: one bad record never stops the others.

The scheduler tick walks many records (due retries, the reconcile, outboxes, pending cancels,
deployments). A fault on one of them is logged with its requestId and counted, and the record
waits for the next tick; the tick itself still answers 2xx, so Pub/Sub does not redeliver it
every second while every other record waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shared.kernel.errors import StoreUnavailable
from shared.kernel.logs import get_logger, request_context

log = get_logger("sweep")

T = TypeVar("T")


@dataclass
class Sweep:
    """Counts of one sweep; :meth:`each` runs one item in isolation."""

    name: str
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    queries: int = 0
    queries_failed: int = 0

    def each(self, request_id: str | None, step: str, fn: Callable[..., T], *args: Any) -> T | None:
        """Run ``fn(*args)`` for one record (or, with no requestId, one other item such as a
        location's listing); a fault is logged, counted, and None is returned.

        Examples:
            >>> sweep = Sweep("tick")
            >>> sweep.each("r1", "retry", lambda: 1 / 0) is None, sweep.failed
            (True, 1)
        """
        with request_context(request_id):
            try:
                return fn(*args)
            except Exception as exc:
                # Isolated, not swallowed: logged with the record, counted in the tick's
                # summary, and the record is tried again by the next tick.
                self.failed += 1
                self.failures[step] = self.failures.get(step, 0) + 1
                log.exception(
                    f"{self.name}: {step} failed, left for the next tick: {exc}",
                    extra={"fields": {"step": step, "error": type(exc).__name__}},
                )
                return None

    def query(self, step: str, fn: Callable[..., list[T]], *args: Any) -> list[T]:
        """Run one of the sweep's queries; a failure is counted and gives no items."""
        self.queries += 1
        found = self.each(None, step, fn, *args)
        if found is None:
            self.queries_failed += 1
            return []
        return found

    def raise_if_nothing_ran(self) -> None:
        """Raise when every query failed: the store is down, and redelivery should follow.

        Raises:
            StoreUnavailable: no query of the sweep got an answer.
        """
        if self.queries and self.queries_failed == self.queries:
            raise StoreUnavailable(f"{self.name}: no query of the sweep was answered")
