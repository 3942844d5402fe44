"""Deadline-aware capacity (``scheduling.strategy = AUTO``): what each attempt runs on (pure).

A request says by when it must be done (:mod:`shared.domain.request.deadlines`); :func:`decide`
chooses, for every attempt, the cheapest capacity that still lets an on-demand attempt meet the
deadline if the cheap one fails:

- **SPOT**: cheapest, preemptible at any moment; a preemption loses the work since the last
  complete checkpoint and costs a restart.
- **FLEX_START** (DWS): discounted; waits for capacity up to ``maxWaitDuration``, then runs
  without preemption (up to 7 days).
- **STANDARD** (on-demand): dearest; starts at once.

The rule is Uniform Progress from "Can't Be Late: Optimizing Spot Instance Savings under
Deadlines" (Wu et al., NSDI 2024), stated for attempts rather than instances:

1. *Safety net.* The slack is the time left after an on-demand attempt started now would
   finish: ``deadline - now - remaining work - restart overhead``. When it is below
   :data:`SAFETY_MARGIN_SECONDS`, the job runs on-demand to the end. Spot is taken only while
   the slack also covers a preemption at the worst moment: a restart, the work since the last
   checkpoint, and the longest the retry may then wait before the next decision (its
   backoff's whole window, :attr:`Situation.retry_delay_seconds`), so that a preemption
   always leaves time for on-demand, whatever the retry schedule. A FLEX_START wait leaves
   the same delay after it.
2. *Uniform progress.* Expected progress grows evenly from the request to the deadline. While
   the job is ahead of that line, it takes the cheapest safe capacity; a queued Spot attempt
   waits for capacity only until the job would fall behind the line (at least
   :data:`SPOT_PROBE_SECONDS`), and a queued FLEX_START attempt is looked at again after
   :data:`FLEX_REVISIT_SECONDS` (the lifecycle cancels it at ``wait_until`` and asks again).
3. *Catching up.* Behind the line, the paper runs on-demand until the job is ahead again. AUTO
   adds FLEX_START as the middle option: after a short look for Spot (when Spot is the
   cheaper), it catches up on FLEX_START when that fits, and on on-demand otherwise. Capacity
   the last attempt waited for in vain is looked for elsewhere first.
4. *Hysteresis.* An on-demand attempt is left (at one of its own checkpoints, so little is lost)
   only once the job is ahead of the line by what a failed cheap attempt can cost: two
   restarts and the work at risk. Once the slack is too small for any cheaper capacity, the
   job never leaves on-demand again (:attr:`CapacityDecision.final`).
5. *Exploitation.* A running Spot or FLEX_START attempt is never left voluntarily.
6. *A bound.* After :data:`MAX_SWITCHES` attempts ended by choice, the job switches no more:
   those switches charge no retry budget, so nothing else would bound them. It is not sent to
   on-demand while its slack still holds one long FLEX_START wait, its whole
   ``maxWaitDuration`` with no early revisit (Vertex ends it, charging the capacity budget,
   which bounds these in turn); once none fits, it runs on-demand to the end. So a drought
   that uses the bound up early costs one wait at a time, not the rest of the job at full
   price.

A FLEX_START attempt's ``maxWaitDuration`` is the largest wait that still leaves time for an
on-demand attempt to finish after it: the slack less the safety margin, within
[:data:`MIN_FLEX_WAIT_SECONDS`, :data:`MAX_FLEX_WAIT_SECONDS`] and never ``0s`` (which would
mean wait forever).

Prices come from ``shared/domain/policy/prices.yaml``
(:class:`~shared.domain.policy.pricing.PriceTable`); Spot's price is divided by the share of
Spot running time that this job's own history (a preemption loses a restart and unsaved work)
says becomes saved progress, with a prior of
:data:`PRIOR_SPOT_LIFETIMES` lifetimes of :data:`PRIOR_SPOT_LIFETIME_SECONDS`. So repeated
early preemptions make Spot dear and move the job to FLEX_START or on-demand.

The same :func:`decide` runs in the lifecycle (attempt 1, every retry, a queued attempt past
its ``wait_until``, the checkpoints of an on-demand attempt) and in the trace-replay benchmark
(the ``benchmarks/capacity`` package, ``./dev bench capacity``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from shared.domain.capacity.model import (
    FLEX_START,
    MAX_FLEX_WAIT_SECONDS,
    MAX_SWITCHES,
    PRIOR_SPOT_LIFETIMES,
    SPOT,
    STANDARD,
    AttemptOutcome,
    CapacityDecision,
    Situation,
    Tuning,
)
from shared.domain.model.strategies import MAX_DWS_TIMEOUT_SECONDS, Strategy

#: What an AUTO attempt runs on when its record's deadline fields cannot be read any more
#: (hand-edited): on-demand to the end, final, so nothing gives it up or leaves it.
FALLBACK_DECISION: Final = CapacityDecision(
    strategy=Strategy.STANDARD,
    reason="the deadline fields cannot be read: on-demand to the end",
    final=True,
)


@dataclass(frozen=True)
class _Figures:
    """The arithmetic every rule shares, computed once per decision."""

    left: float  # seconds to the deadline
    remaining: float
    overhead: float
    at_risk: float  # work a preemption can lose
    slack: float  # left after an on-demand attempt started now
    done: float
    pace: float  # uniform progress: work per second of the request's span
    elapsed: float
    spot_share: float  # share of Spot running time that becomes saved progress
    delay: float = 0.0  # the longest a retry after a failure may wait (Situation)
    tuning: Tuning = Tuning()
    units: dict[str, float] = field(default_factory=dict)  # cost per second of progress

    def expected(self, elapsed: float) -> float:
        """Uniform progress: the work due ``elapsed`` seconds after the request."""
        return self.pace * elapsed

    @property
    def behind(self) -> float:
        """Seconds of work the job is behind the uniform-progress line (negative: ahead)."""
        return self.expected(self.elapsed) - self.done

    @property
    def hysteresis(self) -> float:
        """What a cheap attempt that fails at once costs in time: its restart, the work at
        risk, the retry's wait, and the restart back on on-demand."""
        return 2 * self.overhead + self.at_risk + self.delay


def decide(s: Situation) -> CapacityDecision:
    """The capacity of the next attempt (or whether to keep the running one); see the module.

    Deterministic: the same situation always gives the same decision.

    Examples:
        >>> from datetime import UTC
        >>> from shared.domain.capacity.model import Prices
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> plenty = Situation(now=now, deadline=now + timedelta(hours=48), origin=now,
        ...     work_seconds=86400, remaining_seconds=86400, restart_overhead_seconds=300,
        ...     checkpoint_interval_seconds=1800, prices=Prices(4.22, 1.60, 2.20))
        >>> decide(plenty).strategy
        <Strategy.SPOT: 'SPOT'>
        >>> tight = Situation(now=now, deadline=now + timedelta(hours=24, minutes=10),
        ...     origin=now, work_seconds=86400, remaining_seconds=86400,
        ...     restart_overhead_seconds=300, checkpoint_interval_seconds=1800,
        ...     prices=Prices(4.22, 1.60, 2.20))
        >>> decision = decide(tight)
        >>> decision.strategy, decision.final
        (<Strategy.STANDARD: 'STANDARD'>, True)
    """
    f = _figures(s)
    if s.running in (SPOT, FLEX_START):
        why = f"{s.running} already holds capacity at a discount: kept"
        return _decision(s, f, s.running, why, keep=True)
    if f.slack < f.tuning.safety_margin_seconds:
        why = (
            "the deadline can no longer be met; on-demand finishes soonest"
            if f.slack < 0
            else f"slack {_h(f.slack)} is within the safety margin: on-demand to the end"
        )
        return _decision(s, f, STANDARD, why, final=True, keep=s.running == STANDARD)
    if s.switches_left == 0:
        return _at_bound(s, f)
    options = _cheap_options(s, f)
    if not options:
        final = not _spot_fits(f) and _flex_wait(f) < f.tuning.min_flex_wait_seconds
        why = (
            f"slack {_h(f.slack)} covers neither a Spot preemption "
            f"({_h(f.hysteresis - f.overhead)}) nor a FLEX_START wait: on-demand to the end"
            if final
            else "neither Spot nor FLEX_START is cheaper here (prices, preemption history or "
            "retry budgets): on-demand"
        )
        return _decision(s, f, STANDARD, why, final=final, keep=s.running == STANDARD)
    if s.running == STANDARD:
        return _leave(s, f, options)
    options = _rotate(s, options)
    if f.behind <= f.tuning.on_line_seconds:
        return _cheap(s, f, options[0], _ahead(f))
    return _catch_up(s, f, options)


def cost_per_progress(s: Situation, strategy: str) -> float:
    """What an hour of progress costs on ``strategy`` in situation ``s``, in the units of its
    prices (per GPU-hour): the price itself, and Spot's divided by the share of its running
    time that this job's history says becomes saved progress (inf when none does). The
    figure :func:`decide` orders the cheap options by.

    Examples:
        >>> from shared.domain.capacity.model import Prices
        >>> now = datetime(2026, 12, 1)
        >>> s = Situation(now=now, deadline=now + timedelta(hours=48), origin=now,
        ...     work_seconds=86400, remaining_seconds=86400, restart_overhead_seconds=300,
        ...     checkpoint_interval_seconds=1800, prices=Prices(4.22, 1.60, 2.20))
        >>> round(cost_per_progress(s, "SPOT"), 2), cost_per_progress(s, "STANDARD")
        (1.92, 4.22)
    """
    return _figures(s).units[strategy]


def _ahead(f: _Figures) -> str:
    if abs(f.behind) <= f.tuning.on_line_seconds:
        return "on the uniform-progress line"
    return f"ahead of uniform progress by {_h(-f.behind)}"


def _figures(s: Situation) -> _Figures:
    remaining = max(0.0, s.remaining_seconds)
    interval = s.checkpoint_interval_seconds
    at_risk = remaining if interval is None else min(interval, remaining)
    left = (s.deadline - s.now).total_seconds()
    span = max(1.0, (s.deadline - s.origin).total_seconds())
    overhead = max(0.0, s.restart_overhead_seconds)
    share = _spot_share(s.history, overhead, at_risk, s.tuning.prior_spot_lifetime_seconds)
    p = s.prices
    units: dict[str, float] = {
        STANDARD: p.standard,
        FLEX_START: p.flex_start,
        SPOT: p.spot / share if share > 0 else math.inf,
    }
    return _Figures(
        left=left,
        remaining=remaining,
        overhead=overhead,
        at_risk=at_risk,
        slack=left - remaining - overhead,
        done=max(0.0, s.work_seconds - remaining),
        pace=s.work_seconds / span,
        elapsed=(s.now - s.origin).total_seconds(),
        spot_share=share,
        delay=max(0.0, s.retry_delay_seconds),
        tuning=s.tuning,
        units=units,
    )


def _spot_share(
    history: Sequence[AttemptOutcome], overhead: float, at_risk: float, lifetime: float
) -> float:
    """The share of Spot running time that became saved progress, from this job's Spot
    attempts and the prior (:data:`PRIOR_SPOT_LIFETIMES` lifetimes of ``lifetime``, each
    losing its restart and, on average, half the work at risk)."""
    ran = PRIOR_SPOT_LIFETIMES * lifetime
    saved = PRIOR_SPOT_LIFETIMES * max(0.0, lifetime - overhead - at_risk / 2)
    for attempt in history:
        if attempt.strategy == SPOT and attempt.running_seconds > 0:
            ran += attempt.running_seconds
            saved += max(0.0, attempt.running_seconds - attempt.lost_seconds - overhead)
    return saved / ran


def _spot_fits(f: _Figures) -> bool:
    """A Spot attempt may look for capacity for a probe's length, then be preempted at the
    worst moment (its restart and the work at risk lost, and the retry's longest wait), and
    still leave an on-demand attempt time to finish."""
    t = f.tuning
    return f.slack >= _spot_unsafe_at(f) + t.spot_probe_seconds


def _spot_unsafe_at(f: _Figures) -> float:
    """The slack below which a preemption at the worst moment would leave an on-demand
    attempt no time to finish."""
    return f.overhead + f.at_risk + f.delay + f.tuning.safety_margin_seconds


def _flex_wait(f: _Figures) -> int:
    """The longest FLEX_START wait after which (and after the retry's longest wait, should it
    expire) an on-demand attempt still finishes."""
    usable = f.slack - f.tuning.safety_margin_seconds - f.delay
    return int(min(usable, MAX_FLEX_WAIT_SECONDS))


def _at_bound(s: Situation, f: _Figures) -> CapacityDecision:
    """No switch left (:data:`MAX_SWITCHES`): one long FLEX_START wait while the slack holds
    it and it is cheaper, else on-demand to the end. A running attempt is kept (leaving it
    would be a switch)."""
    bound = f"{MAX_SWITCHES} attempts ended by choice already"
    if s.running is not None:
        why = f"{bound}: {s.running} kept to the end"
        return _decision(s, f, s.running, why, final=s.running == STANDARD, keep=True)
    if _flex_fits(s, f) and f.units[FLEX_START] < f.units[STANDARD]:
        wait = _flex_wait(f)
        why = (
            f"{bound}; the slack still holds a long wait: FLEX_START ({_price(f, FLEX_START)}), "
            f"waiting at most {_h(wait)}, no early revisit"
        )
        # No wait_until: nothing gives this wait up early (that would be a switch); Vertex
        # ends it at maxWaitDuration, and the next decision sees what slack is left.
        return _decision(s, f, FLEX_START, why, max_wait_seconds=wait)
    why = f"{bound}, and the slack holds no long FLEX_START wait: on-demand to the end"
    return _decision(s, f, STANDARD, why, final=True)


def _flex_fits(s: Situation, f: _Figures) -> bool:
    """A FLEX_START attempt may wait long enough to be worth it, run to the end within DWS's
    7 days, and expire with a capacity retry still left."""
    flex_runs = f.remaining + f.overhead <= MAX_DWS_TIMEOUT_SECONDS
    enough = _flex_wait(f) >= f.tuning.min_flex_wait_seconds
    return enough and flex_runs and s.capacity_failures_left != 0


def _cheap_options(s: Situation, f: _Figures) -> list[str]:
    """Spot and FLEX_START where safe, allowed by the budgets and cheaper than on-demand,
    cheapest first (by cost per second of progress)."""
    options = []
    if _spot_fits(f) and s.preemptions_left != 0:
        options.append(SPOT)
    if _flex_fits(s, f):
        options.append(FLEX_START)
    cheaper = [o for o in options if f.units[o] < f.units[STANDARD]]
    return sorted(cheaper, key=lambda o: (f.units[o], o))


def _leave(s: Situation, f: _Figures, options: list[str]) -> CapacityDecision:
    """Asked at a checkpoint of a running on-demand attempt (hysteresis): leave it for the
    cheapest option only once ahead of the line by what a failed cheap attempt can cost."""
    lead = f.done - f.expected(f.elapsed + f.hysteresis)
    if lead < 0:
        why = f"catching up on on-demand: {_h(-lead)} short of a safe lead over uniform progress"
        return _decision(s, f, STANDARD, why, keep=True)
    return _cheap(s, f, options[0], _ahead(f))


def _rotate(s: Situation, options: list[str]) -> list[str]:
    """Cheapest first; but when the last attempt waited in vain for one kind of capacity,
    the other cheap kind first (capacity missing a moment ago is rarely there now)."""
    last = s.history[-1] if s.history else None
    unfound = last is not None and last.running_seconds == 0
    if unfound and len(options) > 1 and last is not None and options[0] == last.strategy:
        return [*options[1:], options[0]]
    return options


def _catch_up(s: Situation, f: _Figures, options: list[str]) -> CapacityDecision:
    """Behind the uniform-progress line. The paper runs on-demand until ahead again; AUTO
    catches up on FLEX_START when it fits (discounted, and unpreemptible once it runs), after
    a short look for Spot when Spot comes first (and was not just found missing)."""
    behind = f"behind uniform progress by {_h(f.behind)}"
    last = s.history[-1] if s.history else None
    probed = last is not None and last.strategy == SPOT and last.running_seconds == 0
    if options[0] == SPOT and not probed:
        return _cheap(s, f, SPOT, f"{behind}; a short look for Spot capacity", probe=True)
    if FLEX_START in options:
        return _cheap(s, f, FLEX_START, f"{behind}; catching up")
    return _decision(s, f, STANDARD, f"{behind}: on-demand until ahead again")


def _cheap(
    s: Situation, f: _Figures, strategy: str, why: str, *, probe: bool = False
) -> CapacityDecision:
    price = _price(f, strategy)
    if strategy == FLEX_START:
        wait = _flex_wait(f)
        return _decision(
            s,
            f,
            FLEX_START,
            f"{why}: FLEX_START ({price}), waiting at most {_h(wait)}",
            max_wait_seconds=wait,
            wait_until=s.now + timedelta(seconds=min(wait, f.tuning.flex_revisit_seconds)),
        )
    # A queued Spot attempt waits until the job would fall behind the line (the paper's idle
    # state), at least a probe's length, and never past the point where Spot becomes unsafe.
    unsafe_in = f.slack - _spot_unsafe_at(f)
    ahead_for = max(0.0, -f.behind) / max(f.pace, 1e-9)
    probing = f.tuning.spot_probe_seconds
    line_in = probing if probe else max(probing, ahead_for)
    queued = min(unsafe_in, line_in)  # at least a probe's length: _spot_fits
    return _decision(
        s,
        f,
        SPOT,
        f"{why}: Spot ({price}), queued at most {_h(queued)}",
        wait_until=s.now + timedelta(seconds=round(queued)),
    )


def _price(f: _Figures, strategy: str) -> str:
    unit = f.units[strategy]
    if strategy == SPOT:
        return f"{unit:.2f}/h of progress at {f.spot_share:.0%} kept"
    return f"{unit:.2f}/h"


def _decision(
    s: Situation,
    f: _Figures,
    strategy: str,
    reason: str,
    *,
    max_wait_seconds: int | None = None,
    wait_until: datetime | None = None,
    final: bool = False,
    keep: bool = False,
) -> CapacityDecision:
    return CapacityDecision(
        strategy=strategy,
        reason=reason,
        max_wait_seconds=max_wait_seconds,
        wait_until=wait_until,
        final=final,
        keep=keep,
        slack_seconds=f.slack,
        remaining_seconds=f.remaining,
    )


def _h(seconds: float) -> str:
    """A duration for reasons: ``40s``, ``45m``, ``3.2h``."""
    if abs(seconds) < 90:
        return f"{seconds:.0f}s"
    if abs(seconds) < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
