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
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.capacity.traces import DEFAULT_TRACES, Trace
from shared.domain.policy.pricing import PriceTable
from shared.domain.serving.model import (
    ActionKind,
    MachineSpec,
    ObservedEndpoint,
    ObservedModel,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.rule import decide, start

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

    def measure(self, serving: int, starved: bool, spot: int, on_demand: int, cap: int) -> None:
        self.minutes += 1
        self.full += serving >= self.required and not starved
        self.any += serving >= 1
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


def always_on_demand(name: str, caps: list[int], probe: int, n: int) -> Run:
    run = Run("always on-demand", name, n)
    for _ in caps:
        run.measure(n, False, 0, n, n)
        run.on_demand_node_seconds += n * MINUTE
    return run


def spot_only(name: str, caps: list[int], probe: int, n: int, extra: int, label: str) -> Run:
    run = Run(label, name, n)
    pool = SpotPool(n + extra)
    for m, value in enumerate(caps):
        pool.step(m * MINUTE, granted(value, probe, n + extra))
        up = pool.available()
        run.measure(up, up == 0, up, 0, granted(value, probe, n))
        run.spot_node_seconds += pool.holding() * MINUTE
    return run


@dataclass
class Fallback:
    """The on-demand fallback on the simulated endpoint: its replicas and when each serves."""

    display_name: str
    ready: list[int]  # the time each replica serves
    listed_at: int  # when its DeployModel operation is done and GetEndpoint lists it

    def available(self, t: int) -> int:
        return sum(r <= t for r in self.ready)


def hedged(
    name: str,
    caps: list[int],
    probe: int,
    n: int,
    cfg: ServingSettings,
    deploy_seconds: int = DEPLOY_SECONDS,
) -> Run:
    """Spot with the product's rule: a read, a decision, its call, then the write."""
    run = Run("Spot + hedging", name, n)
    pool = SpotPool(n)
    fallback: Fallback | None = None
    split = {SPOT_ID: 100}

    def read(t: int) -> ObservedEndpoint:
        models = [
            ObservedModel(SPOT_ID, "m", "served [flexjobs b]", MACHINE, True, n, pool.available())
        ]
        if fallback is not None and fallback.listed_at <= t:
            replicas = len(fallback.ready)
            available = fallback.available(t)
            models.append(
                ObservedModel(
                    FALLBACK_ID, "m", fallback.display_name, MACHINE, False, replicas, available
                )
            )
        listed = {m.id for m in models}
        return ObservedEndpoint("e", tuple(models), {k: v for k, v in split.items() if k in listed})

    state: ServingState | None = None
    for m, value in enumerate(caps):
        t = m * MINUTE
        pool.step(t, granted(value, probe, n))
        spot_up = pool.available()
        od_up = fallback.available(t) if fallback else 0
        served = [(spot_up, split.get(SPOT_ID, 0)), (od_up, split.get(FALLBACK_ID, 0))]
        serving = sum(up for up, share in served if share > 0)
        starved = any(share > 0 and up == 0 for up, share in served)
        run.measure(serving, starved, spot_up, od_up, granted(value, probe, n))
        run.spot_node_seconds += pool.holding() * MINUTE
        now = EPOCH + timedelta(seconds=t)
        observed = read(t)
        if state is None:
            state = start(SPOT_ID, observed, now)
            continue
        action = decide(observed, state, now, cfg)
        if action.deploy is not None:
            replicas = action.deploy.replicas
            ready = [t + deploy_seconds] * replicas
            fallback = Fallback(action.deploy.display_name, ready, t + deploy_seconds)
            run.hedges += 1
            run.hedge_minutes.append(m)
        if action.resize is not None and fallback is not None:
            grow = action.resize - len(fallback.ready)
            fallback.ready.extend([t + deploy_seconds] * max(grow, 0))
        if action.split is not None:
            split = dict(action.split)
        if action.undeploy is not None:
            fallback = None
            split.pop(FALLBACK_ID, None)
        if action.kind is ActionKind.PAUSE:
            raise AssertionError(f"the rule paused on its own moves: {action.reason}")
        state = action.state
        # Billed from the call that deploys a replica to its undeploy (worst case: the minute
        # of the call counts whole).
        run.on_demand_node_seconds += (len(fallback.ready) if fallback else 0) * MINUTE
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


def print_sensitivity(
    loaded: list[tuple[Trace, list[int], int]], prices: PriceTable, accelerator: str
) -> None:
    from rich.console import Console
    from rich.table import Table

    rates = prices.rates[accelerator]
    spot_rate, standard_rate = float(rates.spot), float(rates.standard)
    table = Table(title="Hedging under other settings (worst trace / mean over the traces)")
    for column in ("grace s", "hold s", "DeployModel min", "all required", "at least one", "cost"):
        table.add_column(column, justify="right")
    for grace, hold, deploy in VARIANTS:
        cfg = ServingSettings(grace_seconds=grace, hold_seconds=hold)
        runs = [hedged(t.name, caps, p, p, cfg, deploy) for t, caps, p in loaded]
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
    args = parser.parse_args(argv)
    accelerator = args.accelerator.upper()
    prices = PriceTable.default()
    if accelerator not in prices.rates:
        parser.error(f"{accelerator} is not in shared/domain/policy/prices.yaml")
    began = time.perf_counter()
    cfg = ServingSettings()
    runs: list[Run] = []
    loaded = []
    for trace, probe in load(args.traces):
        caps = minute_values(trace, QUICK_MINUTES if args.quick else None)
        loaded.append((trace, caps, probe))
        runs.extend(policies(trace.name, caps, probe, probe, cfg))
    print_report(runs, prices, accelerator, time.perf_counter() - began)
    if args.sensitivity:
        print_sensitivity(loaded, prices, accelerator)
    busiest = max((r for r in runs if r.policy == "Spot + hedging"), key=lambda r: r.hedges)
    print(f"plot: {plot(runs, busiest.trace, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
