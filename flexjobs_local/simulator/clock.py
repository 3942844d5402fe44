"""Simulated time: the clock the engine runs on and the ways it is written down."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    """RFC 3339 UTC text for an epoch time, microsecond precision, 'Z' suffix."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def to_datetime(epoch: float) -> datetime:
    """The aware UTC datetime of an epoch time (what proto-plus timestamp fields take)."""
    return datetime.fromtimestamp(epoch, UTC)


def format_duration(seconds: float) -> str:
    """Duration in protobuf JSON form: ``1800s``, ``1.5s``."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


class SimClock:
    """sim_now = t0 + (wall - wall0) * factor; re-anchored on every factor change or jump.

    Not thread-safe on its own: the engine calls it under its lock.
    """

    def __init__(
        self,
        factor: float,
        start: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if factor < 0:
            raise ValueError("time factor must not be negative")
        self._monotonic = monotonic
        self._factor = float(factor)
        self._wall0 = monotonic()
        self._t0 = time.time() if start is None else start

    @property
    def factor(self) -> float:
        """Simulated seconds per wall second (0 freezes the clock)."""
        return self._factor

    def now(self) -> float:
        """Current simulated time, epoch seconds."""
        return self._t0 + (self._monotonic() - self._wall0) * self._factor

    def set_factor(self, factor: float) -> None:
        """Change speed without a jump: the new line starts where the old one is now."""
        if factor < 0:
            raise ValueError("time factor must not be negative")
        self._t0 = self.now()
        self._wall0 = self._monotonic()
        self._factor = float(factor)

    def jump(self, seconds: float) -> None:
        """Move simulated time forward by ``seconds`` at once."""
        if seconds < 0:
            raise ValueError("the simulated clock only moves forward")
        self._t0 += seconds
