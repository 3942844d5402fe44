"""AUTO's values: the policy's constants and tuning, the situation it is asked about, and
the decision it answers with (see :mod:`shared.domain.capacity.rule` for the rule)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from shared.domain.model.strategies import MAX_DWS_TIMEOUT_SECONDS, Strategy
from shared.domain.policy.pricing import PriceTable
from shared.kernel.regions import is_region

# The strategies' one home is the model; the rule reads them under their short names.
SPOT: Final = Strategy.SPOT
FLEX_START: Final = Strategy.FLEX_START
STANDARD: Final = Strategy.STANDARD

#: Room an on-demand attempt keeps against the deadline: the scheduler tick (60 s), hint
#: delivery, the create call and provisioning jitter, with a wide allowance.
SAFETY_MARGIN_SECONDS: Final = 600.0
#: A FLEX_START wait shorter than this is not worth an attempt: DWS rarely places a job at
#: once, and the wait would only eat slack.
MIN_FLEX_WAIT_SECONDS: Final = 600
#: The longest wait AUTO asks for: DWS's own horizon (it runs a job for at most 7 days).
MAX_FLEX_WAIT_SECONDS: Final = MAX_DWS_TIMEOUT_SECONDS
#: A queued Spot attempt may always look for capacity this long: a queued job costs nothing,
#: and Vertex starts a Spot job within minutes when there is capacity.
SPOT_PROBE_SECONDS: Final = 300.0
#: A queued FLEX_START attempt is revisited after this long (the lifecycle cancels it and
#: asks again), although its maxWaitDuration may be longer: capacity that has not come for
#: an hour may be found elsewhere (Spot) sooner.
FLEX_REVISIT_SECONDS: Final = 3600
#: The prior Spot lifetime: in the Can't Be Late traces a V100 Spot instance lives about 2 h
#: on average (the median is under 1 h).
PRIOR_SPOT_LIFETIME_SECONDS: Final = 7200.0
#: The prior weighs as this many lifetimes of Spot running: one early preemption does not
#: condemn Spot, a run of them does.
PRIOR_SPOT_LIFETIMES: Final = 4
#: At most this many attempts of a job are ended by choice (a wait given up, on-demand left).
#: Switches charge no retry budget, so without a bound a capacity drought could alternate
#: Spot and FLEX_START waits for the whole slack. Past the bound the job makes no more
#: switches, but is not sent to on-demand while its slack still holds one long FLEX_START
#: wait (its whole ``maxWaitDuration``, which Vertex ends itself and charges the capacity
#: budget): only once that no longer fits does it run on-demand to the end.
MAX_SWITCHES: Final = 20
#: Relative prices when the accelerator is not in the price table: the usual order and
#: roughly the usual discounts (Spot about 60%, FLEX_START about 45% off).
NOMINAL: Final = (1.0, 0.4, 0.55)


@dataclass(frozen=True)
class Tuning:
    """The policy's time constants, the module's defaults unless scaled.

    The defaults suit training jobs of hours on a deployment whose tick runs every minute.
    :meth:`scaled` divides every one alike (``FLEXJOBS_AUTO_TIME_SCALE``), so that a job of
    a minute on the embedded stack meets the same rules at its own pace.

    Examples:
        >>> Tuning().scaled(60).safety_margin_seconds
        10.0
    """

    safety_margin_seconds: float = SAFETY_MARGIN_SECONDS
    min_flex_wait_seconds: float = MIN_FLEX_WAIT_SECONDS
    spot_probe_seconds: float = SPOT_PROBE_SECONDS
    flex_revisit_seconds: float = FLEX_REVISIT_SECONDS
    prior_spot_lifetime_seconds: float = PRIOR_SPOT_LIFETIME_SECONDS
    # Work this close to the uniform-progress line counts as on it: a request decided a few
    # seconds after it was published is not behind.
    on_line_seconds: float = 60.0

    def scaled(self, scale: float) -> Tuning:
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"the time scale must be a positive number, not {scale!r}")
        return Tuning(
            safety_margin_seconds=self.safety_margin_seconds / scale,
            min_flex_wait_seconds=self.min_flex_wait_seconds / scale,
            spot_probe_seconds=self.spot_probe_seconds / scale,
            flex_revisit_seconds=self.flex_revisit_seconds / scale,
            prior_spot_lifetime_seconds=self.prior_spot_lifetime_seconds / scale,
            on_line_seconds=self.on_line_seconds / scale,
        )


@dataclass(frozen=True)
class AttemptOutcome:
    """How one earlier attempt of the job went: the history the policy learns from.

    ``failure`` is the attempt's failure class (``preempted``, ``stockout``,
    ``max-wait-expired``...), None when it ended otherwise (a voluntary switch, a Spot
    attempt given up while queued). ``lost_seconds`` is its running time no complete
    checkpoint saved (``workLostSeconds``). ``location`` is the region it ran in (None on an
    attempt recorded before attempts named one: the request's location).
    ``transfer_seconds`` is the time it spent reading its checkpoint from another region
    before it made progress (none saved, like its restart overhead).
    """

    strategy: str
    failure: str | None = None
    running_seconds: float = 0.0
    queued_seconds: float = 0.0
    lost_seconds: float = 0.0
    location: str | None = None
    transfer_seconds: float = 0.0

    @classmethod
    def from_attempt(cls, doc: Mapping[str, Any]) -> AttemptOutcome:
        """Read an ``attempts/{n}`` document (see docs/contract.md, *Firestore*).

        Examples:
            >>> AttemptOutcome.from_attempt({"strategy": "SPOT", "errorClass": "preempted",
            ...                              "runningSeconds": 3600, "workLostSeconds": 600,
            ...                              "location": "us-east1"})
            AttemptOutcome(strategy='SPOT', failure='preempted', running_seconds=3600.0, \
queued_seconds=0.0, lost_seconds=600.0, location='us-east1', transfer_seconds=0.0)
        """
        failure = doc.get("errorClass")
        location = doc.get("location")
        return cls(
            strategy=str(doc.get("strategy") or ""),
            failure=failure if isinstance(failure, str) else None,
            running_seconds=_seconds(doc.get("runningSeconds")),
            queued_seconds=_seconds(doc.get("queuedSeconds")),
            lost_seconds=_seconds(doc.get("workLostSeconds")),
            location=location if is_region(location) else None,
        )


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


@dataclass(frozen=True)
class Prices:
    """USD per GPU-hour of one accelerator, per strategy (or relative prices)."""

    standard: float
    spot: float
    flex_start: float
    priced: bool = True

    @classmethod
    def of(cls, table: PriceTable | None, accelerator: str | None) -> Prices:
        """The accelerator's row of ``table``; :data:`NOMINAL` relative prices when absent."""
        rates = table.rates.get(accelerator.upper()) if table and accelerator else None
        if rates is None:
            return cls(*NOMINAL, priced=False)
        return cls(float(rates.standard), float(rates.spot), float(rates.flex_start))

    def of_strategy(self, strategy: str) -> float:
        """The price of an hour on ``strategy`` (STANDARD, SPOT or FLEX_START).

        Examples:
            >>> Prices(4.22, 1.60, 2.20).of_strategy("FLEX_START")
            2.2
        """
        by_strategy: dict[str, float] = {
            STANDARD: self.standard,
            SPOT: self.spot,
            FLEX_START: self.flex_start,
        }
        return by_strategy[strategy]


@dataclass(frozen=True)
class Situation:
    """Everything :func:`decide` reads: plain values, so the lifecycle and the benchmark build
    it alike (:func:`situation_from_record`, :func:`situation_for_first_attempt`).

    ``origin`` is when the request was made: uniform progress runs from it to the deadline.
    ``remaining_seconds`` is the work the latest complete checkpoint has not saved.
    ``running`` is the strategy of the attempt running now when the policy is asked at one of
    its checkpoints, None at an attempt boundary (attempt 1, a retry). ``retry_delay_seconds``
    is how long a retry after this attempt may wait (the backoff's window). ``preemptions_left``
    and ``capacity_failures_left`` are the retries the request's budgets still allow (None:
    unbounded): a preemption with none left would fail the job, and so would a FLEX_START wait
    that expires with no capacity retry left.
    """

    now: datetime
    deadline: datetime
    origin: datetime
    work_seconds: float
    remaining_seconds: float
    restart_overhead_seconds: float
    checkpoint_interval_seconds: float | None
    prices: Prices
    history: tuple[AttemptOutcome, ...] = ()
    running: str | None = None
    preemptions_left: int | None = None
    capacity_failures_left: int | None = None
    switches_left: int | None = None
    tuning: Tuning = Tuning()
    # The longest the next decision may wait once this attempt fails (preempted, a stockout,
    # a FLEX_START wait expired): the retry backoff's whole window for the next retry of the
    # budget the failure charges. A cheap attempt is taken only while the slack holds it too,
    # so a failure at the worst moment still leaves an on-demand attempt time to finish.
    # Detecting the failure (a hint, else the tick) is inside the safety margin.
    retry_delay_seconds: float = 0.0


@dataclass(frozen=True)
class CapacityDecision:
    """What the next attempt runs on, and why.

    ``max_wait_seconds`` is a FLEX_START attempt's ``maxWaitDuration``. ``wait_until`` is the
    latest time the attempt may still be queued for capacity: Vertex enforces it for
    FLEX_START; for SPOT the lifecycle cancels the queued attempt then and asks again.
    ``final`` means on-demand to the end: the slack no longer allows anything cheaper, so the
    attempt's checkpoints need not be asked about. ``keep`` is true when asked about a running
    attempt and the answer is to keep it.
    """

    strategy: str
    reason: str
    max_wait_seconds: int | None = None
    wait_until: datetime | None = None
    final: bool = False
    keep: bool = False
    slack_seconds: float = 0.0
    remaining_seconds: float = 0.0

    @property
    def max_wait_duration(self) -> str | None:
        """``maxWaitDuration`` as the Vertex body writes it (``"5400s"``), or None."""
        return None if self.max_wait_seconds is None else f"{self.max_wait_seconds}s"

    def to_dict(self) -> dict[str, Any]:
        """The form recorded on the attempt (and the record) with each decision."""
        return {
            "strategy": self.strategy,
            "reason": self.reason,
            "maxWaitSeconds": self.max_wait_seconds,
            "waitUntil": self.wait_until,
            "final": self.final,
            "slackSeconds": round(self.slack_seconds),
            "remainingSeconds": round(self.remaining_seconds),
        }
