"""The multi-region replay: AUTO choosing each attempt's region among those a job allows.

Each job allows 2 or 3 regions of one cloud, and meets in each the capacity of that region's
own traces (AWS us-east-1, us-east-2, us-west-2; GCP us-central1, us-east1):

* Spot: a preemption trace of the region, at the job's scale, at an offset of its own;
* DWS: an availability trace of the region at the job's scale, where there is one; where
  there is none (the GCP regions, us-east-1 for gangs) the region's Spot trace stands in, at
  the same offset (DWS there exactly when Spot is: the correlated case, at its harshest).
  The run's DWS model applies on top, as in the single-region replay.

The GCP traces have no 4-node probes, so GCP jobs hold one node; an AWS 1-node job may allow
only us-east-1 and us-west-2 (no 1-node us-east-2 preemption trace).

Multi-region AUTO is the product's ``decide_across_regions`` on the situation the lifecycle
builds (the attempts' documents name their ``location``); every attempt away from the home
region, where the checkpoint stays, reads it (``checkpoint_gb``, drawn per job) across
regions, charged at the product's default egress price, its transfer time lengthening that
attempt's billed restart. Single-region AUTO,
Uniform Progress, the ladder and on-demand run on the same jobs in their home region.
Prices are the table's (one region's list prices) in every region: savings come from
capacity, never from a price difference the table does not have.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.capacity.dws import DwsModel
from benchmarks.capacity.model import Job, Lifecycle, Plan, Result, Site, View, simulate
from benchmarks.capacity.policies import Auto, Ladder, OnDemand, UniformProgress
from benchmarks.capacity.traces import Replay, Trace
from benchmarks.capacity.workload.population import SCALES, draw_shape
from shared.domain.capacity.model import Prices
from shared.domain.capacity.regions import DEFAULT_EGRESS_USD_PER_GB, Regions, decide_across_regions
from shared.domain.policy.pricing import PriceTable

#: A checkpoint of this many GB (drawn per job): weights and optimizer state.
CHECKPOINT_GB = (5.0, 150.0)
MULTI = "AUTO, multi-region"
SINGLE = "AUTO"


@dataclass(frozen=True)
class Pool:
    """The traces of one region at one scale."""

    cloud: str
    location: str
    nodes: int
    spots: tuple[Trace, ...]
    flexes: tuple[Trace, ...]


def pools(traces: Sequence[Trace]) -> list[Pool]:
    """Every (cloud, region, scale) with a preemption trace, sorted."""
    out = []
    for nodes, (spot_prefix, flex_prefix) in SCALES.items():
        spots = [t for t in traces if t.name.startswith(spot_prefix)]
        flexes = [t for t in traces if t.name.startswith(flex_prefix)]
        for cloud, location in sorted({(t.cloud, t.location) for t in spots}):
            out.append(
                Pool(
                    cloud,
                    location,
                    nodes,
                    tuple(t for t in spots if t.location == location),
                    tuple(t for t in flexes if t.location == location and t.cloud == cloud),
                )
            )
    return out


def _site(rng: random.Random, pool: Pool) -> Site:
    trace = rng.choice(pool.spots)
    spot = Replay(trace, pool.nodes, rng.randrange(len(trace.values)))
    if pool.flexes:
        found = rng.choice(pool.flexes)
        flex = Replay(found, pool.nodes, rng.randrange(len(found.values)))
    else:
        flex = spot  # no DWS trace of the region: its Spot capacity stands in
    return Site(pool.location, spot, flex)


def population(traces: Sequence[Trace], count: int, seed: int) -> list[Job]:
    """``count`` jobs, each allowing 2-3 regions of one cloud (its home first)."""
    rng = random.Random(seed)
    by_shape: dict[tuple[str, int], list[Pool]] = {}
    for pool in pools(traces):
        by_shape.setdefault((pool.cloud, pool.nodes), []).append(pool)
    shapes = sorted(k for k, v in by_shape.items() if len(v) >= 2)
    jobs = []
    for i in range(count):
        work, deadline, overhead, interval, nodes = draw_shape(rng)
        choices = [k for k in shapes if k[1] == nodes] or [k for k in shapes if k[1] == 1]
        cloud, nodes = rng.choice(choices)
        found = by_shape[cloud, nodes]
        chosen = rng.sample(found, rng.randint(2, min(3, len(found))))
        jobs.append(
            Job(
                name=f"region-job-{i:04d}",
                work=work,
                deadline=deadline,
                overhead=overhead,
                interval=interval,
                nodes=nodes,
                sites=tuple(_site(rng, pool) for pool in chosen),
                tick_phase=rng.uniform(0.0, 60.0),
                seed=rng.getrandbits(32),
                checkpoint_gb=round(rng.uniform(*CHECKPOINT_GB), 1),
            )
        )
    return jobs


class MultiRegionAuto(Auto):
    """AUTO across the job's regions: ``decide_across_regions`` at every attempt boundary;
    at an on-demand attempt's checkpoints, ``switch_from_on_demand`` within its region (the
    lifecycle never moves a running attempt)."""

    name = MULTI

    def __init__(
        self,
        accelerator: str,
        table: PriceTable,
        egress_usd_per_gb: float = DEFAULT_EGRESS_USD_PER_GB,
    ) -> None:
        super().__init__(accelerator, table)
        self.egress = egress_usd_per_gb
        self.moves = 0

    def start(self, view: View) -> Plan:
        job = view.job
        regions = Regions(
            current=view.region,
            allowed=tuple(s.region for s in job.sites),
            checkpoint_gb=job.checkpoint_gb,
            egress_usd_per_gb=self.egress,
            gpus=job.nodes,
            seconds_per_gb=view.lifecycle.seconds_per_gb,
        )
        chosen = decide_across_regions(self.situation(view), regions)
        self.moves += chosen.region != view.region
        plan = self.plan(chosen.decision)
        return Plan(plan.strategy, plan.max_wait, plan.wait_until, plan.final, chosen.region)


@dataclass(frozen=True)
class Comparison:
    model: str
    jobs: int
    shares: dict[str, float]  # policy -> cost / on-demand's
    misses: dict[str, int]
    moves: float  # mean per job: attempts placed outside the checkpoint's region
    egress_usd: float  # mean per job

    @property
    def saving(self) -> float:
        """Multi-region AUTO's cost below single-region AUTO's, as a share of the latter."""
        return 1 - self.shares[MULTI] / self.shares[SINGLE]

    @property
    def factor(self) -> float:
        """Single-region AUTO's cost over multi-region AUTO's (SkyNomad's form: 1.25x...)."""
        return self.shares[SINGLE] / self.shares[MULTI]


def compare(
    jobs: Sequence[Job], model: DwsModel, accelerator: str, table: PriceTable, life: Lifecycle
) -> Comparison:
    prices = Prices.of(table, accelerator)
    multi = MultiRegionAuto(accelerator, table)
    runs: dict[str, list[Result]] = {
        p.name: [simulate(j, p, model, life) for j in jobs]
        for p in (OnDemand(), UniformProgress(), Ladder(), Auto(accelerator, table), multi)
    }
    egress = multi.egress
    base = sum(r.cost(prices) for r in runs[OnDemand.name])
    return Comparison(
        model=model.name,
        jobs=len(jobs),
        shares={k: sum(r.cost(prices, egress) for r in v) / base for k, v in runs.items()},
        misses={k: sum(r.missed for r in v) for k, v in runs.items()},
        moves=multi.moves / len(jobs),
        egress_usd=sum(r.egress_gb for r in runs[MULTI]) * egress / len(jobs),
    )
