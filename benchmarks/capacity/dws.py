"""Three models of when DWS (FLEX_START) places a job that asked for capacity at ``t``.

Nobody publishes DWS placement traces, so the benchmark replays three models and reports
each; a policy is judged by all three, not the kindest:

* :class:`Independent`: the job's availability trace (its own zone, of its scale) covers
  every node: DWS capacity unrelated to Spot's (the model of the benchmark before issue 23).
* :class:`MinimumDelay`: as independent, but never sooner than :data:`MIN_PLACEMENT_SECONDS`
  after the request: DWS queues a request before it places it.
* :class:`Correlated`: the availability trace covers every node *and* the job's Spot trace
  holds capacity then too: DWS is short in the same droughts as Spot (one pool of GPUs).

A placed FLEX_START attempt runs unpreempted to its end (DWS runs a job up to 7 days).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from benchmarks.capacity.traces import Replay

#: DWS places a request no sooner than this after it was made (the minimum-delay model).
MIN_PLACEMENT_SECONDS = 1800.0


class DwsModel(Protocol):
    @property
    def name(self) -> str: ...

    def placed_at(self, spot: Replay, flex: Replay, t: float, limit: float) -> float:
        """When a FLEX_START request made at ``t`` is placed, if by ``limit``; inf if not."""
        ...


def _by(start: float, limit: float) -> float:
    return start if start <= limit else math.inf


@dataclass(frozen=True)
class Independent:
    """DWS capacity from the availability trace alone.

    Examples:
        >>> from benchmarks.capacity.traces import Trace
        >>> flex = Replay(Trace("f", 600.0, (0, 0, 1)), 1, 0)
        >>> Independent().placed_at(flex, flex, 0.0, 3600.0)
        1200.0
    """

    name: str = "independent"

    def placed_at(self, spot: Replay, flex: Replay, t: float, limit: float) -> float:
        return _by(flex.available_at(t), limit)


@dataclass(frozen=True)
class MinimumDelay:
    """DWS capacity from the availability trace, never sooner than ``delay`` after ``t``.

    Examples:
        >>> from benchmarks.capacity.traces import Trace
        >>> always = Replay(Trace("f", 600.0, (1,)), 1, 0)
        >>> MinimumDelay().placed_at(always, always, 100.0, 7200.0)
        1900.0
        >>> MinimumDelay().placed_at(always, always, 100.0, 1800.0)
        inf
    """

    name: str = "30-min placement"
    delay: float = MIN_PLACEMENT_SECONDS

    def placed_at(self, spot: Replay, flex: Replay, t: float, limit: float) -> float:
        return _by(flex.available_at(t + self.delay), limit)


@dataclass(frozen=True)
class Correlated:
    """DWS capacity where the availability trace and the job's Spot trace both hold it.

    Examples:
        >>> from benchmarks.capacity.traces import Trace
        >>> flex = Replay(Trace("f", 600.0, (1, 1, 0, 1, 1, 1)), 1, 0)
        >>> spot = Replay(Trace("s", 600.0, (0, 0, 1, 1, 0, 1)), 1, 0)
        >>> Correlated().placed_at(spot, flex, 0.0, 86400.0)
        1800.0
    """

    name: str = "correlated with Spot"

    def placed_at(self, spot: Replay, flex: Replay, t: float, limit: float) -> float:
        u = t
        while u <= limit:
            a = flex.available_at(u)
            b = spot.available_at(a) if a <= limit else math.inf
            if b == a:
                return a
            # Neither is there at once: look again from the later of the two (time advances
            # by at least one tick of the finer trace each round).
            u = b
        return math.inf


MODELS: tuple[DwsModel, ...] = (Independent(), MinimumDelay(), Correlated())
