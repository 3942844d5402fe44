"""The replay of one deadline job under one policy, as the lifecycle would run it.

Pure Python, event-driven, in seconds since the request was published:

* **Spot** replays a *preemption* trace: a queued Spot attempt starts when the trace holds all
  the job's nodes; a running one is preempted when it drops below them (a gang loses all its
  nodes when any one is reclaimed). Queued time is free.
* **FLEX_START** is placed as the run's DWS model says (:mod:`benchmarks.capacity.dws`)
  within its ``maxWaitDuration`` (else the wait expires, a capacity failure), then runs to
  its end unpreempted.
* **STANDARD** (on-demand) starts at once and is never preempted.
* Every start costs the restart overhead (billed, no progress). A checkpoint completes every
  ``interval`` of progress; a preemption loses the work since the last one.

**The lifecycle's timing, at its worst** (no hint is ever delivered, so the scheduler tick,
every :data:`TICK_SECONDS` at a phase of the job's own, notices everything):

* after a failure (a preemption, a FLEX_START wait expired) the tick notices it, the product's
  retry policy (:func:`shared.domain.policy.retry.decide`) charges its budget, and the next
  attempt is decided at the first tick after the product's own jittered
  :class:`~shared.domain.policy.retry.Backoff` has passed;
* a queued attempt past its ``wait_until`` is given up at the first tick at or after it, and
  the next decision comes at the tick after that (the cancel confirmed);
* an on-demand attempt left at a checkpoint is billed to the checkpoint, and the next
  decision comes at the next tick.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from benchmarks.capacity.dws import DwsModel, Independent
from benchmarks.capacity.traces import Replay
from shared.domain.capacity.model import FLEX_START, SPOT, STANDARD, Prices
from shared.domain.capacity.regions import CROSS_REGION_SECONDS_PER_GB
from shared.domain.policy.failures import FailureClass
from shared.domain.policy.retry import CAPACITY, PREEMPTION, Backoff, Budgets
from shared.domain.policy.retry import decide as retry_decide

HOUR = 3600.0
#: The scheduler tick (infra/scheduler.tf: Cloud Scheduler, every minute).
TICK_SECONDS = 60.0
#: A job still unfinished this long after its start is a miss, and the replay stops.
HORIZON_FACTOR = 10.0
#: Deadline jobs set the preemption budget as high as a request may (preemptions are the
#: point of Spot); the capacity budget keeps its default.
BUDGETS = Budgets(preemption=100)


@dataclass(frozen=True)
class Site:
    """Where an attempt may run: a region and the capacity it meets there."""

    region: str
    spot: Replay
    flex: Replay


@dataclass(frozen=True)
class Job:
    """One deadline job: its work, its deadline and the capacity it meets (``sites[0]`` is
    its home; more than one only in the multi-region replay)."""

    name: str
    work: float
    deadline: float  # seconds after the request
    overhead: float
    interval: float
    nodes: int
    sites: tuple[Site, ...]
    tick_phase: float = 0.0  # where the minute's tick falls for this job
    seed: int = 0  # the backoff's jitter draws
    checkpoint_gb: float = 0.0

    @property
    def factor(self) -> float:
        return self.deadline / self.work

    @property
    def site(self) -> Site:
        return self.sites[0]


@dataclass(frozen=True)
class Lifecycle:
    """The lifecycle's timing: the product's backoff and the tick. The backoff's jitter is
    drawn per job from its seed (production draws ``random.random``), or with
    ``worst_jitter`` always at the top of its window."""

    backoff: Backoff = field(default_factory=Backoff)
    tick_seconds: float = TICK_SECONDS
    budgets: Budgets = BUDGETS
    worst_jitter: bool = False
    #: How long reading a GB of checkpoint across regions takes (the product's assumption).
    seconds_per_gb: float = CROSS_REGION_SECONDS_PER_GB

    def backoff_for(self, job: Job) -> Backoff:
        jitter = _top if self.worst_jitter else random.Random(job.seed).random
        return replace(self.backoff, jitter=jitter)

    def tick_at_or_after(self, job: Job, t: float) -> float:
        k = math.ceil((t - job.tick_phase) / self.tick_seconds)
        return job.tick_phase + k * self.tick_seconds

    def tick_after(self, job: Job, t: float) -> float:
        k = math.floor((t - job.tick_phase) / self.tick_seconds) + 1
        return job.tick_phase + k * self.tick_seconds


def _top() -> float:
    return 1.0


@dataclass(frozen=True)
class Plan:
    """What a policy asks for next: a strategy, a FLEX_START max wait, the latest time
    (seconds after the request) a queued attempt may wait, and where (None: the home)."""

    strategy: str
    max_wait: float | None = None
    wait_until: float | None = None
    final: bool = False
    region: str | None = None


@dataclass
class View:
    """What a policy sees when asked: the time, the work saved, the attempts' documents as
    the lifecycle stores them, the retries used, the switches made."""

    job: Job
    lifecycle: Lifecycle
    backoff: Backoff
    t: float = 0.0
    saved: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    retries: dict[str, int] = field(default_factory=dict)
    switches: int = 0
    region: str = ""  # where the checkpoint was last read and written

    @property
    def remaining(self) -> float:
        return max(0.0, self.job.work - self.saved)


class Policy(Protocol):
    name: str

    def start(self, view: View) -> Plan:
        """The next attempt, at an attempt boundary."""
        ...

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        """Asked at each checkpoint of a running on-demand attempt: the plan to switch to
        (the attempt stops there), or None to keep it running."""
        ...


@dataclass
class Result:
    job: Job
    policy: str
    finish: float  # inf: never finished (failed, or past the horizon)
    gpu_seconds: dict[str, float]  # by strategy
    attempts: int
    switches: int
    preemptions: int
    lost: float
    waited: float
    history: list[dict[str, Any]]
    egress_gb: float = 0.0

    @property
    def missed(self) -> bool:
        return self.finish > self.job.deadline

    def cost(self, prices: Prices, egress_usd_per_gb: float = 0.0) -> float:
        gpu = sum(prices.of_strategy(s) * secs for s, secs in self.gpu_seconds.items()) / HOUR
        return gpu + egress_usd_per_gb * self.egress_gb


def simulate(
    job: Job,
    policy: Policy,
    dws: DwsModel | None = None,
    lifecycle: Lifecycle | None = None,
) -> Result:
    """Replay ``job`` under ``policy`` until its work is done, it fails, or the horizon
    passes.

    The checkpoint's data stays in the job's home region (its URI never moves), so every
    attempt that runs elsewhere with work saved reads the job's ``checkpoint_gb`` across
    regions, not only the first after a move: the read is charged as egress
    (:attr:`Result.egress_gb`) and its time (:attr:`Lifecycle.seconds_per_gb`) lengthens that
    attempt's restart, billed.
    """
    model = dws or Independent()
    life = lifecycle or Lifecycle()
    view = View(job, life, life.backoff_for(job), region=job.site.region)
    usage: dict[str, float] = {STANDARD: 0.0, SPOT: 0.0, FLEX_START: 0.0}
    r = Result(job, policy.name, math.inf, usage, 0, 0, 0, 0.0, 0.0, view.attempts)
    sites = {s.region: s for s in job.sites}
    horizon = HORIZON_FACTOR * job.work
    plan = policy.start(view)
    while view.remaining > 0 and view.t < horizon:
        r.attempts += 1
        region = plan.region or view.region
        moved = region != job.site.region and view.saved > 0  # reads from home
        overhead = job.overhead + (job.checkpoint_gb * life.seconds_per_gb if moved else 0.0)
        site = sites[region]
        t = view.t
        doc: dict[str, Any] = {"strategy": plan.strategy, "location": region}
        give_up = (
            math.inf if plan.wait_until is None else life.tick_at_or_after(job, plan.wait_until)
        )
        expire = math.inf if plan.max_wait is None else t + plan.max_wait
        limit = min(give_up, expire)
        if plan.strategy == STANDARD:
            start = t
        elif plan.strategy == SPOT:
            start = site.spot.available_at(t)
            start = start if start <= limit else math.inf
        else:
            start = model.placed_at(site.spot, site.flex, t, limit)
        if start == math.inf:
            if limit == math.inf:
                break  # waits forever: never finishes
            r.waited += limit - t
            doc["queuedSeconds"] = limit - t
            view.attempts.append(doc)
            if expire <= give_up:  # Vertex ended the FLEX_START wait: a capacity failure
                doc["errorClass"] = FailureClass.MAX_WAIT_EXPIRED.value
                if not _retry(view, FailureClass.MAX_WAIT_EXPIRED, expire):
                    break
            else:  # given up by the tick: a switch, no budget charged
                doc["endedBy"] = "gave-up"
                view.switches += 1
                view.t = life.tick_after(job, give_up)
            plan = policy.start(view)
            continue
        queued = start - t
        r.waited += queued
        doc["queuedSeconds"] = queued
        if moved:
            r.egress_gb += job.checkpoint_gb
        view.region = region  # where the last attempt ran: the region rule's ``current``
        end, how, following = _run(job, policy, plan, site, start, overhead, view)
        ran = end - start
        usage[plan.strategy] += job.nodes * ran
        doc["runningSeconds"] = ran
        view.attempts.append(doc)
        if how == "preempted":
            useful = max(0.0, ran - overhead)
            kept = min(view.remaining, math.floor(useful / job.interval) * job.interval)
            gone = ran if kept == 0 else ran - overhead - kept
            doc.update(errorClass=FailureClass.PREEMPTED.value, workLostSeconds=gone)
            r.lost += gone
            r.preemptions += 1
            view.saved += kept
            if not _retry(view, FailureClass.PREEMPTED, end):
                break
            plan = policy.start(view)
        elif how == "switched":
            assert following is not None
            doc["endedBy"] = "switch"
            view.saved += ran - overhead
            view.switches += 1
            view.t = life.tick_after(job, end)
            # The lifecycle asks again at the retry (the switch's plan was its answer then).
            plan = policy.start(view)
        else:
            view.saved = job.work
            view.t = end
            r.finish = end
    r.switches = view.switches
    return r


def _retry(view: View, failure: FailureClass, at: float) -> bool:
    """The product's retry decision for ``failure`` at ``at``; on a retry, the next decision's
    time (the tick notices, the backoff passes, the next tick runs it). False: the job failed."""
    life, job = view.lifecycle, view.job
    decision = retry_decide(life.budgets, failure, view.retries)
    if not decision.retry:
        return False
    assert decision.group in (PREEMPTION, CAPACITY)
    view.retries[decision.group] = decision.used_after
    noticed = life.tick_at_or_after(job, at)
    delay = view.backoff.seconds(decision.used_after)
    # A retry due at once runs in the delivery that settled the failure (settle_job).
    view.t = noticed if delay == 0 else life.tick_at_or_after(job, noticed + delay)
    return True


def _run(
    job: Job,
    policy: Policy,
    plan: Plan,
    site: Site,
    start: float,
    overhead: float,
    view: View,
) -> tuple[float, str, Plan | None]:
    """Run one attempt at ``site`` from ``start``, ``overhead`` before it makes progress: (its
    end, how it ended, the plan a switch asked for)."""
    finish = start + overhead + view.remaining
    if plan.strategy == SPOT:
        dropped = site.spot.lost_at(start)
        return (dropped, "preempted", None) if dropped < finish else (finish, "done", None)
    if plan.strategy == FLEX_START or plan.final:
        return finish, "done", None
    k = 1
    while (checkpoint := start + overhead + k * job.interval) < finish:
        asked = replace(view, t=checkpoint, saved=view.saved + k * job.interval)
        asked.attempts = [
            *view.attempts,
            # As the lifecycle counts the running attempt at one of its checkpoints
            # (shared.app.steps.attempts.auto_situation): saved up to it, nothing lost.
            {"strategy": STANDARD, "runningSeconds": checkpoint - start, "workLostSeconds": 0.0},
        ]
        following = policy.at_checkpoint(asked, STANDARD)
        if following is not None:
            return checkpoint, "switched", following
        k += 1
    return finish, "done", None
