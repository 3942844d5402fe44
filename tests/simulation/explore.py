"""Running the simulator: long random runs over many seeds, exhaustive exploration of small
scopes, replaying a trace, and shrinking a failing one.

- **Random runs** (:func:`run_seed`). A seed draws its own mix of faults (swarm testing: some
  seeds are calm, some are storms of one kind of fault), then every choice from the world's
  options. After the run's steps, the faults stop, capacity comes back, and the quiet ticks
  run; the ``settled`` invariants are checked then.
- **Exhaustive exploration** (:func:`explore`). Every schedule up to a depth, with at most a
  few preemptions (switching away from a delivery in flight, as Microsoft's CHESS bounds
  them) and a few faults, depth first; each schedule is replayed from the start (greenlets
  cannot be copied), and a state between deliveries already seen with the same budget left is
  not explored again.
- **Replay** (:func:`replay`). A trace is the list of the choices' labels; replaying takes at
  each step the option with that label (or, after a fix moved the port calls, the step of the
  same delivery with the same fault), so a trace pasted as a regression test still drives the
  same interleaving.
- **Shrinking** (:func:`shrink`). A failing trace loses every part it can lose and still
  fail the same invariant (delta debugging), so what is printed is short enough to read.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tests.simulation import invariants
from tests.simulation.scenarios import SCENARIOS, Scenario
from tests.simulation.world import Option, Violation, World

#: The order in which a schedule's choices are tried, first to last: the step of the
#: delivery that ran last, then the other steps, deliveries, events, faults and crashes.
GROUP_ORDER = ("step", "deliver", "event", "fault", "crash")


class Chooser(Protocol):
    def choose(self, world: World, options: Sequence[Option]) -> int | None:
        """The index of the option to take, or None to end the run here."""
        ...


@dataclass
class Swarm:
    """One seed's weights for each group of choices (swarm testing)."""

    weights: dict[str, float]

    @classmethod
    def draw(cls, rng: random.Random) -> Swarm:
        return cls(
            {
                "step": 1.0,
                "deliver": rng.choice((0.3, 1.0, 3.0)),
                "event": rng.choice((0.05, 0.15, 0.5)),
                "fault": rng.choice((0.0, 0.03, 0.1, 0.3)),
                "crash": rng.choice((0.0, 0.01, 0.05)),
            }
        )

    def __str__(self) -> str:
        return " ".join(f"{k}={v:g}" for k, v in self.weights.items())


class RandomChooser:
    """Weighted by group (the seed's swarm), then uniform within the group."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.swarm = Swarm.draw(self.rng)

    def choose(self, world: World, options: Sequence[Option]) -> int | None:
        groups = sorted({o.group for o in options}, key=GROUP_ORDER.index)
        weights = [self.swarm.weights.get(g, 0.0) for g in groups]
        if not any(weights):
            return None
        group = self.rng.choices(groups, weights)[0]
        picks = [i for i, o in enumerate(options) if o.group == group]
        return self.rng.choices(picks, [options[i].weight for i in picks])[0]


class ReplayChooser:
    """Takes the options a trace names, in order (see the module docstring)."""

    def __init__(self, trace: Sequence[str]) -> None:
        self.trace = list(trace)
        self.at = 0
        self.skipped: list[str] = []

    def choose(self, world: World, options: Sequence[Option]) -> int | None:
        while self.at < len(self.trace):
            wanted = self.trace[self.at]
            self.at += 1
            found = _matching(wanted, options)
            if found is not None:
                return found
            self.skipped.append(wanted)
        return None


def _matching(wanted: str, options: Sequence[Option]) -> int | None:
    for i, option in enumerate(options):
        if option.label == wanted:
            return i
    if wanted.startswith("> ") and " | " in wanted:
        # The same delivery, with the same fault (its port call may have moved since).
        name = wanted[2:].split(" | ", 1)[0]
        fault = wanted.rsplit(" !", 1)[1] if " !" in wanted else None
        for i, option in enumerate(options):
            if not option.label.startswith(f"> {name} | "):
                continue
            got = option.label.rsplit(" !", 1)[1] if " !" in option.label else None
            if got == fault:
                return i
    return None


@dataclass
class Result:
    """One run: where it ended, the first invariant violated (None: all held), its trace."""

    scenario: str
    seed: int
    steps: int
    violation: Violation | None
    trace: list[str]
    settled: bool = True
    swarm: str = ""
    quiet_steps: int = 0
    distinct: set[str] = field(default_factory=set)
    #: Scheduling points the run executed (its choices', the calm ticks' and the quiet's).
    points: int = 0
    #: A replay's: how many of its trace's choices found their option (the rest were skipped:
    #: the code no longer offers that step).
    matched: int = 0

    @property
    def ok(self) -> bool:
        return self.violation is None


def new_world(scenario: Scenario, seed: int) -> World:
    world = World(scenario.env, seed=seed)
    scenario.setup(world, random.Random(seed * 7919 + 17))
    return world


#: Invariants a run does not stop for (``./dev sim --skip``): a defect already found, while
#: the exploration looks for the next one.
SKIPPED: set[str] = set()


def _first(world: World, when: str) -> Violation | None:
    for invariant in invariants.INVARIANTS:
        if invariant.when != when or invariant.name in SKIPPED:
            continue
        found = invariant.check(world)
        if found:
            return found[0]
    return None


def _always(world: World) -> Violation | None:
    return _first(world, "always")


def run(
    scenario: Scenario,
    chooser: Chooser,
    *,
    seed: int,
    steps: int,
    settle: bool = True,
    hashes: set[str] | None = None,
    settled: set[str] | None = None,
) -> Result:
    """One run of ``scenario`` with ``chooser``'s choices (at most ``steps``), then the quiet
    ticks and the settled checks. ``settled``: the states (between deliveries) already seen
    to settle with every invariant holding; one of them is not settled again (the quiet is
    deterministic: the same state settles the same way)."""
    world = new_world(scenario, seed)
    world.check = _always
    with world.installed():
        result = _run_in(world, scenario, chooser, seed, steps, settle, hashes, settled)
    result.points = world.scheduler.points
    return result


def _run_in(
    world: World,
    scenario: Scenario,
    chooser: Chooser,
    seed: int,
    steps: int,
    settle: bool,
    hashes: set[str] | None,
    settled: set[str] | None,
) -> Result:
    taken = 0
    while taken < steps:
        options = world.options()
        if not options:
            break
        index = chooser.choose(world, options)
        if index is None:
            break
        world.take(options[index])
        taken += 1
        found = world.failed or _always(world)
        if found is not None:
            return Result(scenario.name, seed, taken, found, world.trace, settled=False)
        if hashes is not None and not world.scheduler.in_flight():
            hashes.add(world.hashed())
    if not settle or getattr(chooser, "pruned", False):
        # A pruned schedule ends in a state explored (and settled) already.
        return Result(scenario.name, seed, taken, None, world.trace, settled=False)
    key = None
    if settled is not None and not world.scheduler.in_flight():
        key = world.hashed()
        if key in settled:
            return Result(scenario.name, seed, taken, None, world.trace)
    found, quiet = quiet_ticks(world, scenario.quiet_minutes)
    if key is not None and found is None:
        settled.add(key)  # type: ignore[union-attr]
    return Result(scenario.name, seed, taken, found, world.trace, quiet_steps=quiet)


def quiet_ticks(world: World, minutes: int) -> tuple[Violation | None, int]:
    """The faults stop, capacity comes back, and ``minutes`` of calm ticks run; then the
    settled invariants are checked. Returns the first violation (None: all held) and the
    steps the quiet took."""
    world.faults = world.crashes = False
    world.trace.append("= quiet")
    for region, machine in sorted(world.vertex.spot_out):
        world.vertex.return_spot(region, machine)
    world.vertex.down.clear()
    world.vertex.flex_out.clear()
    world.vertex.serving_quota_out.clear()
    world.vertex.on_time()
    steps = 0
    for minute in range(minutes):
        steps += world.drain(check=_always)
        if world.failed is not None:
            return world.failed, steps
        found = _first(world, f"quiet+{minute}")
        if found is not None:
            return found, steps
        if world.at_rest():
            # Every later minute would find the same: its checks are made once, here.
            for later in range(minute + 1, minutes):
                found = _first(world, f"quiet+{later}")
                if found is not None:
                    return found, steps
            break
        world.advance(60)
    steps += world.drain(check=_always)
    if world.failed is not None:
        return world.failed, steps
    return _first(world, "settled"), steps


def run_seed(scenario: Scenario, seed: int, steps: int) -> Result:
    chooser = RandomChooser(seed)
    result = run(scenario, chooser, seed=seed, steps=steps)
    result.swarm = str(chooser.swarm)
    return result


def replay(scenario: Scenario, trace: Sequence[str], *, seed: int = 0) -> Result:
    """Replay ``trace`` (a run's labels) on ``scenario``; the quiet ticks follow it unless the
    trace ended before them (it then stops where the violation was)."""
    settle = "= quiet" in trace
    steps = trace.index("= quiet") if settle else len(trace)
    chooser = ReplayChooser(trace[:steps])
    result = run(scenario, chooser, seed=seed, steps=steps, settle=settle)
    result.matched = chooser.at - len(chooser.skipped) + (1 if settle else 0)
    return result


@dataclass(frozen=True)
class SavedTrace:
    """A trace file (``tests/simulation/traces/*.trace``): ``# key: value`` headers (the
    scenario, the seed its world was built with, the invariant it broke, why), then one
    choice per line."""

    scenario: str
    seed: int
    trace: list[str]
    headers: dict[str, str]


def trace_file(scenario: str, seed: int, violation: Violation, trace: Sequence[str]) -> list[str]:
    """The lines of a trace file for a failing run, ready to paste."""
    head = [
        f"# scenario: {scenario}",
        f"# seed: {seed}",
        f"# invariant: {violation.invariant}",
        f"# found: {violation.detail}",
    ]
    return head + list(trace)


def read_trace(text: str) -> SavedTrace:
    """A trace file's headers and choices (a file of bare choices reads as seed 0)."""
    headers: dict[str, str] = {}
    trace: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, _, value = line[1:].partition(":")
            headers.setdefault(key.strip(), value.strip())
            continue
        trace.append(line)
    return SavedTrace(
        headers.get("scenario", ""), int(headers.get("seed", "0") or 0), trace, headers
    )


def shrink(
    scenario: Scenario,
    trace: Sequence[str],
    invariant: str,
    *,
    seed: int = 0,
    budget_seconds: float = 120.0,
) -> list[str]:
    """The shortest trace found (delta debugging) that still fails ``invariant``."""
    quiet = ["= quiet"] if "= quiet" in trace else []
    body = [t for t in trace if t != "= quiet"]
    deadline = time.monotonic() + budget_seconds

    def fails(candidate: list[str]) -> bool:
        result = replay(scenario, candidate + quiet, seed=seed)
        return result.violation is not None and result.violation.invariant == invariant

    chunk = max(1, len(body) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        shrunk = False
        start = 0
        while start < len(body) and time.monotonic() < deadline:
            candidate = body[:start] + body[start + chunk :]
            if candidate and fails(candidate):
                body = candidate
                shrunk = True
            else:
                start += chunk
        if not shrunk:
            chunk //= 2
    return body + quiet


# -- exhaustive exploration -----------------------------------------------------------------


@dataclass
class Bounds:
    """How far an exhaustive exploration goes: the choices per schedule, the preemptions
    (switches away from a delivery in flight) and the faults (a fault or a crash) in one."""

    depth: int = 30
    preemptions: int = 2
    faults: int = 1


@dataclass
class Exploration:
    scenario: str
    schedules: int = 0
    steps: int = 0
    distinct: int = 0
    pruned: int = 0
    deepest: int = 0
    seconds: float = 0.0
    complete: bool = False
    failure: Result | None = None


class _Bounded:
    """The chooser of one schedule of a depth-first exploration: it follows ``prefix``
    (indices into the options each point allows), then the first allowed option, and says
    how many each point allowed."""

    def __init__(self, prefix: list[int], bounds: Bounds, seen: set[str], budget: object) -> None:
        self.prefix = prefix
        self.bounds = bounds
        self.seen = seen
        self.budget = budget
        self.widths: list[int] = []
        self.taken: list[int] = []
        self.preemptions = 0
        self.faults = 0
        self.last: int | None = None
        self.pruned = False

    def allowed(self, world: World, options: Sequence[Option]) -> list[int]:
        running = {d.key for d in world.scheduler.in_flight()}
        current = self.last if self.last in running else None
        out = []
        for i, option in enumerate(options):
            preempts = current is not None and option.delivery != current
            faulty = option.group in ("fault", "crash")
            if preempts and self.preemptions >= self.bounds.preemptions:
                continue
            if faulty and self.faults >= self.bounds.faults:
                continue
            out.append(i)

        def order(i: int) -> tuple[int, int, int]:
            option = options[i]
            first = 0 if (current is not None and option.delivery == current) else 1
            return (GROUP_ORDER.index(option.group), first, i)

        return sorted(out, key=order)

    def choose(self, world: World, options: Sequence[Option]) -> int | None:
        depth = len(self.taken)
        if depth >= self.bounds.depth:
            return None
        if not world.scheduler.in_flight():
            key = world.hashed((self.preemptions, self.faults, depth >= len(self.prefix)))
            if depth >= len(self.prefix) and key in self.seen:
                self.pruned = True
                return None
            self.seen.add(key)
        allowed = self.allowed(world, options)
        if not allowed:
            return None
        k = self.prefix[depth] if depth < len(self.prefix) else 0
        if k >= len(allowed):
            return None
        index = allowed[k]
        option = options[index]
        running = {d.key for d in world.scheduler.in_flight()}
        if self.last in running and option.delivery != self.last:
            self.preemptions += 1
        if option.group in ("fault", "crash"):
            self.faults += 1
        if option.delivery is not None:
            self.last = option.delivery
        elif option.group == "deliver":
            self.last = None  # the new delivery's key is not known yet: the next step sets it
        self.widths.append(len(allowed))
        self.taken.append(k)
        return index


def explore(
    scenario: Scenario,
    bounds: Bounds,
    *,
    seed: int = 0,
    seconds: float = 60.0,
    settle: bool = True,
) -> Exploration:
    """Every schedule of ``scenario`` within ``bounds`` (depth first), until done or
    ``seconds`` pass; stops at the first schedule that violates an invariant."""
    report = Exploration(scenario.name)
    seen: set[str] = set()
    settled: set[str] = set()
    prefix: list[int] = []
    started = time.monotonic()
    while True:
        chooser = _Bounded(prefix, bounds, seen, None)
        result = run(
            scenario, chooser, seed=seed, steps=bounds.depth, settle=settle, settled=settled
        )
        report.schedules += 1
        report.steps += result.points
        report.deepest = max(report.deepest, len(chooser.taken))
        report.pruned += chooser.pruned
        if result.violation is not None:
            report.failure = result
            break
        # Backtrack: the deepest point with an option not yet tried.
        taken, widths = chooser.taken, chooser.widths
        depth = len(taken) - 1
        while depth >= 0 and taken[depth] + 1 >= widths[depth]:
            depth -= 1
        if depth < 0:
            report.complete = True
            break
        prefix = [*taken[:depth], taken[depth] + 1]
        if time.monotonic() - started > seconds:
            break
    report.distinct = len(seen)
    report.seconds = time.monotonic() - started
    return report


def scenario_named(name: str) -> Scenario:
    return SCENARIOS[name]


Check = Callable[[World], list[Violation]]
