"""A seeded mix of deadline jobs over the traces: the workload ``./dev bench capacity`` replays.

Each job draws, uniformly and from one seed:

* its work, 4 to 48 h; a checkpoint every 10 min to 2 h; a restart of 2 to 15 min;
* its deadline, 1.05x to 4x the work, and never before an on-demand run started at once would
  end (intake refuses such a request: ``deadline: cannot be met even on on-demand``);
* its shape: a 1-node job, or (one in three) a 4-node gang, which needs all four nodes at
  once and is preempted when any one is;
* its capacity: a preemption trace of its scale (1-node, or the 4-node probes) at a random
  offset for Spot, and an availability trace of its scale (1-node, or the 16-node probes
  for 4 nodes) at another for DWS;
* where the scheduler's minute tick falls for it, and the seed of its backoff's jitter.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from benchmarks.capacity.model import HOUR, Job, Site
from benchmarks.capacity.traces import Replay, Trace

WORK_HOURS = (4.0, 48.0)
CHECKPOINT_MINUTES = (10.0, 120.0)
RESTART_MINUTES = (2.0, 15.0)
DEADLINE_FACTORS = (1.05, 4.0)
GANG_SHARE = 1 / 3
GANG_NODES = 4
#: (preemption traces, availability traces) for each job shape.
SCALES = {
    1: ("preemption/1-node/", "availability/1-node/"),
    GANG_NODES: ("preemption/4-node/", "availability/16-node/"),
}


def _minutes(rng: random.Random, bounds: tuple[float, float]) -> float:
    """A duration in whole minutes (the envelope's fields are integers)."""
    return 60.0 * round(rng.uniform(*bounds))


def draw_shape(rng: random.Random) -> tuple[float, float, float, float, int]:
    """(work, deadline, restart, checkpoint interval, nodes) of one job."""
    work = 60.0 * round(rng.uniform(*WORK_HOURS) * 60)
    interval = _minutes(rng, CHECKPOINT_MINUTES)
    overhead = _minutes(rng, RESTART_MINUTES)
    factor = rng.uniform(*DEADLINE_FACTORS)
    deadline = max(float(round(factor * work)), work + overhead)
    nodes = GANG_NODES if rng.random() < GANG_SHARE else 1
    return work, deadline, overhead, interval, nodes


def replay_of(rng: random.Random, traces: Sequence[Trace], nodes: int) -> Replay:
    trace = rng.choice(list(traces))
    return Replay(trace, nodes, rng.randrange(len(trace.values)))


def population(traces: Sequence[Trace], count: int, seed: int) -> list[Job]:
    """``count`` jobs drawn from ``seed``: the same jobs for every policy and DWS model."""
    rng = random.Random(seed)
    by_scale = {
        nodes: (
            [t for t in traces if t.name.startswith(spot)],
            [t for t in traces if t.name.startswith(flex)],
        )
        for nodes, (spot, flex) in SCALES.items()
    }
    jobs = []
    for i in range(count):
        work, deadline, overhead, interval, nodes = draw_shape(rng)
        spots, flexes = by_scale[nodes]
        spot = replay_of(rng, spots, nodes)
        flex = replay_of(rng, flexes, nodes)
        jobs.append(
            Job(
                name=f"job-{i:04d}",
                work=work,
                deadline=deadline,
                overhead=overhead,
                interval=interval,
                nodes=nodes,
                sites=(Site(spot.trace.location, spot, flex),),
                tick_phase=rng.uniform(0.0, 60.0),
                seed=rng.getrandbits(32),
            )
        )
    return jobs


def describe(jobs: Sequence[Job]) -> str:
    """One line on the mix, for the report."""
    gangs = sum(j.nodes > 1 for j in jobs)
    works = sorted(j.work / HOUR for j in jobs)
    factors = sorted(j.factor for j in jobs)
    return (
        f"{len(jobs)} jobs ({gangs} gangs of {GANG_NODES}): work {works[0]:.0f}-{works[-1]:.0f} h, "
        f"deadlines {factors[0]:.2f}-{factors[-1]:.2f}x the work, checkpoints every "
        f"{CHECKPOINT_MINUTES[0]:.0f}-{CHECKPOINT_MINUTES[1]:.0f} min, restarts "
        f"{RESTART_MINUTES[0]:.0f}-{RESTART_MINUTES[1]:.0f} min"
    )
