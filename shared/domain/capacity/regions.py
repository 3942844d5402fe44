"""AUTO across regions (pure): in which of the regions a request allows its next attempt runs.

Why a region rule at all: capacity is regional. A Spot pool that preempts a job every twenty
minutes in one region, or FLEX_START capacity that never comes, says little about the same
GPU in another region, and prices differ by region too. So :func:`decide_across_regions`
asks :func:`~shared.domain.capacity.rule.decide` once per allowed region, each time with the
job's history *in that region only* (its preemptions, its waits in vain): a region the job
has not tried starts from the rule's prior, the way the job's first attempt does. Everything
else in the situation (the work left, the deadline, the budgets) is the job's and stays.

Why the regions are compared by cost per unit of progress: that is the figure ``decide``
already orders its options by (:func:`~shared.domain.capacity.rule.cost_per_progress`: the
price, Spot's divided by the share of its running that this region's history says is kept).
It is divided once more by the chance, from the region's history, that the capacity decided
on is found at all (:func:`placement_chance`): a wait in vain costs no money, but it spends
slack that the job later pays back on dearer capacity, so capacity a region keeps not having
is dearer than its price says.

Why a move is charged, and why only a clear saving moves: the checkpoint stays the job's
(same URI), so an attempt in another region reads it across regions. That read costs money
(``checkpoint_gb`` x ``egress_usd_per_gb``, spread over the work left and the GPUs that make
progress) and time (the transfer at :data:`CROSS_REGION_SECONDS_PER_GB`, plus a cold
restart, billed at the destination's price). A job no complete checkpoint has saved
anything for reads nothing: it starts from scratch wherever it runs. The job moves only
when the destination, charged all that, is cheaper by :data:`MOVE_HYSTERESIS` of what
staying costs: estimates from a few attempts are noisy, and without a margin two regions of
near-equal cost would trade the job back and forth, paying the read each time.

Why a move can never make a decision unsafe: the destination's decision is taken as if at
``now`` plus the transfer, so ``decide``'s safety net (the slack an on-demand attempt needs
after a failure at the worst moment, the retry backoff's window, the safety margin) is
checked on the slack left *after* the read; the waits it sets (a Spot attempt's queue bound,
a FLEX_START revisit) are put back on the real clock, so they end earlier by the transfer; and
a destination whose slack after the read is below the safety margin is not a candidate. A
FLEX_START ``maxWaitDuration`` computed that way already leaves the transfer out.

Why an attempt away goes back home when the slack is short: the net every decision keeps is
an on-demand attempt that reads nothing, and only one in the checkpoint's own region
(:attr:`Regions.home`) reads nothing. So when staying where the job last ran, away from home,
would leave less than the safety margin once the checkpoint is read there, the next attempt
goes back, however much cheaper staying looks; deciding on-demand away instead pays a read
the net never counted, and misses.

What is left alone: a running attempt is never moved (it is kept or left within its region,
as ``decide`` says; the next attempt boundary may move the job); a pinned request, or one
with a single region, is exactly ``decide``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Final

from shared.domain.capacity.model import (
    AttemptOutcome,
    CapacityDecision,
    Prices,
    Situation,
)
from shared.domain.capacity.rule import cost_per_progress, decide
from shared.kernel.regions import is_region

#: The checkpoint size assumed when the request states none: a few-billion-parameter model
#: with its optimizer state. Erring large makes a move dearer, which errs on staying.
DEFAULT_CHECKPOINT_GB: Final = 50.0
#: USD per GB read from a Cloud Storage bucket in another region within a continent (Google's
#: published inter-region rate in North America and Europe). Deployments override it
#: (``FLEXJOBS_EGRESS_USD_PER_GB``); across continents it is several times higher.
DEFAULT_EGRESS_USD_PER_GB: Final = 0.02
#: Seconds to read one GB across regions: about 125 MB/s, a modest single-stream read.
CROSS_REGION_SECONDS_PER_GB: Final = 8.0
#: A move is taken only when it saves more than this share of what staying costs.
MOVE_HYSTERESIS: Final = 0.10
#: The prior on finding capacity in a region, as this many attempts that found it: one wait
#: in vain makes a region's capacity a third dearer, a run of them makes it much dearer.
PRIOR_PLACEMENTS: Final = 2
#: The USD an hour of on-demand GPU costs when the accelerator has no price row (the rule
#: then uses relative prices, on-demand = 1): what converts the egress charge into them.
REFERENCE_USD_PER_GPU_HOUR: Final = 3.0


@dataclass(frozen=True)
class Regions:
    """The regions an AUTO attempt may run in.

    ``current`` is where the last attempt ran (or the request's location). ``allowed`` is
    the request's location first (:attr:`home`, where the checkpoint's data lives: its URI is
    the job's and never moves), then the ones the request allows. ``pinned``: the request's
    data stays in its region, never moved. ``checkpoint_gb`` is the size the request states
    (0: unknown, :data:`DEFAULT_CHECKPOINT_GB`). ``gpus`` are the GPUs an attempt holds (the
    prices are per GPU-hour, the egress is per job). ``seconds_per_gb`` and ``hysteresis``
    tune the move (:data:`CROSS_REGION_SECONDS_PER_GB`, :data:`MOVE_HYSTERESIS`).

    Examples:
        >>> Regions("us-east1", ("us-east1", "us-central1")).candidates
        ('us-east1', 'us-central1')
        >>> Regions("us-east1", ("us-east1", "us-central1"), pinned=True).candidates
        ('us-east1',)
    """

    current: str
    allowed: tuple[str, ...]
    pinned: bool = False
    checkpoint_gb: float = 0.0
    egress_usd_per_gb: float = DEFAULT_EGRESS_USD_PER_GB
    gpus: int = 1
    seconds_per_gb: float = CROSS_REGION_SECONDS_PER_GB
    hysteresis: float = MOVE_HYSTERESIS

    def __post_init__(self) -> None:
        bad = [r for r in (self.current, *self.allowed) if not is_region(r)]
        if bad:
            raise ValueError(f"not region names: {bad!r}")
        for name in ("checkpoint_gb", "egress_usd_per_gb", "seconds_per_gb", "hysteresis"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, not {self.gpus!r}")

    @property
    def candidates(self) -> tuple[str, ...]:
        """The regions compared: ``current`` first (it wins ties), then the allowed ones."""
        if self.pinned:
            return (self.current,)
        return tuple(dict.fromkeys((self.current, *self.allowed)))

    @property
    def home(self) -> str:
        """Where an attempt that names no location ran: the request's location."""
        return self.allowed[0] if self.allowed else self.current

    @property
    def size_gb(self) -> float:
        return self.checkpoint_gb if self.checkpoint_gb > 0 else DEFAULT_CHECKPOINT_GB

    @property
    def transfer_seconds(self) -> float:
        """How long an attempt in another region spends reading the checkpoint."""
        return self.size_gb * self.seconds_per_gb


@dataclass(frozen=True)
class RegionDecision:
    """Where the next attempt runs, what on (the region's :func:`decide`), and why there."""

    region: str
    decision: CapacityDecision
    reason: str


def placement_chance(history: Sequence[AttemptOutcome], strategy: str) -> float:
    """The chance that an attempt on ``strategy`` finds capacity, from attempts on it that
    ran (found it) and that ended without running (waited in vain), with the prior of
    :data:`PRIOR_PLACEMENTS` found.

    Examples:
        >>> placement_chance((), "SPOT")
        1.0
        >>> placement_chance((AttemptOutcome("SPOT", None), AttemptOutcome("SPOT", "stockout")),
        ...                  "SPOT")
        0.5
    """
    tried = [a for a in history if a.strategy == strategy]
    found = sum(1 for a in tried if a.running_seconds > 0)
    return (PRIOR_PLACEMENTS + found) / (PRIOR_PLACEMENTS + len(tried))


def decide_across_regions(
    s: Situation, regions: Regions, prices_by_region: Mapping[str, Prices] | None = None
) -> RegionDecision:
    """The region and capacity of the next attempt; see the module.

    ``prices_by_region`` are the accelerator's prices per region (a region absent: the
    situation's). Deterministic: the same arguments always give the same decision.

    Examples:
        >>> from datetime import UTC, datetime
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> s = Situation(now=now, deadline=now + timedelta(hours=48), origin=now,
        ...     work_seconds=86400, remaining_seconds=86400, restart_overhead_seconds=300,
        ...     checkpoint_interval_seconds=1800, prices=Prices(4.22, 1.60, 2.20))
        >>> decide_across_regions(s, Regions("us-east1", ("us-east1",))).region
        'us-east1'
        >>> cheaper = {"us-central1": Prices(4.22, 1.00, 2.20)}
        >>> decide_across_regions(s, Regions("us-east1", ("us-east1", "us-central1")),
        ...                       cheaper).region
        'us-central1'
    """
    candidates = regions.candidates
    if len(candidates) == 1:
        why = "pinned to its region" if regions.pinned else "one region allowed"
        return RegionDecision(regions.current, decide(s), f"{regions.current}: {why}")
    here = _moved(s, regions, regions.current, prices_by_region)
    stay = _decide_after_read(here, _read_seconds(s, regions, regions.current))
    if s.running is not None:
        why = f"{regions.current}: a running attempt is kept or left within its region"
        return RegionDecision(regions.current, stay, why)
    home = regions.home
    if regions.current != home and stay.slack_seconds < s.tuning.safety_margin_seconds:
        # The safety net every decision keeps is an attempt that reads nothing: home's.
        back = decide(_view(s, regions, home, prices_by_region))
        why = (
            f"goes back to {home}: staying in {regions.current} would leave "
            f"{stay.slack_seconds:.0f} s of slack after reading the checkpoint there"
        )
        return RegionDecision(home, back, why)
    read_here = _read_gb(s, regions, regions.current)
    stay_cost = _cost(here, stay) + _charge(here, regions, stay.strategy, read_here, False)
    best: tuple[float, str, CapacityDecision, float] | None = None
    for region in candidates[1:]:
        moved = _moved(s, regions, region, prices_by_region)
        decision = _decide_after_read(moved, _read_seconds(s, regions, region))
        if decision.slack_seconds < s.tuning.safety_margin_seconds:
            continue  # the read would leave too little slack: not a candidate
        # Away from the checkpoint's region every attempt reads it (staying away too, in
        # stay_cost); a move also pays a cold restart.
        charge = _charge(moved, regions, decision.strategy, _read_gb(s, regions, region), True)
        total = _cost(moved, decision) + charge
        if best is None or total < best[0]:
            best = (total, region, decision, charge)
    here_text = f"{stay.strategy} at {stay_cost:.2f}/h of progress in {regions.current}"
    if best is None:
        why = f"stays in {regions.current}: no other region leaves enough slack after the move"
        return RegionDecision(regions.current, stay, why)
    total, region, decision, charge = best
    there = f"{decision.strategy} in {region} at {total:.2f}/h with the move ({charge:.2f}/h)"
    if stay_cost - total > regions.hysteresis * stay_cost:
        why = f"moves to {region}: {there}, against {here_text}"
        return RegionDecision(region, decision, why)
    why = f"stays in {regions.current}: {here_text}; {there} saves too little"
    return RegionDecision(regions.current, stay, why)


def decide_in_region(
    s: Situation,
    regions: Regions,
    region: str,
    prices_by_region: Mapping[str, Prices] | None = None,
) -> RegionDecision:
    """The decision in ``region``, already chosen for this attempt (a redelivery of a
    retry whose region was recorded before its create): that region's view, after the
    cross-region read when it is not ``current``. With one candidate, exactly ``decide``.

    Examples:
        >>> from datetime import UTC, datetime
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> s = Situation(now=now, deadline=now + timedelta(hours=48), origin=now,
        ...     work_seconds=86400, remaining_seconds=86400, restart_overhead_seconds=300,
        ...     checkpoint_interval_seconds=1800, prices=Prices(4.22, 1.60, 2.20))
        >>> decide_in_region(s, Regions("us-east1", ("us-east1", "us-west1")), "us-west1").reason
        'us-west1: the region recorded for this attempt'
    """
    why = f"{region}: the region recorded for this attempt"
    if len(regions.candidates) == 1 and region == regions.current:
        return RegionDecision(region, decide(s), why)
    moved = _moved(s, regions, region, prices_by_region)
    return RegionDecision(region, _decide_after_read(moved, _read_seconds(s, regions, region)), why)


def _view(
    s: Situation,
    regions: Regions,
    region: str,
    prices_by_region: Mapping[str, Prices] | None,
) -> Situation:
    """The job as seen in ``region``: its history there only, and the region's prices."""
    history = tuple(a for a in s.history if (a.location or regions.home) == region)
    prices = (prices_by_region or {}).get(region, s.prices)
    return replace(s, history=history, prices=prices)


def _moved(
    s: Situation,
    regions: Regions,
    region: str,
    prices_by_region: Mapping[str, Prices] | None,
) -> Situation:
    """``region``'s view as if the checkpoint had been read there: the transfer's time
    gone from the slack (and from the job's progress against the uniform line)."""
    view = _view(s, regions, region, prices_by_region)
    return replace(view, now=view.now + timedelta(seconds=_read_seconds(s, regions, region)))


def _read_gb(s: Situation, regions: Regions, region: str) -> float:
    """What an attempt in ``region`` reads across regions: the checkpoint, wherever the job
    is not in the checkpoint's own region (:attr:`Regions.home`: its URI never moves, so
    every attempt away reads it, not only the first); nothing while no complete checkpoint
    has saved any work (the attempt starts from scratch wherever it runs)."""
    if region == regions.home or s.remaining_seconds >= s.work_seconds:
        return 0.0
    return regions.size_gb


def _read_seconds(s: Situation, regions: Regions, region: str) -> float:
    return _read_gb(s, regions, region) * regions.seconds_per_gb


def _decide_after_read(moved: Situation, transfer_seconds: float) -> CapacityDecision:
    """``decide`` on the view after the read, its wait bound put back on the real clock:
    earlier by the transfer, so a wait that lasts to it still leaves the transfer's time."""
    decision = decide(moved)
    if decision.wait_until is None:
        return decision
    return replace(decision, wait_until=decision.wait_until - timedelta(seconds=transfer_seconds))


def _cost(view: Situation, decision: CapacityDecision) -> float:
    """An hour of progress on the decided capacity in the region, dearer by the chance of
    not finding it there."""
    unit = cost_per_progress(view, decision.strategy)
    return unit / placement_chance(view.history, decision.strategy)


def _charge(
    moved: Situation, regions: Regions, strategy: str, read_gb: float, restart: bool
) -> float:
    """An attempt's extra costs in the region, spread over the work left, per GPU-hour of
    progress (the prices' units): the cross-region read in money, and its time (with a cold
    restart when it moves) at the region's price."""
    prices = moved.prices
    usd_per_unit = 1.0 if prices.priced else REFERENCE_USD_PER_GPU_HOUR / prices.standard
    egress = read_gb * regions.egress_usd_per_gb / usd_per_unit
    hours_left = max(moved.remaining_seconds, 1.0) / 3600
    cold = moved.restart_overhead_seconds if restart else 0.0
    lost = (read_gb * regions.seconds_per_gb + cold) / 3600
    return egress / (regions.gpus * hours_left) + lost * prices.of_strategy(strategy) / hours_left
