"""Scheduling: the strategies flexjobs submits, and FLEX_START's defaults and limits.

A training request's ``scheduling`` object (in its CustomJobSpec) names the strategy;
flexjobs fills in the defaults below (:func:`shared.domain.request.message.apply_defaults`), the
validation package checks the limits, and a ``fallback`` rung may name another strategy.

A request may also name :data:`AUTO`, which is flexjobs' own and never reaches Vertex: the
capacity policy (:mod:`shared.domain.capacity.rule`) picks one of :data:`STRATEGIES` for every
attempt, and that choice is what each attempt's body carries.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Strategy(StrEnum):
    """The strategies flexjobs submits (Vertex v1 ``Scheduling.Strategy`` names). A member is
    its name as a string, so it is written to Vertex bodies and records as it always was."""

    FLEX_START = "FLEX_START"
    SPOT = "SPOT"
    STANDARD = "STANDARD"


#: Strategies flexjobs submits. FLEX_START (DWS) is the default.
STRATEGIES: Final = tuple(Strategy)
DEFAULT_STRATEGY: Final = Strategy.FLEX_START
#: Deadline-aware capacity: flexjobs chooses each attempt's strategy (never sent to Vertex).
AUTO: Final = "AUTO"

#: Deprecated Vertex strategies and what to write instead (Scheduling.Strategy in Vertex v1).
DEPRECATED_STRATEGIES: Final = {"ON_DEMAND": "STANDARD", "LOW_COST": "SPOT"}
#: The strategy a Vertex job reports when none was named: Vertex runs it on-demand.
UNSPECIFIED: Final = "STRATEGY_UNSPECIFIED"


def runs_as(name: str) -> str:
    """What a strategy name Vertex reports runs as: unspecified and the deprecated
    ``ON_DEMAND`` run on-demand (STANDARD); any other name is itself (``LOW_COST`` too: it
    names no capacity flexjobs prices or submits).

    Examples:
        >>> runs_as("STRATEGY_UNSPECIFIED"), runs_as("ON_DEMAND"), runs_as("SPOT")
        ('STANDARD', 'STANDARD', 'SPOT')
    """
    return Strategy.STANDARD.value if name in (UNSPECIFIED, "ON_DEMAND") else name


#: How long a FLEX_START job waits for capacity by default (``0s`` would mean indefinitely).
DEFAULT_MAX_WAIT: Final = "86400s"
#: The default ``timeout``: seven days, the most DWS allows.
DEFAULT_TIMEOUT: Final = "604800s"

#: DWS runs a job for at most 7 days (seed 000).
MAX_DWS_TIMEOUT_SECONDS: Final = 7 * 24 * 3600
