"""Sweeps that isolate their items: one bad item never stops the others.

The one routine every walk over many items runs each of them through (:meth:`Sweep.each`):
a fault on one is logged with its requestId (or label) and counted, and the walk goes on.

* The scheduler tick walks many records (due retries, the reconcile, outboxes, pending
  cancels, deployments). A failed record waits for the next tick; the tick itself still
  answers 2xx, so Pub/Sub does not redeliver it every second while every other record waits.
* An upload walks a request file's messages, or the jobs a checkpoint counts for. Every item
  is tried, then one failure is raised (:meth:`Sweep.raise_failure`), so the event is
  redelivered and finds the items that succeeded done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shared.kernel.errors import StoreUnavailable
from shared.kernel.logs import get_logger, request_context

log = get_logger("sweep")

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an item


def failure_to_raise(failures: Sequence[Exception]) -> Exception:
    """Of the failures of a sweep's items, the one to raise: the first that a redelivery may
    fix (so that none of them is acknowledged away), else the first."""
    return next((f for f in failures if getattr(f, "retryable", True)), failures[0])


@dataclass
class Sweep:
    """Counts of one sweep; :meth:`each` runs one item in isolation. ``then`` says what
    becomes of a failed item (in its log line)."""

    name: str
    then: str = "left for the next tick"
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    queries: int = 0
    queries_failed: int = 0
    # The first failure and the first retryable one: all :meth:`raise_failure` may raise, so
    # a sweep over many items holds two exceptions, not one per item.
    _kept: list[Exception] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
                with self._lock:
                    self.failed += 1
                    self.failures[step] = self.failures.get(step, 0) + 1
                    if not self._kept or (
                        getattr(exc, "retryable", True)
                        and len(self._kept) == 1
                        and not getattr(self._kept[0], "retryable", True)
                    ):
                        self._kept.append(exc)
                log.exception(
                    f"{self.name}: {step} failed, {self.then}: {exc}",
                    extra={"fields": {"step": step, "error": type(exc).__name__}},
                )
                return None

    def each_of(
        self,
        step: str,
        fn: Callable[[I], T],
        items: Sequence[I],
        *,
        key: Callable[[I], str | None],
        workers: int = 1,
    ) -> list[T | None]:
        """:meth:`each` over ``items`` (``key``: an item's requestId), ``workers`` at a time;
        the results in order, None for an item that failed."""

        def one(item: I) -> T | None:
            return self.each(key(item), step, fn, item)

        if len(items) <= 1 or workers <= 1:
            return [one(item) for item in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=self.name) as pool:
            return list(pool.map(one, items))

    def raise_failure(self) -> None:
        """Raise a failure of the sweep's items, if any failed (see :func:`failure_to_raise`):
        the event is redelivered, and finds the items that succeeded done.

        Examples:
            >>> sweep = Sweep("upload", then="redelivered")
            >>> sweep.each_of("submit", lambda n: 1 // n, [1, 0], key=str)
            [1, None]
            >>> sweep.raise_failure()
            Traceback (most recent call last):
            ZeroDivisionError: integer division or modulo by zero
        """
        if self._kept:
            raise failure_to_raise(self._kept)

    def query(self, step: str, fn: Callable[..., list[T]], *args: Any) -> list[T]:
        """Run one of the sweep's queries; a failure is counted and gives no items."""
        return self.read(step, fn, [], *args)

    def read(self, step: str, fn: Callable[..., T], default: T, *args: Any) -> T:
        """Run one of the sweep's reads; a failure is counted (as a query that got no
        answer) and gives ``default``."""
        self.queries += 1
        found = self.each(None, step, fn, *args)
        if found is None:
            self.queries_failed += 1
            return default
        return found

    def raise_if_nothing_ran(self) -> None:
        """Raise when every query failed: the store is down, and redelivery should follow.

        Raises:
            StoreUnavailable: no query of the sweep got an answer.
        """
        if self.queries and self.queries_failed == self.queries:
            raise StoreUnavailable(f"{self.name}: no query of the sweep was answered")
