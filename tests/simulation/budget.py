"""How much the simulator runs: CI's budget (at most five minutes of the whole CI run, every
controller) and the full one (``./dev sim --full``), and the figures each run reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tests.simulation import explore
from tests.simulation.scenarios import Scenario


@dataclass(frozen=True)
class Scope:
    """One controller's budget: random seeds and their steps, the exhaustive bounds, and the
    wall time each mode may take at most."""

    seeds: int
    steps: int
    seconds: float
    depth: int = 24
    preemptions: int = 2
    faults: int = 1
    #: The exhaustive mode's wall time (None: ``seconds``).
    exhaustive_seconds: float | None = None

    @property
    def exploring(self) -> float:
        return self.seconds if self.exhaustive_seconds is None else self.exhaustive_seconds


@dataclass(frozen=True)
class Plan:
    default: Scope
    by_controller: dict[str, Scope] = field(default_factory=dict)

    def of(self, name: str) -> Scope:
        return self.by_controller.get(name, self.default)


#: CI: every controller's random runs (12 s each) and the small scopes' exhaustive
#: exploration (12 s each), inside five minutes in all with the traces and the mutants.
CI = Plan(
    Scope(seeds=40, steps=300, seconds=12.0),
    {"auto": Scope(seeds=6, steps=300, seconds=12.0, depth=16)},
)
#: The full budget: what a change to a controller runs under before it lands (about 6
#: minutes a controller: 1,000 seeds of 400 choices or 4 minutes, 2 minutes exhaustive).
FULL = Plan(
    Scope(
        seeds=1000,
        steps=400,
        seconds=240.0,
        depth=28,
        preemptions=2,
        faults=2,
        exhaustive_seconds=120.0,
    ),
    {
        "auto": Scope(
            seeds=300, steps=400, seconds=240.0, depth=20, faults=1, exhaustive_seconds=120.0
        )
    },
)


@dataclass
class RandomReport:
    """What a batch of random runs did."""

    scenario: str
    seeds: int = 0
    #: Choices taken (the seeds' schedules), and scheduling points executed in all (the
    #: choices', the calm ticks' and the quiet's port calls).
    steps: int = 0
    points: int = 0
    distinct: int = 0
    seconds: float = 0.0
    failure: explore.Result | None = None

    def line(self) -> str:
        rate = self.points / self.seconds if self.seconds else 0.0
        verdict = "ok" if self.failure is None else f"FAILED seed {self.failure.seed}"
        return (
            f"{self.scenario:10} random      seeds {self.seeds:5}  choices {self.steps:6}  "
            f"steps {self.points:8}  distinct states {self.distinct:6}  "
            f"{rate:7.0f} steps/s  {self.seconds:6.1f} s  {verdict}"
        )


def random_runs(
    scenario: Scenario, *, seeds: int, first: int = 0, steps: int, seconds: float
) -> RandomReport:
    """Seeds ``first``.. until ``seeds`` ran, ``seconds`` passed, or one failed."""
    report = RandomReport(scenario.name)
    hashes: set[str] = set()
    started = time.monotonic()
    for seed in range(first, first + seeds):
        chooser = explore.RandomChooser(seed)
        result = explore.run(scenario, chooser, seed=seed, steps=steps, hashes=hashes)
        result.swarm = str(chooser.swarm)
        report.seeds += 1
        report.steps += result.steps
        report.points += result.points
        if result.violation is not None:
            report.failure = result
            break
        if time.monotonic() - started > seconds:
            break
    report.distinct = len(hashes)
    report.seconds = time.monotonic() - started
    return report


def exhaustive_line(found: explore.Exploration, bounds: explore.Bounds) -> str:
    rate = found.steps / found.seconds if found.seconds else 0.0
    verdict = "ok" if found.failure is None else f"FAILED after {found.schedules} schedules"
    done = "complete" if found.complete else "budget spent"
    return (
        f"{found.scenario:10} exhaustive  schedules {found.schedules:5}  steps {found.steps:8}  "
        f"distinct states {found.distinct:6}  depth {found.deepest}/{bounds.depth} "
        f"preemptions {bounds.preemptions} faults {bounds.faults}  {rate:7.0f} steps/s  "
        f"{found.seconds:6.1f} s  {done}  {verdict}"
    )
