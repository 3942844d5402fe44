"""Deadline-aware capacity on real traces (a script, not a test): ``./dev bench capacity``.

Replays the public Spot traces of "Can't Be Late" (NSDI 2024; ``../shared/traces/``) for a
population of deadline jobs under five policies and prints, per policy, the mean cost, the
cost against always-on-demand, the deadline-miss rate, the work lost and the time spent
waiting; then the acceptance comparisons of issue 14, and a PNG of cost against misses.

The model (pure Python, event-driven, seconds since the job's start):

* **Spot** replays a *preemption* trace: capacity is there while the trace holds all the
  job's nodes. A queued Spot attempt starts when it does; a running one is preempted when the
  trace drops below the job's nodes (a gang job loses all of them). Queued time is free.
* **FLEX_START** replays an *availability* trace as the DWS capacity-wait model: the job
  starts when the replayed availability covers all its nodes at once, within its max wait
  (else the wait expires, a capacity failure); once started it runs to the end unpreempted.
* **STANDARD** (on-demand) is always available and never preempted.
* Every start costs the restart overhead (billed, no progress). Checkpoints complete every
  ``checkpoint interval`` of progress; a preemption loses the work since the last one.
  A voluntary switch off on-demand happens right after a checkpoint, so it loses nothing.
* Traces are replayed cyclically from evenly spaced offsets, so every trace serves every
  deadline; each job pairs a preemption trace with an availability trace of matching scale
  (1-node with 1-node, the 4-node gang with the 16-node probe).

The AUTO policy is :func:`shared.domain.capacity.rule.decide`, called exactly as the lifecycle calls
it: at every attempt boundary, and at each checkpoint of an on-demand attempt.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from shared.domain.capacity.model import (
    FLEX_START,
    MAX_SWITCHES,
    SPOT,
    STANDARD,
    AttemptOutcome,
    CapacityDecision,
    Prices,
    Situation,
)
from shared.domain.capacity.rule import decide
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import MAX_RETRIES_PER_GROUP, Budgets, placement_for

ROOT = Path(__file__).resolve().parents[1]
#: The traces live beside the clone (``../shared/traces``); FLEXJOBS_TRACES or --traces moves it.
DEFAULT_TRACES = ROOT.parent / "shared" / "traces" / "spot-traces"
DEFAULT_OUTPUT = ROOT / "bench-output"

HOUR = 3600.0
WORK_SECONDS = 24 * HOUR
RESTART_OVERHEAD_SECONDS = 300.0
CHECKPOINT_INTERVAL_SECONDS = 1800.0
DEADLINE_FACTORS = (1.1, 1.25, 1.5, 1.75, 2.0)
OFFSETS_PER_TRACE = 6
#: A job still unfinished this long after its start is a miss, and the replay stops.
HORIZON_FACTOR = 10.0
ACCELERATOR = "NVIDIA_TESLA_A100"
#: Every policy runs with the budgets a deadline job would set: preemptions are the point
#: of Spot, so the preemption budget is the most a request may ask for; capacity keeps the
#: default.
BUDGETS = Budgets(preemption=MAX_RETRIES_PER_GROUP)
#: Today's fallback ladder, as docs/lifecycle.md shows it: FLEX_START waiting 2 h, on-demand
#: after two capacity failures.
LADDER_MAX_WAIT = 7200.0
LADDER = ({"afterCapacityFailures": 2, "strategy": STANDARD},)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


# --- traces ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """One trace file: a value every ``gap`` seconds (nodes held, or nodes obtainable)."""

    name: str
    gap: float
    values: tuple[int, ...]

    @classmethod
    def load(cls, path: Path, root: Path) -> Trace:
        document = json.loads(path.read_text(encoding="utf-8"))
        gap = float(document["metadata"]["gap_seconds"])
        return cls(str(path.relative_to(root)), gap, tuple(int(v) for v in document["data"]))


def _distances(ok: Sequence[bool], want: bool) -> list[float]:
    """Ticks from each tick to the next (cyclically, itself included) where ``ok`` is
    ``want``; inf when there is none."""
    n = len(ok)
    out = [math.inf] * n
    nearest = math.inf
    for j in range(2 * n - 1, -1, -1):
        if ok[j % n] == want:
            nearest = j
        if j < n:
            out[j] = nearest - j
    return out


class Replay:
    """A trace replayed cyclically from a tick offset: capacity is there at time ``t`` when
    the tick covering ``t`` holds at least ``need`` nodes."""

    def __init__(self, trace: Trace, need: int, offset: int) -> None:
        ok = [v >= need for v in trace.values]
        self.trace, self.need, self.offset, self.gap = trace, need, offset, trace.gap
        self._n = len(ok)
        self._to_ok = _distances(ok, True)
        self._to_gone = _distances(ok, False)

    def _tick(self, t: float) -> tuple[int, int]:
        k = int(t // self.gap)
        return k, (self.offset + k) % self._n

    def available_at(self, t: float) -> float:
        """The first time at or after ``t`` with capacity (inf: never)."""
        k, i = self._tick(t)
        ahead = self._to_ok[i]
        return t if ahead == 0 else (k + ahead) * self.gap

    def lost_at(self, t: float) -> float:
        """When capacity held from ``t`` (there at ``t``) is taken away: the next drop."""
        k, i = self._tick(t)
        return (k + self._to_gone[i]) * self.gap

    def available(self, t: float) -> bool:
        return self.available_at(t) == t


# --- the replay of one job ------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One deadline job and the capacity it meets."""

    name: str
    factor: float
    work: float
    deadline: float  # seconds after the start
    overhead: float
    interval: float
    nodes: int
    spot: Replay
    flex: Replay
    prices: Prices


@dataclass(frozen=True)
class Plan:
    """What a policy asks for next: a strategy, a FLEX_START max wait, and the latest time
    (seconds after the job's start) a queued attempt may wait."""

    strategy: str
    max_wait: float | None = None
    wait_until: float | None = None


@dataclass
class View:
    """What a policy sees when asked: the time, the work saved, the attempts so far."""

    job: Job
    t: float
    saved: float
    history: list[AttemptOutcome]
    preemptions: int = 0
    capacity_failures: int = 0

    @property
    def remaining(self) -> float:
        return max(0.0, self.job.work - self.saved)


class Policy(Protocol):
    name: str

    def start(self, view: View) -> Plan:
        """The next attempt, at an attempt boundary."""
        ...

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        """Asked at each checkpoint of a running attempt: the next plan to switch to (the
        running attempt stops here), or None to keep it running."""
        ...

    def reset(self) -> None:
        """Forget the previous job."""
        ...


@dataclass
class Result:
    job: Job
    policy: str
    finish: float  # seconds after the start; inf when it never finished
    cost: float
    lost: float
    waited: float
    attempts: int
    history: list[AttemptOutcome] = field(default_factory=list)

    @property
    def missed(self) -> bool:
        return self.finish > self.job.deadline


def simulate(job: Job, policy: Policy) -> Result:
    """Replay ``job`` under ``policy`` until its work is done (or the horizon passes)."""
    policy.reset()
    view = View(job, 0.0, 0.0, [])
    cost = lost = waited = 0.0
    horizon = HORIZON_FACTOR * job.work
    strategies: list[str] = []
    plan = policy.start(view)
    while view.remaining > 0 and view.t < horizon:
        strategies.append(plan.strategy)
        started = _start(job, plan, view.t)
        if started is None:  # gave up in the queue, or the FLEX_START wait expired
            limit = _queue_limit(plan, view.t)
            if limit <= view.t:
                # Nothing would change before the policy is asked again: a bug, not a loop.
                raise RuntimeError(f"{policy.name}: a queue limit of 0 s at t={view.t:.0f}")
            waited += limit - view.t
            expired = _expired(plan, view.t)
            view.history.append(
                AttemptOutcome(plan.strategy, "max-wait-expired" if expired else None, 0.0, 0)
            )
            view.capacity_failures += expired
            view.t = limit
            if view.capacity_failures > BUDGETS.capacity:
                break  # the job FAILS: capacity budget spent
            plan = policy.start(view)
            continue
        waited += started - view.t
        queued = started - view.t
        end, outcome, following = _run(job, policy, plan.strategy, started, view)
        ran = end - started
        cost += _price(job.prices, plan.strategy) * job.nodes * ran / HOUR
        useful = max(0.0, ran - job.overhead)
        if outcome == "preempted":
            kept = math.floor(useful / job.interval) * job.interval
            gone = ran if kept == 0 else ran - job.overhead - kept
            lost += gone
            view.saved += kept
            view.preemptions += 1
            view.history.append(AttemptOutcome(SPOT, "preempted", ran, queued, gone))
        else:
            view.saved = min(job.work, view.saved + useful)
            view.history.append(AttemptOutcome(plan.strategy, None, ran, queued, 0.0))
        view.t = end
        if view.preemptions > BUDGETS.preemption:
            break  # the job FAILS: preemption budget spent
        if view.remaining > 0:
            plan = following or policy.start(view)
    finish = view.t if view.remaining <= 0 else math.inf
    return Result(job, policy.name, finish, cost, lost, waited, len(strategies), view.history)


def _price(prices: Prices, strategy: str) -> float:
    """USD per GPU-hour (one GPU per node here) of ``strategy``."""
    # Keyed as strings: the strategy names may be Strategy members (a StrEnum) or plain str.
    per_gpu_hour: dict[str, float] = {
        STANDARD: prices.standard,
        SPOT: prices.spot,
        FLEX_START: prices.flex_start,
    }
    return per_gpu_hour[strategy]


def _queue_limit(plan: Plan, t: float) -> float:
    """When a queued attempt stops waiting: its FLEX_START max wait (Vertex ends it), or
    earlier the time the policy gave it (the lifecycle cancels it)."""
    vertex = t + plan.max_wait if plan.max_wait is not None else math.inf
    return min(vertex, plan.wait_until if plan.wait_until is not None else math.inf)


def _expired(plan: Plan, t: float) -> bool:
    """The queue limit was Vertex's own max wait: a max-wait-expired failure."""
    return plan.max_wait is not None and _queue_limit(plan, t) == t + plan.max_wait


def _start(job: Job, plan: Plan, t: float) -> float | None:
    """When the attempt starts running, or None when it never does within its queue limit."""
    if plan.strategy == STANDARD:
        return t
    replay = job.spot if plan.strategy == SPOT else job.flex
    start = replay.available_at(t)
    return start if start <= _queue_limit(plan, t) and start < math.inf else None


def _run(
    job: Job, policy: Policy, strategy: str, start: float, view: View
) -> tuple[float, str, Plan | None]:
    """Run one attempt from ``start``: (its end, how it ended, the plan a switch asked for)."""
    finish = start + job.overhead + (job.work - view.saved)
    if strategy == SPOT:
        dropped = job.spot.lost_at(start)
        if dropped < finish:
            return dropped, "preempted", None
        return finish, "done", None
    k = 1
    while (checkpoint := start + job.overhead + k * job.interval) < finish:
        asked = replace(view, t=checkpoint, saved=view.saved + k * job.interval)
        following = policy.at_checkpoint(asked, strategy)
        if following is not None:
            return checkpoint, "switched", following
        k += 1
    return finish, "done", None


# --- policies ---------------------------------------------------------------------------------


class _Stateless:
    name = ""

    def reset(self) -> None:
        return None

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        return None


class OnDemand(_Stateless):
    name = "always on-demand"

    def start(self, view: View) -> Plan:
        return Plan(STANDARD)


class SpotRetries(_Stateless):
    """Today's Spot: every attempt SPOT, queued until capacity, retried after preemptions."""

    name = "always Spot (retries)"

    def start(self, view: View) -> Plan:
        return Plan(SPOT)


class Ladder(_Stateless):
    """Today's fallback ladder through :func:`shared.domain.policy.retry.placement_for`."""

    name = "fallback ladder"

    def start(self, view: View) -> Plan:
        placement = placement_for(LADDER, view.capacity_failures, FLEX_START, "us-central1")
        if placement.strategy == FLEX_START:
            return Plan(FLEX_START, max_wait=LADDER_MAX_WAIT)
        return Plan(placement.strategy)


class UniformProgress:
    """Uniform Progress as the paper states it (Spot and on-demand only), with its oracle of
    Spot availability. Its changeover delay ``d`` includes the progress a switch can lose
    (the paper's definition), so here the restart overhead plus a checkpoint interval.

    1. Idle and behind the line (cp < ep(t)): on-demand.
    2. Spot whenever available (stay until preempted).
    3. On on-demand, stay until cp >= ep(t + 2d); then Spot if available, else idle.
    4. Safety net: idle and R < C + 2d: on-demand to the end.
    """

    name = "Uniform Progress (paper)"

    def __init__(self) -> None:
        self.locked = False

    def reset(self) -> None:
        self.locked = False

    def _d(self, job: Job) -> float:
        return job.overhead + job.interval

    def _expected(self, job: Job, t: float) -> float:
        return job.work * t / job.deadline

    def start(self, view: View) -> Plan:
        job, t, d = view.job, view.t, self._d(view.job)
        if self.locked or job.deadline - t < view.remaining + 2 * d:
            self.locked = True
            return Plan(STANDARD)
        if job.spot.available(t):
            return Plan(SPOT, wait_until=t)
        # Idle: wait for Spot until falling behind the line or reaching the safety net; on
        # the line already (an idle moment would put it behind), on-demand.
        behind_at = view.saved * job.deadline / job.work
        safety_at = job.deadline - view.remaining - 2 * d
        if min(behind_at, safety_at) <= t:
            return Plan(STANDARD)
        return Plan(SPOT, wait_until=min(behind_at, safety_at))

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        job, t, d = view.job, view.t, self._d(view.job)
        if running != STANDARD or self.locked:
            return None
        if job.deadline - t < view.remaining + 2 * d:
            self.locked = True
            return None
        if view.saved < self._expected(job, t + 2 * d):
            return None
        return self.start(view)


class Auto:
    """flexjobs AUTO: :func:`shared.domain.capacity.rule.decide`, asked as the lifecycle asks it."""

    name = "flexjobs AUTO"

    def __init__(self) -> None:
        self.last: CapacityDecision | None = None
        self.decisions: list[CapacityDecision] = []

    def reset(self) -> None:
        self.last = None
        self.decisions = []

    def _situation(self, view: View, running: str | None) -> Situation:
        job = view.job
        return Situation(
            now=EPOCH + timedelta(seconds=view.t),
            deadline=EPOCH + timedelta(seconds=job.deadline),
            origin=EPOCH,
            work_seconds=job.work,
            remaining_seconds=view.remaining,
            restart_overhead_seconds=job.overhead,
            checkpoint_interval_seconds=job.interval,
            prices=job.prices,
            history=tuple(view.history),
            running=running,
            preemptions_left=BUDGETS.preemption - view.preemptions,
            capacity_failures_left=BUDGETS.capacity - view.capacity_failures,
            # Attempts ended by choice (given up in the queue, left at a checkpoint) end
            # with no failure, as the lifecycle counts them in ``switches``.
            switches_left=max(0, MAX_SWITCHES - sum(a.failure is None for a in view.history)),
        )

    def _plan(self, decision: CapacityDecision) -> Plan:
        self.last = decision
        self.decisions.append(decision)
        until = decision.wait_until
        return Plan(
            decision.strategy,
            max_wait=decision.max_wait_seconds,
            wait_until=None if until is None else (until - EPOCH).total_seconds(),
        )

    def start(self, view: View) -> Plan:
        return self._plan(decide(self._situation(view, None)))

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        # The lifecycle asks at the checkpoints of an unpreemptible attempt that is not final.
        if running == SPOT or (self.last is not None and self.last.final):
            return None
        decision = decide(self._situation(view, running))
        return None if decision.keep else self._plan(decision)


def policies() -> list[Policy]:
    return [OnDemand(), SpotRetries(), Ladder(), UniformProgress(), Auto()]


# --- the population -------------------------------------------------------------------------


def population(traces: Path, prices: Prices) -> list[Job]:
    """24 h jobs at each deadline factor, from evenly spaced offsets of every preemption
    trace, each paired with an availability trace of its scale (round robin)."""
    found = sorted(traces.rglob("*.json"))
    if not found:
        raise SystemExit(f"no traces under {traces}; pass --traces or set FLEXJOBS_TRACES")
    loaded = [Trace.load(p, traces) for p in found]
    groups = [
        # (preemption traces, availability traces, nodes the job holds)
        ("preemption/1-node/", "availability/1-node/", 1),
        ("preemption/4-node/", "availability/16-node/", 4),
    ]
    jobs: list[Job] = []
    for spot_prefix, flex_prefix, nodes in groups:
        spots = [t for t in loaded if t.name.startswith(spot_prefix)]
        flexes = [t for t in loaded if t.name.startswith(flex_prefix)]
        for i, spot in enumerate(spots):
            for k in range(OFFSETS_PER_TRACE):
                flex = flexes[(i * OFFSETS_PER_TRACE + k) % len(flexes)]
                spot_replay = Replay(spot, nodes, k * len(spot.values) // OFFSETS_PER_TRACE)
                flex_replay = Replay(flex, nodes, (2 * k + 1) * len(flex.values) // 12)
                for factor in DEADLINE_FACTORS:
                    jobs.append(
                        Job(
                            name=f"{spot.name}@{k}",
                            factor=factor,
                            work=WORK_SECONDS,
                            deadline=factor * WORK_SECONDS,
                            overhead=RESTART_OVERHEAD_SECONDS,
                            interval=CHECKPOINT_INTERVAL_SECONDS,
                            nodes=nodes,
                            spot=spot_replay,
                            flex=flex_replay,
                            prices=prices,
                        )
                    )
    return jobs


# --- the report -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    policy: str
    cost: float  # mean USD per job
    vs_on_demand: float  # total cost / total cost of always-on-demand
    missed: float  # share of jobs past their deadline
    lost_hours: float  # mean per job
    waited_hours: float  # mean per job

    @classmethod
    def of(cls, name: str, results: list[Result], on_demand: list[Result]) -> Summary:
        n = len(results)
        base = sum(r.cost for r in on_demand)
        return cls(
            policy=name,
            cost=sum(r.cost for r in results) / n,
            vs_on_demand=sum(r.cost for r in results) / base,
            missed=sum(r.missed for r in results) / n,
            lost_hours=sum(r.lost for r in results) / n / HOUR,
            waited_hours=sum(r.waited for r in results) / n / HOUR,
        )


def run_all(jobs: list[Job]) -> dict[str, list[Result]]:
    return {p.name: [simulate(job, p) for job in jobs] for p in policies()}


def acceptance(results: dict[str, list[Result]]) -> list[tuple[str, bool, str]]:
    """Issue 14's three comparisons: (statement, holds, the measured figures)."""
    auto = results[Auto.name]
    on_demand = results[OnDemand.name]
    paper = results[UniformProgress.name]
    regressions = [a for a, o in zip(auto, on_demand, strict=True) if a.missed and not o.missed]
    auto_cost = sum(r.cost for r in auto)
    up_cost = sum(r.cost for r in paper)
    od_cost = sum(r.cost for r in on_demand)
    share = auto_cost / od_cost
    return [
        (
            "AUTO misses no deadline that always-on-demand meets",
            not regressions,
            f"{len(regressions)} missed of the {sum(not o.missed for o in on_demand)} jobs "
            "on-demand meets" + (f" (e.g. {_label(regressions[0].job)})" if regressions else ""),
        ),
        (
            "AUTO cost <= Uniform Progress cost",
            auto_cost <= up_cost,
            f"AUTO ${auto_cost / len(auto):,.2f} vs Uniform Progress ${up_cost / len(paper):,.2f}"
            f" per job ({auto_cost / up_cost - 1:+.1%})",
        ),
        (
            "AUTO cost <= 50% of always-on-demand",
            share <= 0.5,
            f"{share:.1%} of on-demand"
            + ("" if share <= 0.5 else f" (gap {share - 0.5:.1%} of the on-demand cost)"),
        ),
    ]


def _label(job: Job) -> str:
    return f"{job.name} at {job.factor:g}x"


def print_report(
    accelerator: str, jobs: list[Job], results: dict[str, list[Result]], seconds: float
) -> None:
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the tables whatever the terminal (or a pipe) says.
    console = Console(width=max(Console().width, 110))
    on_demand = results[OnDemand.name]
    prices = jobs[0].prices
    console.print(
        f"{len(jobs)} jobs: {WORK_SECONDS / HOUR:.0f} h of work, deadlines at "
        f"{', '.join(f'{f:g}' for f in DEADLINE_FACTORS)}x, restart overhead "
        f"{RESTART_OVERHEAD_SECONDS / 60:.0f} min, checkpoint every "
        f"{CHECKPOINT_INTERVAL_SECONDS / 60:.0f} min; {accelerator} at ${prices.standard:.2f} "
        f"on-demand, ${prices.spot:.2f} Spot, ${prices.flex_start:.2f} FLEX_START per GPU-hour"
    )
    table = Table(title="Capacity policies over the Can't Be Late traces")
    columns = ("policy", "mean cost", "vs on-demand", "deadline misses", "work lost h", "waiting h")
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, rows in results.items():
        s = Summary.of(name, rows, on_demand)
        table.add_row(
            name,
            f"${s.cost:,.2f}",
            f"{s.vs_on_demand:.1%}",
            f"{s.missed:.1%}",
            f"{s.lost_hours:.2f}",
            f"{s.waited_hours:.2f}",
        )
    console.print(table)
    by_factor = Table(title="Cost vs on-demand (deadline misses) by deadline factor")
    by_factor.add_column("policy")
    for factor in DEADLINE_FACTORS:
        by_factor.add_column(f"{factor:g}x", justify="right")
    for name, rows in results.items():
        cells = []
        for factor in DEADLINE_FACTORS:
            mine = [r for r in rows if r.job.factor == factor]
            base = [r for r in on_demand if r.job.factor == factor]
            s = Summary.of(name, mine, base)
            cells.append(f"{s.vs_on_demand:.0%} ({s.missed:.0%})")
        by_factor.add_row(name, *cells)
    console.print(by_factor)
    for statement, holds, figures in acceptance(results):
        mark = "[green]PASS[/green]" if holds else "[red]FAIL[/red]"
        console.print(f"{mark} {statement}: {figures}")
    console.print(f"replayed in {seconds:.1f} s")


def plot(results: dict[str, list[Result]], output: Path, accelerator: str) -> Path:
    """Cost against deadline misses, one point per policy, as a PNG under ``output``."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    on_demand = results[OnDemand.name]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, rows in results.items():
        s = Summary.of(name, rows, on_demand)
        axes.scatter([100 * s.missed], [100 * s.vs_on_demand], s=60)
        axes.annotate(
            name,
            (100 * s.missed, 100 * s.vs_on_demand),
            xytext=(6, 4),
            textcoords="offset points",
            fontsize=9,
        )
    axes.set_xlabel("deadline misses (% of jobs)")
    axes.set_ylabel("cost (% of always on-demand)")
    axes.set_title(f"Cost against deadline misses ({accelerator}, Can't Be Late traces)")
    axes.axhline(50, color="grey", linewidth=0.8, linestyle="--")
    axes.margins(x=0.3, y=0.1)  # room for the labels
    axes.grid(True, alpha=0.3)
    output.mkdir(parents=True, exist_ok=True)
    path = output / f"capacity-{accelerator.lower()}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deadline-aware capacity on real traces.")
    traces = Path(os.environ.get("FLEXJOBS_TRACES", DEFAULT_TRACES))
    parser.add_argument("--traces", type=Path, default=traces, help="the spot-traces folder")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the PNG goes")
    parser.add_argument(
        "--accelerator",
        default=ACCELERATOR,
        help="the shared/domain/policy/prices.yaml row to price with",
    )
    args = parser.parse_args(argv)
    accelerator = args.accelerator.upper()
    began = time.perf_counter()
    table = PriceTable.default()
    if accelerator not in table.rates:
        parser.error(f"{accelerator} is not in shared/domain/policy/prices.yaml")
    jobs = population(args.traces, Prices.of(table, accelerator))
    results = run_all(jobs)
    print_report(accelerator, jobs, results, time.perf_counter() - began)
    print(f"plot: {plot(results, args.output, accelerator)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
