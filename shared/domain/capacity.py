"""Deadline-aware capacity (``scheduling.strategy = AUTO``): what each attempt runs on (pure).

A request says by when it must be done (:mod:`shared.domain.deadlines`); :func:`decide`
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
   the slack also covers a preemption at the worst moment (a restart plus the work since the
   last checkpoint), so that a preemption always leaves time for on-demand.
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
6. *A bound.* After :data:`MAX_SWITCHES` attempts ended by choice, the job runs on-demand to
   the end: those switches charge no retry budget, so nothing else would bound them.

A FLEX_START attempt's ``maxWaitDuration`` is the largest wait that still leaves time for an
on-demand attempt to finish after it: the slack less the safety margin, within
[:data:`MIN_FLEX_WAIT_SECONDS`, :data:`MAX_FLEX_WAIT_SECONDS`] and never ``0s`` (which would
mean wait forever).

Prices come from ``shared/prices.yaml`` (:class:`~shared.domain.pricing.PriceTable`); Spot's
price is divided by the share of Spot running time that this job's own history (a preemption
loses a restart and unsaved work) says becomes saved progress, with a prior of
:data:`PRIOR_SPOT_LIFETIMES` lifetimes of :data:`PRIOR_SPOT_LIFETIME_SECONDS`. So repeated
early preemptions make Spot dear and move the job to FLEX_START or on-demand.

The same :func:`decide` runs in the lifecycle (attempt 1, every retry, a queued attempt past
its ``wait_until``, the checkpoints of an on-demand attempt) and in the trace-replay benchmark
(``benchmarks/capacity.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from shared.domain.deadlines import DeadlineOptions
from shared.domain.jobs import JobState, from_vertex
from shared.domain.pricing import PriceTable
from shared.domain.record import JobRecord
from shared.domain.retry import CAPACITY, PREEMPTION, Budgets
from shared.domain.scheduling import MAX_DWS_TIMEOUT_SECONDS

SPOT: Final = "SPOT"
FLEX_START: Final = "FLEX_START"
STANDARD: Final = "STANDARD"

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
#: At most this many attempts of a job are ended by choice (a wait given up, on-demand left);
#: then it runs on-demand to the end. Switches charge no retry budget, so without a bound a
#: capacity drought could alternate Spot and FLEX_START waits for the whole slack.
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
    checkpoint saved (``workLostSeconds``).
    """

    strategy: str
    failure: str | None = None
    running_seconds: float = 0.0
    queued_seconds: float = 0.0
    lost_seconds: float = 0.0

    @classmethod
    def from_attempt(cls, doc: Mapping[str, Any]) -> AttemptOutcome:
        """Read an ``attempts/{n}`` document (see the README's Firestore section).

        Examples:
            >>> AttemptOutcome.from_attempt({"strategy": "SPOT", "errorClass": "preempted",
            ...                              "runningSeconds": 3600, "workLostSeconds": 600})
            AttemptOutcome(strategy='SPOT', failure='preempted', running_seconds=3600.0, \
queued_seconds=0.0, lost_seconds=600.0)
        """
        failure = doc.get("errorClass")
        return cls(
            strategy=str(doc.get("strategy") or ""),
            failure=failure if isinstance(failure, str) else None,
            running_seconds=_seconds(doc.get("runningSeconds")),
            queued_seconds=_seconds(doc.get("queuedSeconds")),
            lost_seconds=_seconds(doc.get("workLostSeconds")),
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


@dataclass(frozen=True)
class Situation:
    """Everything :func:`decide` reads: plain values, so the lifecycle and the benchmark build
    it alike (:func:`situation_from_record`, :func:`situation_for_first_attempt`).

    ``origin`` is when the request was made: uniform progress runs from it to the deadline.
    ``remaining_seconds`` is the work the latest complete checkpoint has not saved.
    ``running`` is the strategy of the attempt running now when the policy is asked at one of
    its checkpoints, None at an attempt boundary (attempt 1, a retry). ``preemptions_left``
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


#: What an AUTO attempt runs on when its record's deadline fields cannot be read any more
#: (hand-edited): on-demand to the end, final, so nothing gives it up or leaves it.
FALLBACK_DECISION: Final = CapacityDecision(
    strategy="STANDARD",
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
        risk, and the restart back on on-demand."""
        return 2 * self.overhead + self.at_risk


def decide(s: Situation) -> CapacityDecision:
    """The capacity of the next attempt (or whether to keep the running one); see the module.

    Deterministic: the same situation always gives the same decision.

    Examples:
        >>> from datetime import UTC
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> plenty = Situation(now=now, deadline=now + timedelta(hours=48), origin=now,
        ...     work_seconds=86400, remaining_seconds=86400, restart_overhead_seconds=300,
        ...     checkpoint_interval_seconds=1800, prices=Prices(4.22, 1.60, 2.20))
        >>> decide(plenty).strategy
        'SPOT'
        >>> tight = Situation(now=now, deadline=now + timedelta(hours=24, minutes=10),
        ...     origin=now, work_seconds=86400, remaining_seconds=86400,
        ...     restart_overhead_seconds=300, checkpoint_interval_seconds=1800,
        ...     prices=Prices(4.22, 1.60, 2.20))
        >>> decision = decide(tight)
        >>> decision.strategy, decision.final
        ('STANDARD', True)
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
        why = f"{MAX_SWITCHES} attempts ended by choice already: on-demand to the end"
        return _decision(s, f, STANDARD, why, final=True, keep=s.running == STANDARD)
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
    units = {
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
    worst moment (its restart and the work at risk lost), and still leave an on-demand
    attempt time to finish."""
    t = f.tuning
    return f.slack >= f.overhead + f.at_risk + t.safety_margin_seconds + t.spot_probe_seconds


def _flex_wait(f: _Figures) -> int:
    """The longest FLEX_START wait after which an on-demand attempt still finishes."""
    return int(min(f.slack - f.tuning.safety_margin_seconds, MAX_FLEX_WAIT_SECONDS))


def _cheap_options(s: Situation, f: _Figures) -> list[str]:
    """Spot and FLEX_START where safe, allowed by the budgets and cheaper than on-demand,
    cheapest first (by cost per second of progress)."""
    options = []
    if _spot_fits(f) and s.preemptions_left != 0:
        options.append(SPOT)
    flex_runs = f.remaining + f.overhead <= MAX_DWS_TIMEOUT_SECONDS
    enough = _flex_wait(f) >= f.tuning.min_flex_wait_seconds
    if enough and flex_runs and s.capacity_failures_left != 0:
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
    unsafe_in = f.slack - (f.overhead + f.at_risk + f.tuning.safety_margin_seconds)
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


# --- the lifecycle's questions -----------------------------------------------------------------


def waited_in_vain(
    record: JobRecord, job_name: str, vertex_state: str, now: datetime
) -> str | None:
    """Why to give up the AUTO record's current attempt, still queued for capacity past its
    decision's ``waitUntil`` (the reason recorded with the switch); None to let it wait.

    Vertex ends a FLEX_START wait itself at ``maxWaitDuration``; ``waitUntil`` is the
    policy's earlier look (:data:`FLEX_REVISIT_SECONDS`), and the only bound a Spot attempt
    has. An attempt that runs, or is being cancelled or switched already, is left alone.

    Examples:
        >>> from datetime import UTC
        >>> due = datetime(2026, 12, 1, 9, tzinfo=UTC)
        >>> record = JobRecord.decode({"state": "QUEUED", "vertexJob": "j", "strategy": "SPOT",
        ...                            "capacity": {"waitUntil": due}})
        >>> waited_in_vain(record, "j", "JOB_STATE_PENDING", due)
        'no SPOT capacity by 09:00:00Z: the capacity policy chooses again'
        >>> waited_in_vain(record, "j", "JOB_STATE_RUNNING", due) is None
        True
    """
    wait_until = record.capacity.get("waitUntil")
    if not isinstance(wait_until, datetime) or now < wait_until:
        return None
    if record.state is not JobState.QUEUED or record.vertex_job != job_name:
        return None
    if from_vertex(vertex_state) is not JobState.QUEUED:
        return None  # it started (or ended) meanwhile: the settlement takes it from here
    if record.yielding or record.cancel_requested:
        return None
    at = wait_until.astimezone(UTC)
    return f"no {record.strategy} capacity by {at:%H:%M:%S}Z: the capacity policy chooses again"


def switch_from_on_demand(s: Situation) -> CapacityDecision | None:
    """Asked at a checkpoint of a running on-demand attempt: the decision to leave it (the
    checkpoint just saved the work, so leaving loses next to nothing), or None to keep it."""
    decision = decide(replace(s, running=STANDARD))
    return None if decision.keep or decision.strategy == STANDARD else decision


# --- building the situation from what flexjobs records ---------------------------------------


def remaining_work(
    options: DeadlineOptions,
    progress: float | None,
    history: Sequence[AttemptOutcome],
) -> float:
    """The work the latest complete checkpoint has not saved, in seconds.

    With ``totalSteps`` the record's ``progress`` (checkpoint step / total) says it exactly.
    Without, it is inferred from the attempts: each saved its running time less the work it
    lost and its restart overhead.

    Examples:
        >>> from datetime import UTC
        >>> options = DeadlineOptions(datetime(2026, 12, 3, tzinfo=UTC), 36000, 1800, 600)
        >>> remaining_work(options, 0.25, ())
        27000.0
        >>> remaining_work(options, None, (AttemptOutcome("SPOT", "preempted", 7800, 0, 1200),))
        30000.0
    """
    work = float(options.work_seconds)
    if progress is not None:
        return work * (1.0 - min(1.0, max(0.0, progress)))
    overhead = options.restart_overhead_seconds
    saved = sum(
        max(0.0, a.running_seconds - a.lost_seconds - float(overhead))
        for a in history
        if a.running_seconds > 0
    )
    return max(0.0, work - saved)


def _left(budgets: Budgets | None, used: Mapping[str, int], group: str) -> int | None:
    return None if budgets is None else max(0, budgets.budget(group) - used.get(group, 0))


def situation_from_record(
    record: JobRecord,
    attempts: Sequence[Mapping[str, Any]],
    now: datetime,
    prices: PriceTable | None,
    *,
    budgets: Budgets | None = None,
    running: str | None = None,
    tuning: Tuning = Tuning(),
) -> Situation | None:
    """The situation of an AUTO record: for a retry (``running`` None) or at a checkpoint of
    its running attempt. None when its options carry no usable deadline.

    ``attempts`` are the ``attempts/{n}`` documents of the attempts that ended (for a retry:
    all but the next; at a checkpoint: all but the running one), oldest first, with their
    ``workLostSeconds`` already accounted. ``budgets`` are the request's retry budgets (the
    retry policy's, with its ``retryPolicy`` applied).
    """
    options = DeadlineOptions.read(record.options)
    if options is None:
        return None
    history = tuple(AttemptOutcome.from_attempt(a) for a in attempts)
    return Situation(
        now=now,
        deadline=options.deadline,
        origin=record.created_at or now,
        work_seconds=float(options.work_seconds),
        remaining_seconds=remaining_work(options, record.progress, history),
        restart_overhead_seconds=float(options.restart_overhead_seconds),
        checkpoint_interval_seconds=_float(options.checkpoint_interval_seconds),
        prices=Prices.of(prices, record.accelerator_type),
        history=history,
        running=running,
        preemptions_left=_left(budgets, record.retries, PREEMPTION),
        capacity_failures_left=_left(budgets, record.retries, CAPACITY),
        switches_left=max(0, MAX_SWITCHES - record.switches),
        tuning=tuning,
    )


def situation_for_first_attempt(
    options: Mapping[str, Any],
    accelerator: str | None,
    origin: datetime,
    now: datetime,
    prices: PriceTable | None,
    *,
    budgets: Budgets | None = None,
    tuning: Tuning = Tuning(),
) -> Situation | None:
    """The situation of attempt 1 of an AUTO request: nothing done, no history.

    ``origin`` is when the request was made (its publish time, else ``now``); ``accelerator``
    its GPU (:func:`shared.domain.attempts.gpu_shape`). None without a usable deadline.
    """
    read = DeadlineOptions.read(options)
    if read is None:
        return None
    return Situation(
        now=now,
        deadline=read.deadline,
        origin=origin,
        work_seconds=float(read.work_seconds),
        remaining_seconds=float(read.work_seconds),
        restart_overhead_seconds=float(read.restart_overhead_seconds),
        checkpoint_interval_seconds=_float(read.checkpoint_interval_seconds),
        prices=Prices.of(prices, accelerator),
        preemptions_left=_left(budgets, {}, PREEMPTION),
        capacity_failures_left=_left(budgets, {}, CAPACITY),
        tuning=tuning,
    )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)
