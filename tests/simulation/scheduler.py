"""The deterministic scheduler: every delivery of the real handlers runs as a greenlet, and
every call it makes through a port is a scheduling point.

A delivery (a request message, a tick, a hint, an upload) runs until its next port call, then
hands the call to the scheduler and stops there. The scheduler, on the main greenlet, picks
what happens next (one of the deliveries in flight takes its call, with the outcome chosen for
it, or the world changes) and switches to the delivery it picked, which makes its call and
runs on to its next one. Only one greenlet ever runs at a time, and nothing reads the wall
clock or a thread's timing: the choices alone decide the run, so a seed (or a trace of the
choices) replays it exactly.

A crash is a :class:`Crash` thrown into a delivery at a scheduling point: a ``BaseException``,
so no handler's ``except Exception`` catches it and nothing after it runs, as when the process
dies between two port calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from greenlet import getcurrent, greenlet

#: What a call's outcome is when nothing goes wrong.
OK = "ok"
#: The process dies at this scheduling point; the message is redelivered later.
CRASH = "crash"
#: The process dies at this scheduling point, and its message is never delivered again (its
#: delivery attempts ran out, or it was a tick: the next one comes anyway).
CRASH_LOST = "crash-lost"
CRASHES = (CRASH, CRASH_LOST)


class Crash(BaseException):
    """The process running a delivery died at a scheduling point."""


@dataclass(frozen=True)
class Call:
    """A port call a delivery is about to make: the port, the method, what it is about (a
    request id, a job name), and the faults the world may answer it with."""

    port: str
    method: str
    about: str = ""
    faults: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        about = f"({self.about})" if self.about else ""
        return f"{self.port}.{self.method}{about}"


@dataclass
class Delivery:
    """One delivery of a message (or one tick) to its handler, as one greenlet."""

    key: int
    name: str
    controller: str
    run: Callable[[], Any]
    #: When it was delivered, and how many times its message was delivered before.
    attempt: int = 1
    #: The message, kept so a redelivery can deliver it again.
    message: Any = None
    pending: Call | None = None
    started: bool = False
    finished: bool = False
    crashed: bool = False
    #: The handler's result, or what it raised (None while it runs).
    result: Any = None
    error: BaseException | None = None
    #: Inside a port call: calls it makes meanwhile (a clock read inside a transaction)
    #: are part of that call, not scheduling points of their own.
    in_call: bool = False
    #: A delivery that slept waits until the clock reaches this time.
    wake_at: datetime | None = None
    steps: int = 0
    #: A crash lost it (its message is never delivered again); a fault or a crash was
    #: injected into it; another delivery ran while it was in flight.
    lost: bool = False
    faulted: bool = False
    overlapped: bool = False
    glet: Any = field(default=None, repr=False)

    @property
    def in_flight(self) -> bool:
        return self.started and not self.finished


_DONE = object()


class Scheduler:
    """Runs deliveries one step at a time, on the main greenlet's say-so."""

    def __init__(self) -> None:
        self.main = getcurrent()
        self.current: Delivery | None = None
        #: Deliveries started and not yet ended, by key (finished ones are let go).
        self.running: dict[int, Delivery] = {}
        self.delivered = 0
        #: Scheduling points executed: each a delivery run to its next port call or its end.
        self.points = 0
        self._keys = 0

    def spawn(
        self,
        name: str,
        controller: str,
        run: Callable[[], Any],
        *,
        attempt: int = 1,
        message: Any = None,
    ) -> Delivery:
        """A new delivery of ``run``; it starts at its first :meth:`step`."""
        self._keys += 1
        delivery = Delivery(self._keys, name, controller, run, attempt=attempt, message=message)
        delivery.glet = greenlet(lambda: self._body(delivery), parent=self.main)
        self.delivered += 1
        return delivery

    def _body(self, delivery: Delivery) -> object:
        try:
            delivery.result = delivery.run()
        except BaseException as exc:  # noqa: BLE001 - a crash (BaseException) ends the delivery too
            delivery.error = exc
        return _DONE

    def in_flight(self) -> list[Delivery]:
        """The deliveries started and not ended, oldest first."""
        return list(self.running.values())

    def step(self, delivery: Delivery, outcome: str = OK) -> None:
        """Let ``delivery`` make its pending call with ``outcome`` (or start it), and run it
        to its next port call or its end."""
        assert not delivery.finished, delivery.name
        self.points += 1
        self.current = delivery
        try:
            if not delivery.started:
                delivery.started = True
                self.running[delivery.key] = delivery
                got = delivery.glet.switch()
            elif outcome in CRASHES:
                delivery.crashed = True
                got = delivery.glet.throw(Crash(delivery.pending.label if delivery.pending else ""))
            else:
                got = delivery.glet.switch(outcome)
        finally:
            self.current = None
        delivery.steps += 1
        if got is _DONE:
            delivery.finished = True
            delivery.pending = None
            self.running.pop(delivery.key, None)
        else:
            assert isinstance(got, Call), got
            delivery.pending = got

    def point(self, call: Call) -> str:
        """A scheduling point, from inside a delivery: stop here until the scheduler picks
        this delivery again; returns the outcome it picked for ``call``."""
        delivery = self.current
        assert delivery is not None and getcurrent() is delivery.glet
        outcome = self.main.switch(call)
        self.current = delivery
        return str(outcome)

    def delivering(self) -> Delivery | None:
        """The delivery running now, or None on the main greenlet (the world, the checks)."""
        return self.current if getcurrent() is not self.main else None

    def abandon(self) -> None:
        """End every delivery still in flight (the run is over): each dies where it stands,
        so that no greenlet is left for the collector to resume."""
        for delivery in list(self.running.values()):
            delivery.crashed = True
            self.current = delivery
            try:
                delivery.glet.throw(Crash("run over"))
            except Crash:
                pass
            finally:
                self.current = None
            delivery.finished = True
        self.running.clear()
