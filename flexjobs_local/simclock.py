"""The simulator's clock, for the other processes of the embedded stack.

The Vertex AI simulator runs on simulated time, ``time_factor`` times faster than the wall
clock (:mod:`flexjobs_local.simulator.clock`). Everything else that stamps or compares times
(the functions, the publish times the push bridge delivers, the demo's printout) reads that
one clock through :class:`SimulatedClock`, so a record created, a Vertex job's end and the
"now" a page or a printout shows are never on two clocks.

It reads ``GET /clock`` of the simulator's control surface at most every ``refresh`` wall
seconds and runs the reading forward at its time factor in between, so a factor change or a
jump (``POST /advance``) is seen within ``refresh``; the times it returns never go back.

Examples:
    >>> clock = SimulatedClock("http://127.0.0.1:8599")  # doctest: +SKIP
    >>> clock.now()                                       # doctest: +SKIP
    datetime.datetime(2026, 12, 7, 15, 2, 11, 480000, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from flexjobs_local.simulator.client import SimulatorControl

#: The environment variable that gives the function servers the control surface's URL.
CLOCK_URL_ENV = "FLEXJOBS_LOCAL_CLOCK_URL"
#: Wall seconds between two reads of the simulator's clock.
REFRESH_SECONDS = 0.25


class ClockSource(Protocol):
    """What reads the simulator's clock: ``SimulatorControl.clock``'s answer."""

    def clock(self) -> dict[str, Any]: ...


class SimulatedClock:
    """``now()`` on the simulator's clock; ``at()`` maps a wall time onto it; ``sleep()``
    waits simulated seconds. Thread-safe. ``control``, ``monotonic``, ``wall`` and ``sleeper``
    replace the control surface and the process's clocks (tests)."""

    def __init__(
        self,
        control_url: str,
        refresh: float = REFRESH_SECONDS,
        *,
        control: ClockSource | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleeper: Callable[[float], None] = time.sleep,
    ) -> None:
        self._control = control or SimulatorControl(control_url, timeout=10.0)
        self._monotonic = monotonic
        self._wall = wall
        self._sleep = sleeper
        self._refresh = refresh
        self._lock = threading.Lock()
        # (simulated epoch seconds, the wall monotonic time it was read at, time factor)
        self._anchor: tuple[float, float, float] | None = None
        self._last = 0.0

    def _read(self) -> tuple[float, float, float]:
        """The anchor, read again when it is older than ``refresh``; under the lock."""
        if self._anchor is None or self._monotonic() - self._anchor[1] >= self._refresh:
            before = self._monotonic()
            clock = self._control.clock()
            # The simulator read its clock somewhere in the call: its middle.
            at = (before + self._monotonic()) / 2
            self._anchor = (float(clock["simNowEpoch"]), at, float(clock["timeFactor"]))
        return self._anchor

    def epoch(self) -> float:
        """Simulated time now, epoch seconds (never less than a time returned before)."""
        with self._lock:
            sim, at, factor = self._read()
            self._last = max(self._last, sim + (self._monotonic() - at) * factor)
            return self._last

    def now(self) -> datetime:
        """Simulated time now, an aware UTC datetime (what the functions' clock returns)."""
        return datetime.fromtimestamp(self.epoch(), UTC)

    @property
    def factor(self) -> float:
        """Simulated seconds per wall second, as last read."""
        with self._lock:
            return self._read()[2]

    def at(self, wall: datetime) -> datetime:
        """The simulated time of a wall-clock time (a Pub/Sub publish time, say): as far
        before or after simulated now as ``wall`` is from the wall clock now, scaled."""
        with self._lock:
            sim, at, factor = self._read()
            sim_now = sim + (self._monotonic() - at) * factor
        ago = self._wall() - wall.timestamp()
        return datetime.fromtimestamp(sim_now - ago * factor, UTC)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time (a frozen clock: at most ``refresh``, then the
        caller reads the clock again)."""
        if seconds <= 0:
            return
        factor = self.factor
        self._sleep(seconds / factor if factor > 0 else min(seconds, self._refresh))
