"""Spot serving on real preemption traces (a script, not a test): ``./dev bench serving``.

Replays the preemption traces of "Can't Be Late" (NSDI 2024; ``../shared/traces/``, GCP and
AWS zones) for a deployment of N required replicas (N = 1 on the 1-node traces, N = 4 on the
4-node traces) over each trace's whole length, minute by minute, under four policies:

* **always on-demand**: N on-demand replicas, never reclaimed (on-demand stockouts are not
  modelled: this is the baseline every cost is compared with);
* **plain Spot** (flexjobs today): N Spot replicas deployed once; nothing follows them;
* **Spot + hedging** (the product): N Spot replicas, and
  :func:`shared.domain.serving.rule.decide` called exactly as the tick will call it: one
  ``GetEndpoint`` read a minute, the one call the action names applied, the state written
  after it;
* **over-provisioned Spot (N+1)**: N+1 Spot replicas deployed once.

Then, on the same minutes, the designs that could meet issue 24's targets, each in one
comparison table (:func:`print_comparison`: per trace group, the worst trace's shares, the
mean and max cost, the targets computed) with the cost bound each implies:

* **hedging under the best** ``--sensitivity`` **settings**: the product's rule, as above;
* **a warm on-demand standby** (:func:`standby`, a model of a design not built): one
  on-demand replica always deployed, with a share by replicas or at 0% until Spot is short;
  traffic follows the replicas at the next tick, the standby grows to the deficit
  (``MutateDeployedModel``, :data:`GROW_SECONDS`) and shrinks back after the hold;
* **Spot spread over the region's zones** plus the product's rule (:class:`ZonedPool`: the
  best case of Vertex's placement, an assumption), and **Spot fallback first** (the rule's
  hedge deployed as Spot in another zone with capacity, on-demand only when none has; a model
  of a design not built), on the traces whose collection holds other zones of their region
  (:func:`regions`: GCP us-central1 a/b/c and the AWS 1-node traces).

Then the cost-availability frontier of issue 39 (:func:`frontier`, :func:`print_frontier`,
:func:`plot_frontier`): every combination of objective mode's knobs
(:class:`~shared.domain.serving.objective.ServingPolicy`: a warm on-demand floor of k of the N
replicas, e extra Spot replicas, the hedge on or off; :func:`knob_grid`) replayed on every
trace by the same :func:`hedged` replay, beside SkyServe's SpotHedge (its dynamic on-demand
fallback over N + e Spot replicas, :func:`skyserve_fallback`). Objective mode is judged held
out: the table it chooses from (:func:`learned_table`) is measured on every other trace of
each group (:func:`halves`), and its choices are replayed on the others
(:func:`print_objective_mode`; then with the halves swapped). ``--write-table`` writes that
table where the functions read it (``shared/domain/serving/policy_table.json``).

The model, worst case wherever a choice flatters:

* **Capacity** at each minute is the *lowest* trace value within that minute (a 30-second dip
  counts), scaled to the replicas asked for: a probe of P nodes still holding v grants
  ``floor(M * v / P)`` of M replicas, so preemptions hit a zone's replicas together (an
  N+1th replica in the same zone shares its fate).
* **A reclaimed Spot node** is restarted by Compute Engine: an attempt every
  :data:`RESTART_INTERVAL` seconds, up to :data:`RESTART_ATTEMPTS` (six); an attempt that finds
  capacity boots the node, which serves :data:`RESTART_BOOT` seconds later (VM, container,
  model load). After six failed attempts the node stays down until capacity returns, and is
  then placed anew, serving :data:`REPLACE_SECONDS` later.
* **An on-demand fallback** (a hedge's ``DeployModel``, or a ``MutateDeployedModel`` that grows
  it) serves :data:`DEPLOY_SECONDS` after the call (the slow end of a GPU DeployModel); the
  endpoint lists it only once its operation is done. A split or an undeploy takes effect at
  the call.
* **Each minute**, capacity moves first, then serving is measured, then the tick reads and
  acts: what a tick does counts from the next minute.
* **Serving**: the available replicas of the models that get traffic. "All required" means
  at least N of them and no share of traffic sent to a model of ours without a replica; "at
  least one" means one replica with traffic.
* **Billing**: a Spot node from its (re)start to its reclaim, an on-demand replica from the
  call that deploys it to its undeploy, priced per node-hour from
  ``shared/domain/policy/prices.yaml`` (one GPU per node: :data:`ACCELERATOR` on its machine).
* **A warm floor** is deployed before the trace and billed every minute; on-demand is never
  reclaimed (as always-on-demand's). Traffic between the Spot model and the floor follows the
  replicas each serves at each tick, so a Spot loss starves its share for the minute before.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.capacity.traces import DEFAULT_TRACES, Trace
from shared.adapters.packaged_prices import load_packaged_prices
from shared.adapters.serving_table import FILE_NAME, encode_table, load_policy_table
from shared.domain.policy.pricing import PriceTable
from shared.domain.serving.model import (
    ActionKind,
    CallKind,
    MachineSpec,
    ObservedEndpoint,
    ObservedModel,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.objective import (
    AvailabilityObjective,
    Choice,
    Measured,
    PolicyTable,
    ServingPolicy,
    choose,
    cost_floor,
    default_policy,
)
from shared.domain.serving.rule import answered as rule_answered
from shared.domain.serving.rule import decide, new_state
from shared.domain.serving.split import hedged_split

MINUTE = 60
TICK_SECONDS = 60
RESTART_INTERVAL = 60
RESTART_ATTEMPTS = 6
RESTART_BOOT = 300
REPLACE_SECONDS = 900
DEPLOY_SECONDS = 1200
#: The serving accelerator priced: an L4 on g2-standard-4 (one GPU a node), a usual serving
#: machine; ``--accelerator`` prices another row.
ACCELERATOR = "NVIDIA_L4"
QUICK_MINUTES = 24 * 60
DEFAULT_OUTPUT = Path(tempfile.gettempdir()) / "flexjobs-bench"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SPOT_ID, FALLBACK_ID = "1", "2"
MACHINE = MachineSpec("g2-standard-4", ACCELERATOR, 1)
GROUPS = (("preemption/1-node/", 1), ("preemption/4-node/", 4))
#: The product today: N Spot replicas and the reactive hedge (no floor, no extra Spot).
HEDGING = ServingPolicy()


# --- capacity -------------------------------------------------------------------------------


def minute_values(trace: Trace, limit: int | None = None) -> list[int]:
    """The trace's lowest value within each whole minute of its length."""
    length = int(len(trace.values) * trace.gap)
    minutes = length // MINUTE if limit is None else min(length // MINUTE, limit)
    out: list[int] = []
    for m in range(minutes):
        first = int(m * MINUTE // trace.gap)
        last = int(((m + 1) * MINUTE - 1) // trace.gap)
        out.append(min(trace.values[first : last + 1]))
    return out


def granted(value: int, probe: int, replicas: int) -> int:
    """Spot replicas of ``replicas`` a zone grants when its probe of ``probe`` holds ``value``."""
    return replicas * value // probe


@dataclass
class Node:
    """One Spot replica: UP, BOOTING until ``ready``, DOWN (restarts left), or EXHAUSTED."""

    status: str = "UP"
    ready: int = 0
    attempts: int = 0
    next_attempt: int = 0


class SpotPool:
    """The Spot nodes of one deployed model, as Compute Engine restarts them."""

    def __init__(self, replicas: int) -> None:
        self.nodes = [Node() for _ in range(replicas)]

    def holding(self) -> int:
        return sum(n.status in ("UP", "BOOTING") for n in self.nodes)

    def step(self, t: int, capacity: int) -> None:
        held = self.holding()
        # Reclaim what the zone no longer grants, booting nodes first.
        for node in sorted(self.nodes, key=lambda n: n.status != "BOOTING"):
            if held <= capacity:
                break
            if node.status in ("UP", "BOOTING"):
                node.status, node.attempts, node.next_attempt = "DOWN", 0, t + RESTART_INTERVAL
                held -= 1
        for node in self.nodes:
            if node.status == "DOWN" and node.next_attempt <= t:
                if held < capacity:
                    node.status, node.ready = "BOOTING", t + RESTART_BOOT
                    held += 1
                else:
                    node.attempts += 1
                    node.next_attempt = t + RESTART_INTERVAL
                    if node.attempts >= RESTART_ATTEMPTS:
                        node.status = "EXHAUSTED"
            elif node.status == "EXHAUSTED" and held < capacity:
                node.status, node.ready = "BOOTING", t + REPLACE_SECONDS
                held += 1
            if node.status == "BOOTING" and node.ready <= t:
                node.status = "UP"

    def available(self) -> int:
        return sum(n.status == "UP" for n in self.nodes)


class ZonedPool:
    """The Spot nodes of one deployed model spread over a region's zones, zone 0 first.

    Vertex chooses the zones of a deployed model's nodes and documents no rule for it, so
    this is an assumption in spread's favour: the nodes start spread round-robin over the
    zones (N = 1 has one node, in zone 0), each zone reclaims and restarts its own nodes as
    :class:`SpotPool` does, and a node whose restart in its zone fails is placed anew at
    once in the other zone with the most spare capacity, if one has any, serving
    :data:`REPLACE_SECONDS` later (without waiting for its six restarts): Vertex is taken
    to know at once where capacity is.
    """

    def __init__(self, zones: int, replicas: int) -> None:
        self.zones = [SpotPool(0) for _ in range(zones)]
        for i in range(replicas):
            self.zones[i % zones].nodes.append(Node())

    def holding(self) -> int:
        return sum(z.holding() for z in self.zones)

    def available(self) -> int:
        return sum(z.available() for z in self.zones)

    def step(self, t: int, capacities: Sequence[int]) -> None:
        for zone, capacity in zip(self.zones, capacities, strict=True):
            zone.step(t, capacity)
        for home, zone in enumerate(self.zones):
            failed = [n for n in zone.nodes if n.status == "EXHAUSTED" or n.status == "DOWN"]
            for node in [n for n in failed if n.status == "EXHAUSTED" or n.attempts]:
                # Its own zone is left to its restarts (5 minutes, not a new placement's 15).
                spare = {
                    i: c - z.holding()
                    for i, (z, c) in enumerate(zip(self.zones, capacities, strict=True))
                    if i != home
                }
                best = max(spare, key=lambda i: spare[i], default=None)
                if best is None or spare[best] <= 0:
                    continue
                zone.nodes.remove(node)
                self.zones[best].nodes.append(Node("BOOTING", t + REPLACE_SECONDS))


# --- one replay -----------------------------------------------------------------------------


@dataclass
class Run:
    """What one policy did on one trace."""

    policy: str
    trace: str
    required: int
    minutes: int = 0
    full: int = 0
    any: int = 0
    spot_node_seconds: float = 0.0
    on_demand_node_seconds: float = 0.0
    hedges: int = 0
    series: list[tuple[int, int, int]] = field(default_factory=list)  # (capacity, spot, od)
    hedge_minutes: list[int] = field(default_factory=list)
    #: The knobs replayed (:class:`ServingPolicy`), for the runs of :func:`hedged`.
    knobs: ServingPolicy | None = None
    #: The warm floor's on-demand node-seconds (part of ``on_demand_node_seconds``).
    warm_node_seconds: float = 0.0
    #: Spells of minutes with no replica serving: how many, the longest, the one running;
    outages: int = 0
    longest_outage: int = 0
    dark: int = 0
    #: and the same for minutes short of all required replicas.
    short_spells: int = 0
    longest_short: int = 0
    shortfall: int = 0
    #: The minute-by-minute series is kept for the plots of the four policies only: the knob
    #: grid replays hundreds of runs, whose series would hold millions of tuples.
    keep_series: bool = True

    def measure(self, serving: int, starved: bool, spot: int, on_demand: int, cap: int) -> None:
        whole = serving >= self.required and not starved
        self.minutes += 1
        self.full += whole
        self.any += serving >= 1
        self.dark = 0 if serving >= 1 else self.dark + 1
        self.outages += self.dark == 1
        self.longest_outage = max(self.longest_outage, self.dark)
        self.shortfall = 0 if whole else self.shortfall + 1
        self.short_spells += self.shortfall == 1
        self.longest_short = max(self.longest_short, self.shortfall)
        if self.keep_series:
            self.series.append((cap, spot, on_demand))

    def cost(self, spot_rate: float, standard_rate: float) -> float:
        """USD for the whole trace at these per-node-hour prices."""
        hours = 3600.0
        return (
            self.spot_node_seconds * spot_rate + self.on_demand_node_seconds * standard_rate
        ) / hours

    def vs_on_demand(self, spot_rate: float, standard_rate: float) -> float:
        base = self.required * self.minutes * MINUTE * standard_rate / 3600.0
        return self.cost(spot_rate, standard_rate) / base

    def shares(self) -> tuple[float, float]:
        """Spot and on-demand node-hours per node-hour of always-on-demand: the run costs
        ``r * spot + on_demand`` of always-on-demand at Spot/on-demand r."""
        base = self.required * self.minutes * MINUTE
        return self.spot_node_seconds / base, self.on_demand_node_seconds / base


def always_on_demand(name: str, caps: list[int], probe: int, n: int) -> Run:
    """N on-demand replicas: a warm floor of all N (:func:`default_policy`), no Spot model."""
    return hedged(
        name, caps, probe, n, ServingSettings(), label="always on-demand", knobs=default_policy(n)
    )


def spot_only(name: str, caps: list[int], probe: int, n: int, extra: int, label: str) -> Run:
    """N + ``extra`` Spot replicas deployed once; nothing follows them."""
    return hedged(
        name, caps, probe, n, ServingSettings(), label=label, knobs=ServingPolicy(0, extra, False)
    )


@dataclass
class Fallback:
    """The fallback on the simulated endpoint: its replicas and when each serves. On-demand
    (``ready``), or Spot in another zone (``pool``, that zone's nodes, restarted as any)."""

    display_name: str
    ready: list[int]  # the time each on-demand replica serves
    listed_at: int  # when its DeployModel operation is done and GetEndpoint lists it
    pool: SpotPool | None = None
    zone: int = 0

    def available(self, t: int) -> int:
        if self.pool is not None:
            return self.pool.available()
        return sum(r <= t for r in self.ready)

    def replicas(self) -> int:
        return len(self.pool.nodes) if self.pool is not None else len(self.ready)

    def grow(self, replicas: int, ready: int) -> None:
        """``MutateDeployedModel`` to ``replicas``: the replicas added serve at ``ready``."""
        more = max(replicas - self.replicas(), 0)
        if self.pool is not None:
            self.pool.nodes.extend(Node("BOOTING", ready) for _ in range(more))
        else:
            self.ready.extend([ready] * more)


def deployed(name: str, replicas: int, t: int, zone: int | None, seconds: int) -> Fallback:
    """The fallback a ``DeployModel`` at ``t`` puts on the endpoint, listed and serving
    ``seconds`` later: on-demand, or Spot in ``zone`` (its nodes billed from the call)."""
    fallback = Fallback(name, [], t + seconds)
    if zone is None:
        fallback.ready = [t + seconds] * replicas
    else:
        fallback.pool, fallback.zone = SpotPool(0), zone
    fallback.grow(replicas, t + seconds)
    return fallback


def spot_zone(region: Sequence[int], probe: int, replicas: int) -> int | None:
    """The zone a Spot fallback goes to: of the region's other zones (``region[0]`` is the
    Spot model's), the one with the most capacity at the call, if it grants all ``replicas``
    (an assumption in the design's favour: Vertex is told, or finds, the zone); else None,
    and the fallback is on-demand."""
    others = range(1, len(region))
    best = max(others, key=lambda z: region[z], default=None)
    if best is None or granted(region[best], probe, replicas) < replicas:
        return None
    return best


#: The warm on-demand floor's deployed model on the simulated endpoint.
FLOOR_ID = "4"


@dataclass
class Endpoint:
    """The simulated endpoint of one replay: the Spot model, the warm on-demand floor beside
    it (``floor`` replicas, never reclaimed), and the fallback.

    ``split`` is the traffic as the product's rule sees it, where the Spot model and the floor
    are one *warm pair* (``SPOT_ID``, required N, serving their sum): that is the deficit the
    product hedges, N - (Spot available + floor available). ``served`` is the endpoint's own
    split, each model's share: the pair's share divided between the Spot model and the floor
    by the replicas each serves, at each tick (:meth:`follow`), as the standby's is. Without a
    floor the two are the same.
    """

    required: int
    floor: int
    pool: SpotPool | ZonedPool
    fallback: Fallback | None = None
    split: dict[str, int] = field(default_factory=lambda: {SPOT_ID: 100})
    served: dict[str, int] = field(default_factory=dict)

    def read(self, t: int) -> ObservedEndpoint:
        """What one ``GetEndpoint`` shows the rule: the warm pair, and the fallback once its
        DeployModel is done."""
        pair = self.pool.available() + self.floor
        models = [ObservedModel(SPOT_ID, "m", FLEXJOBS_NAME, MACHINE, True, self.required, pair)]
        fallback = self.fallback
        if fallback is not None and fallback.listed_at <= t:
            # Reported as on-demand even when the model deploys it as Spot: the rule adopts
            # its fallback by display name among on-demand models, and knows no other kind.
            models.append(
                ObservedModel(
                    FALLBACK_ID,
                    "m",
                    fallback.display_name,
                    MACHINE,
                    False,
                    fallback.replicas(),
                    fallback.available(t),
                )
            )
        listed = {m.id for m in models}
        split = {k: v for k, v in self.split.items() if k in listed}
        return ObservedEndpoint("e", tuple(models), split)

    def follow(self) -> None:
        """The endpoint's split from the rule's: the pair's share divided by the replicas the
        Spot model and the floor serve now (unchanged when neither serves)."""
        if not self.floor:
            self.served = dict(self.split)
            return
        observed = ObservedEndpoint("e", (), self.split)
        moved = hedged_split(observed, (SPOT_ID, FLOOR_ID), (self.pool.available(), self.floor))
        self.served = dict(moved) if moved is not None else dict(self.split)

    def serving(self, t: int) -> tuple[int, bool, int, int]:
        """Replicas serving (of the models with traffic), whether a share goes to a model of
        ours with no replica, and the Spot and on-demand (floor + fallback) replicas up."""
        spot_up = self.pool.available()
        fallback_up = self.fallback.available(t) if self.fallback else 0
        served = [
            (spot_up, self.served.get(SPOT_ID, 0)),
            (self.floor, self.served.get(FLOOR_ID, 0)),
            (fallback_up, self.served.get(FALLBACK_ID, 0)),
        ]
        serving = sum(up for up, share in served if share > 0)
        starved = any(share > 0 and up == 0 for up, share in served)
        return serving, starved, spot_up, self.floor + fallback_up


#: The display name the replays give the Spot model (a flexjobs tag, as the product's).
FLEXJOBS_NAME = "served [flexjobs b]"
#: SkyServe's dynamic fallback on the simulated endpoint (one on-demand model it resizes).
SKYSERVE_NAME = "served [flexjobs b] (SkyServe on-demand)"


def skyserve_fallback(endpoint: Endpoint, knobs: ServingPolicy, t: int, seconds: int) -> bool:
    """One decision of SkyServe's dynamic on-demand fallback (SpotHedge, EuroSys 2025), on
    the simulated endpoint, and the traffic split it leaves; True when it added on-demand
    replicas.

    Modelled on ``FallbackRequestRateAutoscaler`` (skypilot-org/skypilot,
    ``sky/serve/autoscalers.py``, ``_generate_scaling_decisions``) and its docs
    (docs.skypilot.co, *Using Spot Instances for Serving*), with ``base_ondemand_fallback_
    replicas`` = the floor, ``num_overprovision`` = ``extra_spot``:

    * Spot replicas to keep: ``num_spot_to_provision = target + num_overprovision -
      base_ondemand_fallback_replicas`` (:meth:`ServingPolicy.spot_replicas`);
    * on-demand replicas: ``base + max(0, num_spot_to_provision - num_ready_spot)``, capped at
      the target ("we don't launch on-demand fallback for overprovisioned replicas"). It
      counts *ready* Spot replicas, so a booting Spot node is covered too, and an
      over-provisioned replica lost is covered even while N Spot replicas serve;
    * no grace and no hold: it decides every ``AUTOSCALER_DEFAULT_DECISION_INTERVAL_SECONDS``
      (20 s; here the tick's minute), and "when the spot replicas are ready, SkyServe will
      automatically scale down on-demand replicas", provisioning ones first
      (``scale_down_decision_order``).

    On Vertex a new on-demand replica is a DeployModel (the first) or a MutateDeployedModel,
    serving ``seconds`` later; a scale-down takes effect at the call. SpotHedge also spreads
    Spot over regions and clouds; the traces here give one zone per deployment (the spread
    designs of :func:`designs` model a region's zones), so its over-provisioned replicas share
    their zone's fate, as the other policies' do.
    """
    n, floor = endpoint.required, knobs.min_on_demand
    ready_spot = endpoint.pool.available()
    wanted = min(floor + max(0, knobs.spot_replicas(n) - ready_spot), n) - floor
    fallback = endpoint.fallback
    have = fallback.replicas() if fallback else 0
    added = wanted > have
    if added and fallback is None:
        endpoint.fallback = deployed(SKYSERVE_NAME, wanted, t, None, seconds)
    elif added and fallback is not None:
        fallback.grow(wanted, t + seconds)
    elif fallback is not None and wanted < have:
        # The replicas still provisioning go first; the rest serve until the call.
        fallback.ready = sorted(fallback.ready)[:wanted]
        if not wanted:
            endpoint.fallback = None
    # Its load balancer sends requests to the ready replicas: traffic follows them.
    up = endpoint.fallback.available(t) if endpoint.fallback else 0
    observed = ObservedEndpoint("e", (), endpoint.split)
    weights = (endpoint.pool.available() + floor, up)
    moved = hedged_split(observed, (SPOT_ID, FALLBACK_ID), weights)
    endpoint.split = dict(moved) if moved is not None else endpoint.split
    return added


def hedged(
    name: str,
    caps: list[int],
    probe: int,
    n: int,
    cfg: ServingSettings,
    deploy_seconds: int = DEPLOY_SECONDS,
    label: str = "Spot + hedging",
    zones: Sequence[list[int]] = (),
    spread: bool = False,
    spot_fallback: bool = False,
    knobs: ServingPolicy = HEDGING,
    skyserve: bool = False,
    keep_series: bool = True,
) -> Run:
    """Spot with the product's rule: a read, a decision, its call, then the write.

    ``knobs`` are objective mode's (:class:`ServingPolicy`; the default is the product today,
    N Spot replicas and the hedge). The Spot model asks for ``n - min_on_demand +
    extra_spot`` replicas, all in its zone (they share its fate); a warm on-demand floor of
    ``min_on_demand`` replicas is deployed beside it for the whole trace (serving from before
    it, billed every minute); with ``hedge`` the product's rule hedges the deficit N - (Spot +
    floor) (see :class:`Endpoint`), else nothing follows the Spot model but the split. With
    ``skyserve``, SkyServe's dynamic fallback (:func:`skyserve_fallback`) replaces the rule.

    ``zones`` are the region's other zones' capacities, minute by minute (the same trace
    collection, so the same minutes): with ``spread``, the Spot model's nodes are placed over
    the region as :class:`ZonedPool` models it; with ``spot_fallback``, the rule's hedge is
    deployed as Spot in another zone that has capacity at the call, on-demand only when none
    has (a design not built: the product's DeployModel is on-demand).
    """
    run = Run(label, name, n, knobs=knobs, keep_series=keep_series)
    spot = knobs.spot_replicas(n)
    pool: SpotPool | ZonedPool = ZonedPool(1 + len(zones), spot) if spread else SpotPool(spot)
    endpoint = Endpoint(n, knobs.min_on_demand, pool)
    endpoint.follow()
    state: ServingState | None = None
    for m, value in enumerate(caps):
        t = m * MINUTE
        region = [value, *(z[m] for z in zones)]
        if isinstance(pool, ZonedPool):
            pool.step(t, [granted(v, probe, spot) for v in region])
        else:
            pool.step(t, granted(value, probe, spot))
        fallback = endpoint.fallback
        if fallback is not None and fallback.pool is not None:
            fallback.pool.step(t, granted(region[fallback.zone], probe, fallback.replicas()))
        run.measure(*endpoint.serving(t), granted(value, probe, n))
        run.spot_node_seconds += pool.holding() * MINUTE
        run.warm_node_seconds += endpoint.floor * MINUTE
        run.on_demand_node_seconds += endpoint.floor * MINUTE
        if knobs.hedge and skyserve:
            if skyserve_fallback(endpoint, knobs, t, deploy_seconds):
                run.hedges += 1
                run.hedge_minutes.append(m)
        elif knobs.hedge:
            state = follow_rule(
                endpoint, state, run, m, region, probe, cfg, deploy_seconds, spot_fallback
            )
        endpoint.follow()
        # Billed from the call that deploys a replica to its undeploy (worst case: the minute
        # of the call counts whole).
        fallback = endpoint.fallback
        if fallback is not None and fallback.pool is not None:
            run.spot_node_seconds += fallback.pool.holding() * MINUTE
        elif fallback is not None:
            run.on_demand_node_seconds += len(fallback.ready) * MINUTE
    return run


def follow_rule(
    endpoint: Endpoint,
    state: ServingState | None,
    run: Run,
    m: int,
    region: Sequence[int],
    probe: int,
    cfg: ServingSettings,
    deploy_seconds: int,
    spot_fallback: bool,
) -> ServingState:
    """One tick of the product's serving machine on the simulated endpoint: a read, the
    decision, its call applied (and answered at once: the replay's calls are never lost);
    the state to write. The one place the replays call
    :func:`shared.domain.serving.rule.decide`. The warm pair (the Spot model and the floor,
    :class:`Endpoint`) is the machine's Spot model: its deficit is the one hedged."""
    t = m * MINUTE
    now = EPOCH + timedelta(seconds=t)
    observed = endpoint.read(t)
    if state is None:
        state = new_state(FLEXJOBS_NAME, endpoint.required, ServingPolicy(), now)
    action = decide(state, observed, now, cfg)
    if action.transition == "pause":
        raise AssertionError(f"the machine paused on its own moves: {action.reason}")
    call = action.call
    after = action.state
    if action.kind is ActionKind.TRAFFIC and action.split is not None:
        endpoint.split = dict(action.split)
    elif call is not None:
        if call.kind is CallKind.DEPLOY_FALLBACK:
            zone = spot_zone(region, probe, call.replicas) if spot_fallback else None
            endpoint.fallback = deployed(call.target, call.replicas, t, zone, deploy_seconds)
            run.hedges += 1
            run.hedge_minutes.append(m)
        elif call.kind is CallKind.MUTATE and endpoint.fallback is not None:
            endpoint.fallback.grow(call.replicas, t + deploy_seconds)
        elif call.kind is CallKind.UNDEPLOY:
            endpoint.fallback = None
            endpoint.split.pop(FALLBACK_ID, None)
        answered = rule_answered(after, call, f"operations/{m}")
        after = answered[0] if answered is not None else after
    return after


#: ``MutateDeployedModel`` adding replicas to a deployed model: Vertex publishes no latency
#: for it, and each replica it adds is a new node provisioned as a DeployModel's are (a VM, the
#: container pulled, the model loaded), so its slow end is taken as DeployModel's, never as
#: fast as a restarted node's boot (:data:`RESTART_BOOT`). An assumption, the worst case.
GROW_SECONDS = DEPLOY_SECONDS
STANDBY_ID = "3"


def standby(
    name: str, caps: list[int], probe: int, n: int, cfg: ServingSettings, proportional: bool
) -> Run:
    """A warm on-demand standby, **a model of a design not built yet** (the product's rule
    undeploys its fallback after the hold, and would adopt a standby as one).

    One on-demand replica is deployed on the endpoint beside the N Spot replicas, and billed,
    for the whole trace. ``proportional``: it always takes a share of the traffic in proportion
    to its replicas; else it gets 0% until Spot is short. Each tick, traffic follows the
    replicas each model can serve (the product's :func:`~shared.domain.serving.split.
    hedged_split`, one ``UpdateEndpoint``), so a Spot loss moves its share to the standby at
    the next minute. Once Spot has been short for the grace period (the rule's hedge timing),
    the standby is grown to the deficit (``MutateDeployedModel``, serving
    :data:`GROW_SECONDS` later, billed from the call); once Spot has served all its replicas
    for the hold period, it is shrunk back to one replica (at the call) and, at 0%, its traffic
    goes back to Spot.
    """
    label = "warm standby, share by replicas" if proportional else "warm standby at 0%"
    run = Run(f"{label} (model)", name, n)
    pool = SpotPool(n)
    ready = [0]  # the standby's replicas, the time each serves: the first was there before
    ours = (SPOT_ID, STANDBY_ID)
    split: dict[str, int] = {SPOT_ID: 100}
    if proportional:
        split = dict(hedged_split(ObservedEndpoint("e", (), split), ours, (n, 1)) or split)
    short_since: int | None = None
    # Spot served all its replicas long before the trace: the standby starts at its base.
    healthy_since: int | None = -int(cfg.hold_seconds)
    for m, value in enumerate(caps):
        t = m * MINUTE
        pool.step(t, granted(value, probe, n))
        spot_up = pool.available()
        standby_up = sum(r <= t for r in ready)
        served = [(spot_up, split.get(SPOT_ID, 0)), (standby_up, split.get(STANDBY_ID, 0))]
        serving = sum(up for up, share in served if share > 0)
        starved = any(share > 0 and up == 0 for up, share in served)
        run.measure(serving, starved, spot_up, standby_up, granted(value, probe, n))
        run.spot_node_seconds += pool.holding() * MINUTE
        # The tick: one read, then at most one change of traffic and one of size.
        if spot_up < n:
            short_since = t if short_since is None else short_since
            healthy_since = None
        else:
            healthy_since = t if healthy_since is None else healthy_since
            short_since = None
        restored = healthy_since is not None and t - healthy_since >= cfg.hold_seconds
        if proportional or not restored:
            observed = ObservedEndpoint("e", (), split)
            moved = hedged_split(observed, ours, (spot_up, standby_up))
            if moved is not None:
                split = dict(moved)
        elif split.get(STANDBY_ID, 0) and spot_up:
            split = {SPOT_ID: 100}
        if short_since is not None and t - short_since >= cfg.grace_seconds:
            grow = n - spot_up - len(ready)
            if grow > 0:
                ready.extend([t + GROW_SECONDS] * grow)
        if restored and len(ready) > 1:
            del ready[1:]
        run.on_demand_node_seconds += len(ready) * MINUTE
    return run


def policies(name: str, caps: list[int], probe: int, n: int, cfg: ServingSettings) -> list[Run]:
    return [
        always_on_demand(name, caps, probe, n),
        spot_only(name, caps, probe, n, 0, "plain Spot"),
        hedged(name, caps, probe, n, cfg),
        spot_only(name, caps, probe, n, 1, f"Spot N+1 ({n + 1})"),
    ]


def load(traces: Path) -> list[tuple[Trace, int]]:
    found = sorted(traces.rglob("*.json"))
    if not found:
        raise SystemExit(f"no traces under {traces}; pass --traces or set FLEXJOBS_TRACES")
    loaded = []
    for path in found:
        trace = Trace.load(path, traces)
        for prefix, probe in GROUPS:
            if trace.name.startswith(prefix):
                loaded.append((trace, probe))
    return loaded


# --- the report -----------------------------------------------------------------------------


def short(name: str) -> str:
    """``preemption/4-node/aws-08-03-2023/us-west-2c_v100_1.json`` -> ``4n aws us-west-2c v100``."""
    parts = name.removesuffix(".json").split("/")
    zone, _, machine = parts[-1].partition("_")
    return f"{parts[1].split('-')[0]}n {parts[2].split('-')[0]} {zone} {machine.split('_')[0]}"


def print_report(runs: list[Run], prices: PriceTable, accelerator: str, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 130))
    rates = prices.rates[accelerator]
    spot_rate, standard_rate = float(rates.spot), float(rates.standard)
    console.print(
        f"tick {TICK_SECONDS} s; grace {ServingSettings().grace_seconds:.0f} s, hold "
        f"{ServingSettings().hold_seconds:.0f} s; Spot restarts every {RESTART_INTERVAL} s up to "
        f"{RESTART_ATTEMPTS}, a restarted node serves {RESTART_BOOT // 60} min later, a node "
        f"placed anew {REPLACE_SECONDS // 60} min later; an on-demand DeployModel serves "
        f"{DEPLOY_SECONDS // 60} min after the call. Priced as {accelerator} "
        f"(one GPU a node, {MACHINE.machine_type}): ${standard_rate:.2f} on-demand, "
        f"${spot_rate:.2f} Spot per node-hour (Spot/on-demand {spot_rate / standard_rate:.2f})"
    )
    table = Table(title="Spot serving over the preemption traces (whole length, per minute)")
    for column in (
        "trace",
        "N",
        "hours",
        "policy",
        "all required",
        "at least one",
        "cost",
        "hedges",
    ):
        table.add_column(column, justify="left" if column in ("trace", "policy") else "right")
    for run in runs:
        table.add_row(
            short(run.trace),
            str(run.required),
            f"{run.minutes / 60:.0f}",
            run.policy,
            f"{run.full / run.minutes:.3%}",
            f"{run.any / run.minutes:.3%}",
            f"{run.vs_on_demand(spot_rate, standard_rate):.2f}x",
            str(run.hedges) if run.policy == "Spot + hedging" else "-",
        )
    console.print(table)
    hedging = [r for r in runs if r.policy == "Spot + hedging"]
    console.print("Acceptance (targets of issue 24, printed, not asserted):")
    for run in hedging:
        full, any_ = run.full / run.minutes, run.any / run.minutes
        ratio = run.vs_on_demand(spot_rate, standard_rate)
        marks = [
            ("at least one >= 99.9%", any_ >= 0.999, f"{any_:.3%}"),
            ("all required >= 99%", full >= 0.99, f"{full:.3%}"),
            ("cost <= 0.5x", ratio <= 0.5, f"{ratio:.2f}x"),
        ]
        cells = "; ".join(f"{'PASS' if ok else 'FAIL'} {what} ({got})" for what, ok, got in marks)
        console.print(f"  {short(run.trace)} (N={run.required}): {cells}")
    console.print(
        "The bound: every replica-minute is served by Spot at price r x on-demand or by "
        "on-demand at 1x, so keeping N replicas costs at least r x always-on-demand; 0.5x is "
        "impossible whenever Spot/on-demand >= 0.5. With the measured Spot node-hours s and "
        "on-demand node-hours f (as shares of always-on-demand's), hedging costs r*s + f, and "
        "stays <= 0.5x while r <= (0.5 - f) / s."
    )
    bound = Table(title="Spot/on-demand in prices.yaml, and where 0.5x is possible")
    bound.add_column("accelerator")
    bound.add_column("Spot/on-demand", justify="right")
    bound.add_column("0.5x possible", justify="right")
    bound.add_column("hedging <= 0.5x on", justify="right")
    for name, row in sorted(prices.rates.items()):
        r = float(row.spot) / float(row.standard)
        ok = sum(run.vs_on_demand(float(row.spot), float(row.standard)) <= 0.5 for run in hedging)
        bound.add_row(name, f"{r:.2f}", "no" if r >= 0.5 else "yes", f"{ok}/{len(hedging)} traces")
    console.print(bound)
    for run in hedging:
        base = run.required * run.minutes * MINUTE
        s, f = run.spot_node_seconds / base, run.on_demand_node_seconds / base
        limit = (0.5 - f) / s if s else float("nan")
        console.print(
            f"  {short(run.trace)}: s={s:.3f}, f={f:.3f}: 0.5x holds while Spot/on-demand <= "
            + (f"{limit:.2f}" if limit > 0 else "never (the fallback alone exceeds 0.5x)")
        )
    console.print(f"replayed in {seconds:.1f} s")


#: ``--sensitivity``: hedging under other settings and a faster DeployModel, to show what the
#: targets would take (grace s, hold s, DeployModel s); the product's defaults come first.
VARIANTS = (
    (300, 1800, DEPLOY_SECONDS),
    (300, 1800, 600),
    (300, 7200, DEPLOY_SECONDS),
    (60, 7200, 600),
    (300, 6 * 3600, DEPLOY_SECONDS),
)


Variant = tuple[int, int, int]


def sensitivity(
    loaded: list[tuple[Trace, list[int], int]], default: list[Run]
) -> list[tuple[Variant, list[Run]]]:
    """Hedging (the product's rule) replayed under each of :data:`VARIANTS`; the first, the
    product's defaults, is the default run's own."""
    out: list[tuple[Variant, list[Run]]] = []
    for grace, hold, deploy in VARIANTS:
        cfg = ServingSettings(grace_seconds=grace, hold_seconds=hold)
        if cfg == ServingSettings() and deploy == DEPLOY_SECONDS:
            runs = [r for r in default if r.policy == "Spot + hedging"]
        else:
            label = f"hedging, grace {grace} s, hold {hold} s, DeployModel {deploy // 60} min"
            runs = [hedged(t.name, caps, p, p, cfg, deploy, label) for t, caps, p in loaded]
        out.append(((grace, hold, deploy), runs))
    return out


def print_sensitivity(
    variants: list[tuple[Variant, list[Run]]], prices: PriceTable, accelerator: str
) -> None:
    from rich.console import Console
    from rich.table import Table

    rates = prices.rates[accelerator]
    spot_rate, standard_rate = float(rates.spot), float(rates.standard)
    table = Table(title="Hedging under other settings (worst trace / mean over the traces)")
    for column in ("grace s", "hold s", "DeployModel min", "all required", "at least one", "cost"):
        table.add_column(column, justify="right")
    for (grace, hold, deploy), runs in variants:
        full = [r.full / r.minutes for r in runs]
        any_ = [r.any / r.minutes for r in runs]
        cost = [r.vs_on_demand(spot_rate, standard_rate) for r in runs]
        table.add_row(
            str(grace),
            str(hold),
            str(deploy // 60),
            f"{min(full):.2%} / {sum(full) / len(full):.2%}",
            f"{min(any_):.2%} / {sum(any_) / len(any_):.2%}",
            f"{max(cost):.2f}x / {sum(cost) / len(cost):.2f}x",
        )
    Console(width=max(Console().width, 110)).print(table)


# --- the designs side by side ---------------------------------------------------------------

#: Issue 24's targets, on every trace: at least one replica serving, all required serving,
#: and the cost against always-on-demand (where Spot/on-demand allows it: see the bounds).
TARGET_ANY = 0.999
TARGET_FULL = 0.99
TARGET_COST = 0.5


@dataclass
class Design:
    """One design replayed: its runs, and its cost bound as a share of always-on-demand at
    Spot/on-demand ``r`` for N replicas: ``floor`` is the least it can cost while serving all
    N (the cheapest mix its design allows), ``held`` what it costs when Spot never fails."""

    label: str
    runs: list[Run]
    formula: str
    floor: Callable[[float, int], float]
    held: Callable[[float, int], float]


def spot_bound(r: float, n: int) -> float:
    """Every required replica on Spot: no design that pays for N replicas does better."""
    return r


def group(trace: str) -> str:
    """``1-node GCP``, ``1-node AWS``, ``4-node AWS``: the comparison's trace groups."""
    parts = trace.split("/")
    return f"{parts[1]} {parts[2].split('-')[0].upper()}"


def regions(
    loaded: list[tuple[Trace, list[int], int]],
) -> dict[tuple[str, str], list[tuple[Trace, list[int], int]]]:
    """The traces by region and collection: one folder holds traces with the same start, gap
    and length, so a region's zones in one folder are the same minutes. GCP us-central1 a/b/c,
    and AWS us-east-1 b/c/d (intel), us-east-1 c/f and us-west-2 b/c (V100) have siblings;
    us-east1-b and the 4-node traces are alone in theirs."""
    out: dict[tuple[str, str], list[tuple[Trace, list[int], int]]] = {}
    for item in loaded:
        out.setdefault((item[0].name.rsplit("/", 1)[0], item[0].region), []).append(item)
    return out


def region_zones(loaded: list[tuple[Trace, list[int], int]]) -> dict[str, list[list[int]]]:
    """For each trace with siblings (see :func:`regions`), its region's other zones' capacities."""
    zones: dict[str, list[list[int]]] = {}
    for members in regions(loaded).values():
        for trace, _, _ in members:
            others = [caps for other, caps, _ in members if other is not trace]
            if others:
                zones[trace.name] = others
    return zones


def designs(
    loaded: list[tuple[Trace, list[int], int]],
    runs: list[Run],
    variants: list[tuple[Variant, list[Run]]],
    prices: PriceTable,
    accelerator: str,
) -> list[Design]:
    """The four policies, then the designs that could meet the targets, all on the same
    minutes. The best ``--sensitivity`` row is the one meeting the most targets per group,
    then with the best worst-trace shares, then the lowest mean cost."""
    cfg = ServingSettings()
    zones = region_zones(loaded)
    by_policy: dict[str, list[Run]] = {}
    for run in runs:
        key = "Spot N+1" if run.policy.startswith("Spot N+1") else run.policy
        by_policy.setdefault(key, []).append(run)

    def score(item: tuple[Variant, list[Run]]) -> tuple[int, float, float, float]:
        rows = verdicts(item[1], prices, accelerator)
        passed = sum(sum(row[-3:]) for row in rows.values())
        full = min(r.full / r.minutes for r in item[1])
        any_ = min(r.any / r.minutes for r in item[1])
        rates = prices.rates[accelerator]
        cost = [r.vs_on_demand(float(rates.spot), float(rates.standard)) for r in item[1]]
        return passed, full, any_, -sum(cost) / len(cost)

    (grace, hold, deploy), best = max(variants, key=score)
    faster = ", a DeployModel faster than the worst case" if deploy < DEPLOY_SECONDS else ""
    out = [
        Design(
            "always on-demand", by_policy["always on-demand"], "1", on_demand_bound, on_demand_bound
        ),
        Design("plain Spot", by_policy["plain Spot"], "r", spot_bound, spot_bound),
        Design("Spot + hedging (the product)", by_policy["Spot + hedging"], "r", *SPOT_BOUNDS),
        Design(
            "Spot N+1",
            by_policy["Spot N+1"],
            "r; held: r(N+1)/N",
            spot_bound,
            over_provisioned_held,
        ),
        Design(
            f"hedging, grace {grace} s, hold {hold} s, DeployModel {deploy // 60} min "
            f"(best of --sensitivity{faster})",
            best,
            "r",
            *SPOT_BOUNDS,
        ),
    ]
    for proportional in (True, False):
        label = "warm standby, share by replicas" if proportional else "warm standby at 0%"
        out.append(
            Design(
                f"{label} (model, not built)",
                [standby(t.name, caps, p, p, cfg, proportional) for t, caps, p in loaded],
                "r + (1-r)/N; held: r + 1/N",
                standby_floor,
                standby_held,
            )
        )
    zoned = [(t, caps, p) for t, caps, p in loaded if t.name in zones]
    spread = [
        hedged(t.name, caps, p, p, cfg, label="spread", zones=zones[t.name], spread=True)
        for t, caps, p in zoned
    ]
    first = [
        hedged(t.name, caps, p, p, cfg, label="first", zones=zones[t.name], spot_fallback=True)
        for t, caps, p in zoned
    ]
    out.append(
        Design("Spot spread over zones + hedging (best-case placement)", spread, "r", *SPOT_BOUNDS)
    )
    out.append(Design("hedging, Spot fallback first (model, not built)", first, "r", *SPOT_BOUNDS))
    return out


def on_demand_bound(r: float, n: int) -> float:
    return 1.0


def over_provisioned_held(r: float, n: int) -> float:
    return r * (n + 1) / n


def standby_floor(r: float, n: int) -> float:
    """One on-demand replica always, at best N - 1 on Spot (the standby covering one lost)."""
    return (1 + r * (n - 1)) / n


def standby_held(r: float, n: int) -> float:
    return r + 1 / n


SPOT_BOUNDS = (spot_bound, spot_bound)


@dataclass
class Figures:
    """A policy on a set of traces: the worst trace's shares, the mean and max cost."""

    traces: int
    any: float
    full: float
    mean: float
    worst: float

    @classmethod
    def of(cls, runs: Sequence[Run], r: float) -> Figures:
        cost = [run.vs_on_demand(r, 1.0) for run in runs]
        return cls(
            len(runs),
            min(run.any / run.minutes for run in runs),
            min(run.full / run.minutes for run in runs),
            sum(cost) / len(cost),
            max(cost),
        )


def verdicts(
    runs: list[Run], prices: PriceTable, accelerator: str
) -> dict[str, tuple[int, float, float, float, float, bool, bool, bool]]:
    """Per trace group: traces, worst share with at least one and with all required, mean and
    max cost against always-on-demand, and whether each target holds on its every trace."""
    rates = prices.rates[accelerator]
    r = float(rates.spot) / float(rates.standard)
    grouped: dict[str, list[Run]] = {}
    for run in runs:
        grouped.setdefault(group(run.trace), []).append(run)
    out = {}
    for name, members in grouped.items():
        f = Figures.of(members, r)
        verdict = (f.any >= TARGET_ANY, f.full >= TARGET_FULL, f.worst <= TARGET_COST)
        out[name] = (f.traces, f.any, f.full, f.mean, f.worst, *verdict)
    return out


def spot_ceiling(region: Sequence[list[int]], probe: int) -> float:
    """The share of minutes in which some zone of ``region`` grants one of N = ``probe``
    replicas."""
    minutes = len(region[0])
    up = sum(any(granted(z[m], probe, probe) >= 1 for z in region) for m in range(minutes))
    return up / minutes if minutes else 0.0


def smallest_n(bound: Callable[[float, int], float], r: float, limit: int = 1000) -> int | None:
    """The fewest required replicas at which ``bound`` is within :data:`TARGET_COST`."""
    return next((n for n in range(1, limit + 1) if bound(r, n) <= TARGET_COST), None)


def print_comparison(
    found: list[Design],
    loaded: list[tuple[Trace, list[int], int]],
    prices: PriceTable,
    accelerator: str,
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    rates = prices.rates[accelerator]
    r = float(rates.spot) / float(rates.standard)
    totals: dict[str, int] = {}
    for trace, _, _ in loaded:
        totals[group(trace.name)] = totals.get(group(trace.name), 0) + 1
    table = Table(
        title=f"The designs side by side (worst trace of each group; cost priced as {accelerator})"
    )
    for column in (
        "design",
        "traces",
        ">=1 worst",
        "all worst",
        "cost mean",
        "cost max",
        f">=1 {TARGET_ANY:.1%}",
        f"all {TARGET_FULL:.0%}",
        f"cost {TARGET_COST}x",
    ):
        table.add_column(column, justify="left" if column == "design" else "right")
    mark = {True: "PASS", False: "FAIL"}
    verdict_lines = []
    for design in found:
        rows = verdicts(design.runs, prices, accelerator)
        for i, name in enumerate(totals):
            if name not in rows:
                table.add_row(
                    design.label if i == 0 else "", f"{name} 0/{totals[name]}", *["-"] * 7
                )
                continue
            count, any_, full, mean, worst, ok_any, ok_full, ok_cost = rows[name]
            table.add_row(
                design.label if i == 0 else "",
                f"{name} {count}/{totals[name]}",
                f"{any_:.3%}",
                f"{full:.3%}",
                f"{mean:.2f}x",
                f"{worst:.2f}x",
                mark[ok_any],
                mark[ok_full],
                mark[ok_cost],
            )
        table.add_section()
        ran = sum(row[0] for row in rows.values())
        every = ran == len(loaded) and all(all(row[-3:]) for row in rows.values())
        verdict_lines.append(
            f"  {design.label}: "
            + ("meets all three targets on every trace" if every else "does not")
            + ("" if ran == len(loaded) else f" (replayed on {ran} of {len(loaded)} traces)")
        )
    console.print(table)
    console.print("All three of issue 24's targets on every trace (computed from the table):")
    for line in verdict_lines:
        console.print(line)
    console.print(
        "Spot anywhere in the region: the share of minutes in which at least one of the "
        "region's traced zones has Spot capacity, the most any design serving from Spot alone "
        f"could reach with at least one replica (placed at once, anywhere); {TARGET_ANY:.1%} "
        "needs on-demand wherever it is lower:"
    )
    for members in regions(loaded).values():
        names = ", ".join(short(t.name).split(" ", 2)[2] for t, _, _ in members)
        ceiling = spot_ceiling([caps for _, caps, _ in members], members[0][2])
        console.print(f"  {group(members[0][0].name)} {names}: {ceiling:.3%}")
    bound = Table(
        title=f"The cost bound each design implies (share of always-on-demand; r = Spot/on-demand"
        f" = {r:.2f} for {accelerator})"
    )
    for column in (
        "design",
        "bound",
        "N=1",
        "N=4",
        f"N for <= {TARGET_COST}x",
        "measured mean",
    ):
        bound.add_column(column, justify="left" if column in ("design", "bound") else "right")
    for design in found:
        cost = [run.vs_on_demand(float(rates.spot), float(rates.standard)) for run in design.runs]
        cells = [
            f"{design.floor(r, n):.2f}"
            + (f" ({design.held(r, n):.2f})" if design.held(r, n) != design.floor(r, n) else "")
            for n in (1, 4)
        ]
        need = [smallest_n(design.floor, r), smallest_n(design.held, r)]
        reach = "never" if need[0] is None else f">= {need[0]}"
        if need[1] != need[0]:
            reach += f" (held: {'never' if need[1] is None else f'>= {need[1]}'})"
        bound.add_row(design.label, design.formula, *cells, reach, f"{sum(cost) / len(cost):.2f}x")
    console.print(bound)
    console.print(
        "floor: the least the design can cost while serving all N replicas (each replica-minute"
        " on Spot at r or on-demand at 1, and what the design always keeps); held: its cost when"
        " Spot never fails, in brackets where it differs. A design whose floor exceeds "
        f"{TARGET_COST}x cannot meet the cost target at these prices, whatever the traces."
    )


# --- the cost-availability frontier and objective mode (issue 39) ---------------------------

#: Objective mode's objectives replayed: at least one replica serving in these shares of
#: minutes, then issue 24's pair (at least one in 99.9%, all required in 99%).
OBJECTIVES = (
    AvailabilityObjective(0.99),
    AvailabilityObjective(0.995),
    AvailabilityObjective(0.999),
    AvailabilityObjective(0.999, all_required=0.99),
)


def said(objective: AvailabilityObjective) -> str:
    """``>=1 in 99.9%, all in 99.0%``."""
    out = f">=1 in {objective.at_least_one:.1%}"
    return out if objective.all_required is None else f"{out}, all in {objective.all_required:.1%}"


#: SkyServe's ``num_overprovision`` in the SpotHedge rows.
SPOTHEDGE_EXTRA = (1, 2)
#: Where ``--write-table`` writes the table the functions read (package data).
TABLE_PATH = Path(__file__).resolve().parents[1] / "shared" / "domain" / "serving" / FILE_NAME

Loaded = list[tuple[Trace, list[int], int]]


def knob_grid(n: int) -> list[ServingPolicy]:
    """Every combination of the knobs replayed for N required replicas: a floor of 0 to N,
    0 to max(N, 2) extra Spot replicas, the hedge on and off (a floor of N never has a deficit,
    so its hedge would never fire: replayed once, off)."""
    return [
        ServingPolicy(floor, extra, hedge)
        for floor in range(n + 1)
        for extra in range(max(n, 2) + 1)
        for hedge in ((False, True) if floor < n else (False,))
    ]


@dataclass
class Frontier:
    """Every run of the frontier: each trace under each knob combination (:func:`knob_grid`),
    and under SkyServe's SpotHedge (by ``num_overprovision``)."""

    grid: dict[tuple[str, ServingPolicy], Run]
    spothedge: dict[tuple[str, int], Run]

    def runs(self, knobs: ServingPolicy, traces: Sequence[str]) -> list[Run]:
        return [self.grid[(name, knobs)] for name in traces]


def frontier(loaded: Loaded, runs: list[Run], cfg: ServingSettings) -> Frontier:
    """The knob grid and SpotHedge replayed on every trace; the four policies' runs are
    reused where their knobs are the grid's (always on-demand, plain Spot, hedging, N+1)."""
    grid: dict[tuple[str, ServingPolicy], Run] = {}
    for run in runs:
        if run.knobs is not None:
            grid[(run.trace, run.knobs)] = run
    spothedge: dict[tuple[str, int], Run] = {}
    for trace, caps, probe in loaded:
        for knobs in knob_grid(probe):
            if (trace.name, knobs) not in grid:
                label = knobs.label(probe)
                grid[(trace.name, knobs)] = hedged(
                    trace.name, caps, probe, probe, cfg, label=label, knobs=knobs, keep_series=False
                )
        for extra in SPOTHEDGE_EXTRA:
            spothedge[(trace.name, extra)] = hedged(
                trace.name,
                caps,
                probe,
                probe,
                cfg,
                label=f"SpotHedge (N+{extra})",
                knobs=ServingPolicy(0, extra, True),
                skyserve=True,
                keep_series=False,
            )
    return Frontier(grid, spothedge)


def halves(loaded: Loaded) -> tuple[list[str], list[str]]:
    """The traces objective mode learns on, and those it is judged on (held out): within each
    group, by name, every other trace (the first learns). Alternating keeps both halves of a
    group spread over its collections and zones, and is fixed by the names alone."""
    by_group: dict[str, list[str]] = {}
    for trace, _, _ in loaded:
        by_group.setdefault(group(trace.name), []).append(trace.name)
    learn: list[str] = []
    held: list[str] = []
    for names in by_group.values():
        for i, name in enumerate(sorted(names)):
            (learn if i % 2 == 0 else held).append(name)
    return learn, held


def _down(value: float, places: int) -> float:
    """``value`` rounded down: an availability is never written higher than measured."""
    scale = 10.0**places
    return math.floor(value * scale) / scale


def _up(value: float, places: int) -> float:
    """``value`` rounded up: a cost is never written lower than measured."""
    scale = 10.0**places
    return math.ceil(value * scale) / scale


def measured(n: int, knobs: ServingPolicy, runs: Sequence[Run]) -> Measured:
    """``knobs`` on these traces as a table row: the worst trace's shares of minutes, the mean
    node-hour shares (rounded against the policy: 6 and 4 places)."""
    shares = [r.shares() for r in runs]
    return Measured(
        n,
        knobs,
        _down(min(r.any / r.minutes for r in runs), 6),
        _down(min(r.full / r.minutes for r in runs), 6),
        _up(sum(s for s, _ in shares) / len(shares), 4),
        _up(sum(o for _, o in shares) / len(shares), 4),
    )


def undominated(rows: Sequence[Measured]) -> list[Measured]:
    """The rows :func:`~shared.domain.serving.objective.choose` could ever answer, at any
    price: a row that another of the same replicas matches or beats on both availabilities and
    both node-hour shares is never cheaper, so it is left out of the file (of two equal rows,
    the one ``choose`` prefers stays: fewer on-demand, fewer extra Spot, the hedge)."""

    def figures(row: Measured) -> tuple[float, float, float, float]:
        return (-row.at_least_one, -row.all_required, row.spot_share, row.on_demand_share)

    order = sorted(
        rows,
        key=lambda r: (r.replicas, r.policy.min_on_demand, r.policy.extra_spot, not r.policy.hedge),
    )
    kept = []
    for i, row in enumerate(order):
        beaten = any(
            other.replicas == row.replicas
            and all(a <= b for a, b in zip(figures(other), figures(row), strict=True))
            and (figures(other) != figures(row) or j < i)
            for j, other in enumerate(order)
            if j != i
        )
        if not beaten:
            kept.append(row)
    return kept


def learned_table(
    found: Frontier, loaded: Loaded, learn: Sequence[str], r: float, accelerator: str
) -> PolicyTable:
    """The table objective mode chooses from: every knob combination measured on the
    learning half, per replica count, the rows ``choose`` could answer."""
    counts = {trace.name: probe for trace, _, probe in loaded}
    rows: list[Measured] = []
    for n in sorted(set(counts.values())):
        names = [name for name in learn if counts[name] == n]
        if names:
            rows += [measured(n, k, found.runs(k, names)) for k in knob_grid(n)]
    return PolicyTable(tuple(undominated(rows)), round(r, 6), accelerator, tuple(sorted(learn)))


def named_policies(n: int) -> list[tuple[str, ServingPolicy | None, int]]:
    """The policies the frontier table names, for N: (label, knobs, SpotHedge's extra Spot);
    knobs None is SpotHedge."""
    out: list[tuple[str, ServingPolicy | None, int]] = [
        ("always on-demand", default_policy(n), 0),
        ("plain Spot", ServingPolicy(0, 0, False), 0),
        ("reactive hedging (today's default)", HEDGING, 0),
    ]
    for floor in range(1, n + 1):
        # A floor of N has no deficit to hedge (the grid replays it once, hedge off): it is
        # always on-demand.
        label = f"warm floor of {floor} (+ hedging where k < N)"
        out.append((label, ServingPolicy(floor, 0, floor < n), 0))
        if floor < n:
            out.append((f"warm floor of {floor}, no hedge", ServingPolicy(floor, 0, False), 0))
    out += [(f"over-provisioned Spot (N+{e})", ServingPolicy(0, e, False), 0) for e in (1, 2)]
    out += [(f"SpotHedge (N+{e}), SkyServe", None, e) for e in SPOTHEDGE_EXTRA]
    return out


def groups_of(loaded: Loaded) -> dict[str, tuple[int, list[str]]]:
    """Each trace group's N and trace names."""
    out: dict[str, tuple[int, list[str]]] = {}
    for trace, _, probe in loaded:
        out.setdefault(group(trace.name), (probe, []))[1].append(trace.name)
    return out


def candidates(found: Frontier, n: int, names: Sequence[str]) -> list[tuple[str, int, list[Run]]]:
    """Every policy replayed for N on ``names``, with the on-demand replicas it keeps warm:
    the knob grid, then SpotHedge."""
    out = [(k.label(n), k.min_on_demand, found.runs(k, names)) for k in knob_grid(n)]
    out += [
        (f"SpotHedge (N+{e})", 0, [found.spothedge[(name, e)] for name in names])
        for e in SPOTHEDGE_EXTRA
    ]
    return out


def cheapest(
    found: Frontier, n: int, names: Sequence[str], objective: AvailabilityObjective, r: float
) -> tuple[str, Figures] | None:
    """The cheapest policy (by mean cost) meeting ``objective`` on every trace of ``names``."""
    meeting = [
        (label, Figures.of(runs, r))
        for label, _, runs in candidates(found, n, names)
        if all(objective.met_by(x.any / x.minutes, x.full / x.minutes) for x in runs)
    ]
    return min(meeting, key=lambda item: item[1].mean, default=None)


def print_frontier(
    found: Frontier,
    loaded: Loaded,
    held: Sequence[str],
    table: PolicyTable,
    r: float,
    accelerator: str,
) -> None:
    """The frontier table: per policy and trace group, the worst trace's shares and the cost
    against always-on-demand, with the floor r + (1 - r) k/N; objective mode on the held-out
    half (its rows say so)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    table_out = Table(
        title=f"The cost-availability frontier (worst trace of each group; cost priced as "
        f"{accelerator}, r = {r:.2f})"
    )
    for column in (
        "policy",
        "group",
        "traces",
        ">=1 worst",
        "all worst",
        "cost mean",
        "cost max",
        "floor r+(1-r)k/N",
    ):
        table_out.add_column(column, justify="left" if column in ("policy", "group") else "right")
    grouped = groups_of(loaded)
    labels = [label for label, _, _ in named_policies(max(n for n, _ in grouped.values()))]
    for label in labels:
        for i, (name, (n, names)) in enumerate(grouped.items()):
            match = [(k, e) for lab, k, e in named_policies(n) if lab == label]
            cells = ["-"] * 6
            if match:
                knobs, extra = match[0]
                runs = (
                    found.runs(knobs, names)
                    if knobs
                    else [found.spothedge[(t, extra)] for t in names]
                )
                f = Figures.of(runs, r)
                floor = cost_floor(r, n, knobs.min_on_demand if knobs else 0)
                cells = [
                    f"{f.traces}",
                    f"{f.any:.3%}",
                    f"{f.full:.3%}",
                    f"{f.mean:.2f}x",
                    f"{f.worst:.2f}x",
                    f"{floor:.2f}",
                ]
            table_out.add_row(label if i == 0 else "", name, *cells)
        table_out.add_section()
    for objective in OBJECTIVES:
        label = f"objective mode, {said(objective)} (held out)"
        for i, (name, (n, names)) in enumerate(grouped.items()):
            choice = choose(objective, n, table)
            test = [t for t in names if t in held]
            if not test:  # a group of one trace learns on it and has none held out
                table_out.add_row(label if i == 0 else "", name, "0", *["-"] * 5)
                continue
            f = Figures.of(found.runs(choice.policy, test), r)
            floor = cost_floor(r, n, choice.policy.min_on_demand)
            table_out.add_row(
                label if i == 0 else "",
                f"{name}: {choice.policy.label(n)}",
                f"{f.traces}/{len(names)}",
                f"{f.any:.3%}",
                f"{f.full:.3%}",
                f"{f.mean:.2f}x",
                f"{f.worst:.2f}x",
                f"{floor:.2f}",
            )
        table_out.add_section()
    console.print(table_out)
    console.print(
        "Policies: a warm floor of k is an on-demand model of k replicas always deployed beside"
        " a Spot model of N - k (SkyServe's base_ondemand_fallback_replicas); the hedge covers"
        " N - (Spot + floor) with the product's rule; over-provisioned Spot adds replicas in the"
        " same zone; SpotHedge is SkyServe's dynamic on-demand fallback over N + e Spot replicas"
        " (no grace, no hold). Objective mode's rows are its choice, from the table learned on"
        " the other half, replayed on the held-out traces only."
    )
    console.print(
        "The cheapest policy meeting each objective on every trace of a group (all its traces):"
    )
    for name, (n, names) in grouped.items():
        for objective in OBJECTIVES:
            best = cheapest(found, n, names, objective, r)
            what = (
                "none" if best is None else f"{best[0]} at {best[1].mean:.2f}x ({best[1].any:.3%})"
            )
            console.print(f"  {name}, {said(objective)}: {what}")


def shortfall(run: Run, objective: AvailabilityObjective) -> list[str]:
    """What ``run`` lacks of ``objective``, in points and minutes, with the spells it lost
    them in (none when it meets it)."""
    out = []
    wanted = [(objective.at_least_one, run.any, ">=1", run.outages, run.longest_outage)]
    if objective.all_required is not None:
        spells, longest = run.short_spells, run.longest_short
        wanted.append((objective.all_required, run.full, "all", spells, longest))
    for goal, served, what, spells, longest in wanted:
        share = served / run.minutes
        if share < goal:
            minutes = math.ceil(goal * run.minutes - served)
            out.append(
                f"{what} {share:.3%}, short by {(goal - share) * 100:.3f} points ({minutes} of"
                f" {run.minutes} minutes; {spells} spell(s), the longest {longest} min)"
            )
    return out


def why_missed(run: Run, objective: AvailabilityObjective, row: Measured | None) -> str:
    """How much a held-out trace misses an objective by, what its lost minutes were, and what
    the learning half had shown for the same knobs."""
    learned = (
        ""
        if row is None
        else f"; the learning half's worst trace: >=1 {row.at_least_one:.3%},"
        f" all {row.all_required:.3%}"
    )
    return f"{short(run.trace)}: {', '.join(shortfall(run, objective))}{learned}"


def why_only_on_demand(
    found: Frontier, n: int, names: Sequence[str], objective: AvailabilityObjective
) -> str:
    """Why no policy that serves part of N from Spot meets ``objective`` on ``names``: the
    one that comes closest, on its worst trace, and what its lost minutes were."""

    def gap(run: Run) -> float:
        gaps = [run.any / run.minutes - objective.at_least_one]
        if objective.all_required is not None:
            gaps.append(run.full / run.minutes - objective.all_required)
        return min(gaps)

    spot = [(label, runs) for label, warm, runs in candidates(found, n, names) if warm < n]
    label, runs = max(spot, key=lambda item: min(gap(r) for r in item[1]))
    worst = min(runs, key=gap)
    floor = (
        "with N = 1 a warm floor is the whole deployment, so every other policy serves from Spot"
        " alone until a fallback serves; "
        if n == 1
        else ""
    )
    return (
        f"{floor}the closest of them, {label}, on {short(worst.trace)}:"
        f" {', '.join(shortfall(worst, objective))}"
    )


def judged(
    found: Frontier,
    n: int,
    test: Sequence[str],
    table: PolicyTable,
    objective: AvailabilityObjective,
) -> tuple[Choice, list[Run], str]:
    """Objective mode's choice from ``table``, its runs on ``test``, and the verdict: whether
    it meets ``objective`` on each trace, and where it misses, by how much and why."""
    choice = choose(objective, n, table)
    runs = found.runs(choice.policy, test)
    misses = [r for r in runs if not objective.met_by(r.any / r.minutes, r.full / r.minutes)]
    worst = min(run.any / run.minutes for run in runs)
    full = min(run.full / run.minutes for run in runs)
    if not misses:
        return choice, runs, f"MEETS it on all {len(runs)} (worst >=1 {worst:.3%}, all {full:.3%})"
    why = "; ".join(why_missed(run, objective, choice.row) for run in misses)
    return choice, runs, f"MISSES it on {len(misses)} of {len(runs)}: {why}"


def print_objective_mode(
    found: Frontier,
    loaded: Loaded,
    halves_: tuple[list[str], list[str]],
    table: PolicyTable,
    r: float,
    accelerator: str,
) -> None:
    """Objective mode, held out: per objective and group, what it chose from the table learned
    on one half, and on the held-out traces whether it meets the objective on each (by how
    much and why it misses), whether any other policy met it for less there, and its cost
    beside the floor of the on-demand replicas it keeps warm. Then the same with the halves
    swapped, as a check that the verdict is not the split's."""
    learn, held = halves_
    swapped = learned_table(found, loaded, held, r, accelerator)
    print(
        f"Objective mode, held out: the table was learned on {len(learn)} traces (every other"
        f" trace of each group, by name) and is judged on the other {len(held)}:"
        f" {', '.join(short(t) for t in held)}"
    )
    for objective in OBJECTIVES:
        print(f"Objective {said(objective)} of minutes:")
        for name, (n, names) in groups_of(loaded).items():
            test = [t for t in names if t in held]
            back = [t for t in names if t not in held]
            if not test or not back:
                print(f"  {name} (N={n}): one trace, nothing held out")
                continue
            choice, runs, verdict = judged(found, n, test, table, objective)
            f = Figures.of(runs, r)
            print(f"  {name} (N={n}): chose {choice.policy.label(n)}, {choice.reason}")
            print(f"    on the held-out traces: {verdict}")
            best = cheapest(found, n, test, objective, r)
            if best is None:
                print("    no policy meets it on these traces")
            else:
                other, g = best
                ok = "no more than" if f.mean <= g.mean + 1e-9 else "MORE than"
                print(
                    f"    costs {f.mean:.2f}x there, {ok} the cheapest policy that met it on the"
                    f" same traces (in hindsight): {other}, {g.mean:.2f}x"
                )
                if other == default_policy(n).label(n):
                    why = why_only_on_demand(found, n, test, objective)
                    print(f"    only always on-demand meets it there; of the others, {why}")
            floor, hedges, extra = overhead(runs, n, choice.policy.min_on_demand, r)
            print(
                f"    cost {f.mean:.2f}x = floor {floor:.2f} (r + (1-r)"
                f"*{choice.policy.min_on_demand}/{n}) + hedges {hedges:+.2f} + Spot beyond N-k"
                f" {extra:+.2f} (overhead above the floor {f.mean - floor:+.2f}"
                + (
                    "; below it: the floor assumes all N served, and reclaimed Spot is not"
                    " replaced nor billed)"
                    if f.mean < floor
                    else ")"
                )
            )
            swap, _, swap_verdict = judged(found, n, back, swapped, objective)
            print(
                f"    halves swapped (learned on the held-out traces): {swap.policy.label(n)},"
                f" on the others {swap_verdict}"
            )


def overhead(runs: Sequence[Run], n: int, floor: int, r: float) -> tuple[float, float, float]:
    """A policy's mean cost split as the floor ``r + (1 - r) k/N`` of its ``floor`` warm
    replicas, plus the hedges (on-demand beyond the floor) and Spot beyond the N - k that
    floor assumes (positive with extra Spot replicas, negative when reclaimed Spot went
    unbilled)."""
    base = [n * run.minutes * MINUTE for run in runs]
    spot = sum(run.spot_node_seconds / b for run, b in zip(runs, base, strict=True)) / len(runs)
    hedges = sum(
        (run.on_demand_node_seconds - run.warm_node_seconds) / b
        for run, b in zip(runs, base, strict=True)
    ) / len(runs)
    return cost_floor(r, n, floor), hedges, r * (spot - (n - floor) / n)


def report_table(table: PolicyTable, write: bool) -> None:
    """Say whether the committed table is this run's; with ``write``, write this run's and
    read it back through the functions' own loader."""
    if write:
        TABLE_PATH.write_text(encode_table(table), encoding="utf-8")
        if load_policy_table() != table:
            raise SystemExit(f"{TABLE_PATH} does not read back as written")
        size = TABLE_PATH.stat().st_size
        print(f"table: wrote {len(table.rows)} rows, {size} bytes, to {TABLE_PATH}")
        return
    try:
        committed = load_policy_table()
    except FileNotFoundError:
        print(f"table: none committed at {TABLE_PATH} (--write-table writes this run's)")
        return
    same = "is" if committed == table else "is NOT"
    print(
        f"table: the committed {TABLE_PATH.name} ({len(committed.rows)} rows) {same} the one"
        " this run learned (--write-table, on whole traces, writes it)"
    )


def plot_frontier(
    found: Frontier,
    loaded: Loaded,
    held: Sequence[str],
    table: PolicyTable,
    r: float,
    output: Path,
) -> Path:
    """The frontier: per trace group (columns), cost against always-on-demand (x) and the
    worst trace's share of minutes with at least one replica (top) and with all required
    (bottom), one point per policy, on a scale of nines; every knob combination grey, the
    named policies and objective mode's choices (held-out traces) marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt
    import numpy as np

    def to_nines(a: Any) -> Any:
        # Unavailability on a log scale, labelled as availability: 99% and 99.9% are a
        # decade apart; 100% is drawn at 99.999%.
        return -np.log10(np.maximum(1 - np.asarray(a), 1e-5))

    def from_nines(y: Any) -> Any:
        return 1 - 10.0 ** (-np.asarray(y))

    grouped = groups_of(loaded)
    # One style per policy in every panel: the named policies of the largest N, in order.
    named = named_policies(max(n for n, _ in grouped.values()))
    colours = [plt.get_cmap("tab20")(i) for i in range(20)]
    styles = {
        label: ("os^vD<>pXhP*"[i % 12], colours[i % 20]) for i, (label, _, _) in enumerate(named)
    }
    figure, axes = plt.subplots(2, len(grouped), figsize=(6 * len(grouped), 10.5), squeeze=False)
    handles: dict[str, Any] = {}
    for col, (name, (n, names)) in enumerate(grouped.items()):
        points = {label: Figures.of(runs, r) for label, _, runs in candidates(found, n, names)}
        test = [t for t in names if t in held]
        chosen = [
            (
                objective,
                Figures.of(found.runs(choose(objective, n, table).policy, test), r),
            )
            for objective in OBJECTIVES
            if test
        ]
        for row, (attribute, title) in enumerate((("any", ">= 1 replica"), ("full", "all N"))):
            ax = axes[row][col]
            ax.set_yscale("function", functions=(to_nines, from_nines))
            xs = [p.mean for p in points.values()]
            ys = [getattr(p, attribute) for p in points.values()]
            handles["every knob combination (all traces)"] = ax.scatter(
                xs, ys, s=12, color="lightgrey", zorder=1
            )
            best = frontier_line(list(zip(xs, ys, strict=True)))
            (handles["the frontier"],) = ax.step(
                *zip(*best, strict=True), where="post", color="grey", linewidth=0.8, zorder=1
            )
            for label, knobs, extra in named_policies(n):
                p = points[knobs.label(n) if knobs else f"SpotHedge (N+{extra})"]
                marker, colour = styles[label]
                handles[label] = ax.scatter(
                    p.mean, getattr(p, attribute), s=40, marker=marker, color=colour, zorder=2
                )
            # Nested stars: objective mode often chooses alike for all three objectives.
            # (No stars where the group has no held-out trace.)
            for (objective, p), size, star in zip(
                chosen, (400, 260, 140, 50), ("gold", "orange", "red", "black"), strict=False
            ):
                handles[f"objective mode {said(objective)} (its held-out traces)"] = ax.scatter(
                    p.mean,
                    getattr(p, attribute),
                    s=size,
                    marker="*",
                    color=star,
                    edgecolors="black",
                    linewidths=0.5,
                    zorder=3,
                )
            ax.set_ylim(0.0, 1.0)
            ticks = [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0]
            ax.set_yticks(ticks, [f"{t:.2%}" for t in ticks])
            ax.set_title(f"{name} (N={n}): worst trace's minutes with {title}", fontsize=9)
            ax.set_xlabel("cost, mean over the traces (x always-on-demand)", fontsize=8)
            ax.grid(True, linewidth=0.3)
    stars = [label for label in handles if label.startswith("objective mode")]
    order = [*list(handles)[:2], *(label for label in styles if label in handles), *stars]
    figure.legend([handles[k] for k in order], order, loc="lower center", ncol=5, fontsize=7)
    figure.tight_layout(rect=(0, 0.09, 1, 1))
    output.mkdir(parents=True, exist_ok=True)
    path = output / "serving-frontier.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def frontier_line(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both cost (lower) and availability (higher), by cost: the
    frontier drawn through the grid.

    Examples:
        >>> frontier_line([(1.0, 1.0), (0.5, 0.9), (0.6, 0.8), (0.3, 0.5)])
        [(0.3, 0.5), (0.5, 0.9), (1.0, 1.0)]
    """
    out: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or y > out[-1][1]:
            out.append((x, y))
    return out


def plot(runs: list[Run], trace: str, output: Path) -> Path:
    """Serving capacity over time on one trace: the zone's grant, plain Spot, and hedging
    (Spot and on-demand stacked), the required line and the hedges marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    plain = next(r for r in runs if r.trace == trace and r.policy == "plain Spot")
    hedge = next(r for r in runs if r.trace == trace and r.policy == "Spot + hedging")
    hours = [m / 60 for m in range(hedge.minutes)]
    figure, (top, bottom, zoom) = plt.subplots(3, 1, figsize=(11, 9))
    top.step(
        hours, [c for c, _, _ in plain.series], where="post", color="grey", label="zone grants"
    )
    top.step(hours, [s for _, s, _ in plain.series], where="post", label="plain Spot serving")
    top.axhline(plain.required, color="black", linestyle="--", linewidth=0.8, label="required")
    top.set_ylabel("replicas")
    top.legend(loc="lower right", fontsize=8)
    top.set_title(f"Serving capacity over time: {short(trace)}")
    spot = [s for _, s, _ in hedge.series]
    on_demand = [o for _, _, o in hedge.series]
    bottom.stackplot(hours, spot, on_demand, labels=["Spot", "on-demand fallback"], step="post")
    for m in hedge.hedge_minutes:
        bottom.axvline(m / 60, color="red", linewidth=0.5, alpha=0.6)
    bottom.axhline(hedge.required, color="black", linestyle="--", linewidth=0.8)
    bottom.set_ylabel("replicas (hedging)")
    bottom.set_xlabel("hours (red: a hedge)")
    bottom.legend(loc="lower right", fontsize=8)
    # The day around the first hedge, close up: the grace period, the DeployModel, the shift.
    first = hedge.hedge_minutes[0] if hedge.hedge_minutes else 0
    window = range(max(first - 60, 0), min(first + 23 * 60, hedge.minutes))
    zoom_hours = [m / 60 for m in window]
    zoom.step(zoom_hours, [plain.series[m][1] for m in window], where="post", label="plain Spot")
    zoom.step(
        zoom_hours,
        [hedge.series[m][1] + hedge.series[m][2] for m in window],
        where="post",
        label="hedging: Spot + on-demand available",
    )
    for m in hedge.hedge_minutes:
        if m in window:
            zoom.axvline(m / 60, color="red", linewidth=0.8)
    zoom.axhline(hedge.required, color="black", linestyle="--", linewidth=0.8)
    zoom.set_xlabel("hours (the day from the first hedge)")
    zoom.set_ylabel("replicas")
    zoom.legend(loc="lower right", fontsize=8)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "serving-capacity.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spot serving on real preemption traces.")
    traces = Path(os.environ.get("FLEXJOBS_TRACES", DEFAULT_TRACES))
    parser.add_argument("--traces", type=Path, default=traces, help="the spot-traces folder")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the PNG goes")
    parser.add_argument("--accelerator", default=ACCELERATOR, help="the prices.yaml row")
    parser.add_argument(
        "--quick", action="store_true", help=f"the first {QUICK_MINUTES // 60} h of each trace"
    )
    parser.add_argument(
        "--sensitivity", action="store_true", help="also hedging under other settings"
    )
    parser.add_argument(
        "--write-table",
        action="store_true",
        help=f"write the policy table objective mode reads to {TABLE_PATH.name}",
    )
    args = parser.parse_args(argv)
    accelerator = args.accelerator.upper()
    prices = load_packaged_prices()
    if accelerator not in prices.rates:
        parser.error(f"{accelerator} is not in shared/domain/policy/prices.yaml")
    if args.write_table and args.quick:
        # The functions choose from the table: it is learned on whole traces only.
        parser.error("--write-table learns on whole traces: drop --quick")
    began = time.perf_counter()
    cfg = ServingSettings()
    runs: list[Run] = []
    loaded = []
    for trace, probe in load(args.traces):
        caps = minute_values(trace, QUICK_MINUTES if args.quick else None)
        loaded.append((trace, caps, probe))
        runs.extend(policies(trace.name, caps, probe, probe, cfg))
    variants = sensitivity(loaded, runs)
    found = designs(loaded, runs, variants, prices, accelerator)
    print_report(runs, prices, accelerator, time.perf_counter() - began)
    if args.sensitivity:
        print_sensitivity(variants, prices, accelerator)
    print_comparison(found, loaded, prices, accelerator)
    busiest = max((r for r in runs if r.policy == "Spot + hedging"), key=lambda r: r.hedges)
    print(f"plot: {plot(runs, busiest.trace, args.output)}")
    began = time.perf_counter()
    found_frontier = frontier(loaded, runs, cfg)
    rates = prices.rates[accelerator]
    r = float(rates.spot) / float(rates.standard)
    learn, held = halves(loaded)
    table = learned_table(found_frontier, loaded, learn, r, accelerator)
    print_frontier(found_frontier, loaded, held, table, r, accelerator)
    print_objective_mode(found_frontier, loaded, (learn, held), table, r, accelerator)
    report_table(table, args.write_table)
    path = plot_frontier(found_frontier, loaded, held, table, r, args.output)
    print(f"frontier replayed in {time.perf_counter() - began:.1f} s; plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
