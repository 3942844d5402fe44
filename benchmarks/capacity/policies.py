"""The policies the replay compares, each asked as the lifecycle would ask it.

* :class:`Auto`: flexjobs AUTO, the product's :func:`~shared.domain.capacity.rule.decide`
  through the lifecycle's own situation builders (``situation_for_first_attempt`` for
  attempt 1, ``situation_from_record`` for every retry, ``switch_from_on_demand`` at an
  on-demand attempt's checkpoints), from a :class:`JobRecord` and the attempts' documents.
* :class:`UniformProgress`: the NSDI'24 paper's rule (Spot and on-demand only).
* :class:`Ladder`: flexjobs' fallback rungs, through the product's ``placement_for``.
* :class:`GreedySpot`: Spot until the safety net closes, then on-demand.
* :class:`OnDemand`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.capacity.model import Job, Plan, View
from shared.domain.capacity.model import FLEX_START, SPOT, STANDARD, CapacityDecision, Situation
from shared.domain.capacity.rule import decide
from shared.domain.capacity.situations import (
    situation_for_first_attempt,
    situation_from_record,
    switch_from_on_demand,
)
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import CAPACITY, placement_for

#: The request's publish time: the replay's second 0.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: The fallback ladder as flexjobs' rungs run it: FLEX_START waiting 2 h, Spot after one
#: capacity failure, on-demand after two. Spot attempts queue for capacity and are retried
#: after preemptions, so the on-demand rung is reached only through FLEX_START expiries.
LADDER_MAX_WAIT = 7200.0
LADDER = (
    {"afterCapacityFailures": 1, "strategy": SPOT},
    {"afterCapacityFailures": 2, "strategy": STANDARD},
)


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def seconds_of(when: datetime) -> float:
    return (when - EPOCH).total_seconds()


def deadline_options(job: Job) -> dict[str, Any]:
    """The request's envelope fields (JSON integers, as intake stores them)."""
    return {
        "deadline": at(job.deadline).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "estimatedRunSeconds": round(job.work),
        "checkpointIntervalSeconds": round(job.interval),
        "restartOverheadSeconds": round(job.overhead),
    }


class OnDemand:
    name = "on-demand"

    def start(self, view: View) -> Plan:
        return Plan(STANDARD, final=True)

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        return None


class Ladder:
    """FLEX_START, then Spot, then on-demand, as the request's ``fallback`` rungs place them."""

    name = "fallback ladder"

    def start(self, view: View) -> Plan:
        failures = view.retries.get(CAPACITY, 0)
        placement = placement_for(LADDER, failures, FLEX_START, view.region)
        if placement.strategy == FLEX_START:
            return Plan(FLEX_START, max_wait=LADDER_MAX_WAIT)
        return Plan(placement.strategy, final=placement.strategy == STANDARD)

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        return None


def _changeover(job: Job) -> float:
    """The paper's changeover delay ``d``: a restart plus the progress a switch can lose."""
    return job.overhead + job.interval


class GreedySpot:
    """Spot whenever it can (queued until capacity), until the safety net closes
    (``R < C + 2d``, the paper's); then on-demand to the end."""

    name = "Greedy Spot"

    def start(self, view: View) -> Plan:
        job, t = view.job, view.t
        net = job.deadline - view.remaining - 2 * _changeover(job)
        if t >= net:
            return Plan(STANDARD, final=True)
        return Plan(SPOT, wait_until=net)

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        return None


class UniformProgress:
    """Uniform Progress as the paper states it (Spot and on-demand only), with its oracle of
    Spot availability.

    1. Idle and behind the line (cp < ep(t)): on-demand.
    2. Spot whenever available (stay until preempted).
    3. On on-demand, stay until cp >= ep(t + 2d); then Spot if available, else idle.
    4. Safety net: idle and R < C + 2d: on-demand to the end.
    """

    name = "Uniform Progress"

    def _net(self, view: View) -> bool:
        job = view.job
        return job.deadline - view.t < view.remaining + 2 * _changeover(job)

    def start(self, view: View) -> Plan:
        job, t = view.job, view.t
        if self._net(view):
            return Plan(STANDARD, final=True)
        if job.site.spot.available(t):
            return Plan(SPOT, wait_until=t)
        # Idle: wait for Spot until falling behind the line or reaching the safety net.
        behind_at = view.saved * job.deadline / job.work
        safety_at = job.deadline - view.remaining - 2 * _changeover(job)
        if min(behind_at, safety_at) <= t:
            return Plan(STANDARD)
        return Plan(SPOT, wait_until=min(behind_at, safety_at))

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        job, t, d = view.job, view.t, _changeover(view.job)
        if self._net(view):
            return None
        if view.saved < job.work * (t + 2 * d) / job.deadline:
            return None
        following = self.start(view)
        return None if following.strategy == STANDARD else following


class Auto:
    """flexjobs AUTO for one accelerator, asked exactly where and as the lifecycle asks it."""

    name = "AUTO"

    def __init__(self, accelerator: str, table: PriceTable) -> None:
        self.accelerator, self.table = accelerator, table
        self.decisions: list[CapacityDecision] = []

    def record(self, view: View) -> JobRecord:
        """The job's record as the lifecycle would hold it at ``view``: progress from the
        latest checkpoint (the request declares ``totalSteps``), retries, switches."""
        return JobRecord(
            request_id=view.job.name,
            state=JobState.RETRYING,
            attempt=len(view.attempts) + 1,
            accelerator_type=self.accelerator,
            options_text=json.dumps(deadline_options(view.job)),
            retries=dict(view.retries),
            switches=view.switches,
            progress=view.saved / view.job.work,
            created_at=EPOCH,
        )

    def situation(self, view: View, running: str | None = None) -> Situation:
        life = view.lifecycle
        if not view.attempts:
            found = situation_for_first_attempt(
                deadline_options(view.job),
                self.accelerator,
                origin=EPOCH,
                now=at(view.t),
                prices=self.table,
                budgets=life.budgets,
                backoff=view.backoff,
            )
        else:
            found = situation_from_record(
                self.record(view),
                view.attempts,
                at(view.t),
                self.table,
                budgets=life.budgets,
                backoff=view.backoff,
                running=running,
            )
        if found is None:
            raise ValueError(f"{view.job.name}: the deadline options do not read")
        return found

    def plan(self, decision: CapacityDecision) -> Plan:
        self.decisions.append(decision)
        until = decision.wait_until
        return Plan(
            decision.strategy,
            max_wait=decision.max_wait_seconds,
            wait_until=None if until is None else seconds_of(until),
            final=decision.final,
        )

    def start(self, view: View) -> Plan:
        return self.plan(decide(self.situation(view)))

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        decision = switch_from_on_demand(self.situation(view, running))
        return None if decision is None else self.plan(decision)
