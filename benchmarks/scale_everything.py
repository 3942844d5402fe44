"""Everything at once (issue 41): ``./dev bench scale`` section 7.

One embedded stack holding section 1's active jobs (10,000 RUNNING, ``seed_tick``), section
5's admission line (10,000 waiting in 20 queues, 64 admitted jobs holding the 512-GPU quota,
``scale_admission.seed``) and section 6's Spot deployments (1,000 on 200 endpoints,
``scale_deployments.seed``); ``--ci`` takes the CI size of each (200, 1,000 and 100 on 20).
The real tick, in a fresh process on the production wiring (``benchmarks.scale.run_tick``):

- a settling tick (it builds the watch list and the line, and settles what seeding left);
- a steady tick: wall time, peak RSS, Firestore reads and writes, Vertex calls by method,
  what it logged;
- a tick with changes, the worst minute priced below: 1% of the active jobs preempted and
  1% of the endpoints lost Spot since the tick before (no hints: the tick finds every one).

Then the control plane's cost per day (Functions, Firestore, Pub/Sub, Scheduler, Logging;
``benchmarks/control_plane_prices.yaml`` through :mod:`benchmarks.costs`) against the GPUs
it manages per day at their Spot prices (``shared/domain/policy/prices.yaml``), with every
assumption printed (:func:`daily_cost`).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from flexjobs_local.stack import LocalStack

#: Issue 41's targets for the tick with everything at once, and for the cost.
WALL_SECONDS = 60.0
MEMORY_MIB = 512.0
TARGET_RATIO = 0.001  # 0.1% of the GPU cost managed
TICKS_PER_DAY = 1440
#: The mean life of an active job, for the job events' share of a day: section 3's job (an
#: hour of one A100, preempted once and retried). Shorter jobs mean more lives a day.
JOB_HOURS = 1.0
#: The tick's message: Cloud Scheduler's publish and the push delivery to the function.
TICK_MESSAGE_BYTES = 64
#: A job of section 1 (``seed_request``): one A100; a deployment of section 6: one replica of
#: one L4 (``deploy_request``); both priced at their Spot price.
JOB_GPU = ("NVIDIA_TESLA_A100", 1)
DEPLOYMENT_GPU = ("NVIDIA_L4", 1)


@dataclass
class Day:
    """The control plane's dollars for one day, by product, and the assumptions behind them."""

    functions: float = 0.0
    firestore: float = 0.0
    pubsub: float = 0.0
    scheduler: float = 0.0
    logging: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.functions + self.firestore + self.pubsub + self.scheduler + self.logging


def tick_operations(tick: dict[str, Any]) -> Any:
    """One tick as the cost arithmetic counts it: its reads and writes, the tick message's
    publish and push, one invocation of the tick function for its wall time."""
    from benchmarks.costs import Invocation, Operations
    from benchmarks.scale import TICK_ALLOCATION

    return Operations(
        reads=int(tick["reads"]),
        writes=int(tick["writes"]),
        pubsub_request_bytes=[TICK_MESSAGE_BYTES, TICK_MESSAGE_BYTES],
        vertex_calls=sum(tick["vertex"].values()),
        invocations=[Invocation(float(tick["wall"]), TICK_ALLOCATION[1], TICK_ALLOCATION[2])],
    )


def daily_cost(
    tick: dict[str, Any],
    life: Any | None,
    life_log: tuple[int, int],
    jobs: int,
    prices: dict[str, Any],
    *,
    ticks: int = TICKS_PER_DAY,
    job_hours: float = JOB_HOURS,
) -> Day:
    """The control plane's cost of one day: ``ticks`` ticks each as ``tick`` (its figures),
    and, when ``life`` (a job life's handler calls, :class:`benchmarks.costs.Operations`,
    without its share of ticks) is given, ``jobs`` active jobs' lives of ``job_hours`` each
    (``life_log``: the bytes and lines its handlers logged); one Scheduler job.

    >>> from benchmarks.costs import load_prices
    >>> tick = {"reads": 100, "writes": 2, "vertex": {}, "wall": 0.05,
    ...         "log_bytes": 0, "log_lines": 0}
    >>> day = daily_cost(tick, None, (0, 0), 0, load_prices(), ticks=1000)
    >>> round(day.firestore, 4)  # 100,000 reads, 2,000 writes
    0.0636
    """
    from benchmarks.costs import dollars, logged_bytes, logging_dollars, scheduler_dollars

    day = Day()
    one = dollars(tick_operations(tick), prices)
    day.functions += one.functions * ticks
    day.firestore += one.firestore * ticks
    day.pubsub += one.pubsub * ticks
    tick_bytes = logged_bytes(int(tick["log_lines"]), int(tick["log_bytes"]), 1, prices)
    day.logging += logging_dollars(tick_bytes * ticks, prices)
    day.notes.append(
        f"{ticks:,} ticks a day, each as the tick measured: {tick['reads']} reads, "
        f"{tick['writes']} writes, {tick['wall']:.1f} s billed at the tick function's "
        f"allocation, 2 Pub/Sub requests (1,000-byte minimum each), {tick['log_lines']} log "
        f"lines ({tick['log_bytes']:,} bytes)"
    )
    day.scheduler = scheduler_dollars(1, 1.0, prices)
    day.notes.append("one Cloud Scheduler job (the tick), no free jobs applied")
    if life is not None and jobs:
        lives = jobs * 24.0 / job_hours
        priced = dollars(life, prices)
        day.functions += priced.functions * lives
        day.firestore += priced.firestore * lives
        day.pubsub += priced.pubsub * lives
        calls = len(life.invocations)
        life_bytes = logged_bytes(life_log[1], life_log[0], calls, prices)
        day.logging += logging_dollars(life_bytes * lives, prices)
        day.notes.append(
            f"{lives:,.0f} job lives a day ({jobs:,} active jobs of {job_hours:g} h each), each "
            f"as section 3 measured its handler calls: {life.reads} reads, {life.writes} "
            f"writes, {len(life.pubsub_request_bytes)} Pub/Sub requests, {calls} calls, "
            f"{life_log[1]} log lines ({life_log[0]:,} bytes); its share of ticks is in the ticks"
        )
    else:
        day.notes.append("the job events (intake, hints) not included: section 3 did not run")
    log = prices["logging"]
    day.notes.append(
        f"Logging: each line plus {log['entry_overhead_bytes']:,} bytes of LogEntry metadata, "
        f"each call plus a {log['request_log_bytes']:,}-byte request log (assumed); no free tier"
    )
    return day


def gpu_day(jobs: int, deployments: int) -> tuple[float, str]:
    """The GPUs' dollars a day: ``jobs`` active jobs and ``deployments`` deployments, each
    all day at its Spot price; and how that was priced."""
    from benchmarks.costs import spot_gpu_dollars

    job = spot_gpu_dollars(JOB_GPU[0], JOB_GPU[1] * jobs, 24.0)
    serving = spot_gpu_dollars(DEPLOYMENT_GPU[0], DEPLOYMENT_GPU[1] * deployments, 24.0)
    how = (
        f"{jobs:,} jobs x {JOB_GPU[1]} {JOB_GPU[0]} ${job:,.2f} + {deployments:,} deployments x "
        f"{DEPLOYMENT_GPU[1]} {DEPLOYMENT_GPU[0]} ${serving:,.2f}, 24 h at the Spot price"
    )
    return job + serving, how


def break_even_hours(life_dollars: float, gpu_hour: float, ratio: float = TARGET_RATIO) -> float:
    """The mean job life (hours) below which a job's own events alone cost more than
    ``ratio`` of its GPU time.

    >>> round(break_even_hours(0.0002, 1.60), 3)
    0.125
    """
    return life_dollars / (gpu_hour * ratio)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def measure(
    jobs: int, waiting: int, endpoints: int, life: Any | None, life_log: tuple[int, int]
) -> list[bool]:
    from benchmarks import scale_admission, scale_deployments
    from benchmarks.costs import load_prices
    from benchmarks.scale import fmt, preempt, quiet_stack, run_tick, seed_tick, summary

    deployments = endpoints * scale_deployments.PER_ENDPOINT
    before = os.environ.get("FLEXJOBS_QUEUES")
    os.environ["FLEXJOBS_QUEUES"] = scale_admission.queue_file()
    checks: list[bool] = []
    try:
        with LocalStack(quiet_stack()) as stack:
            stack.apply_env()
            t0 = time.perf_counter()
            names = seed_tick(stack, jobs, "all")
            t1 = time.perf_counter()
            scale_admission.seed(stack, waiting, random.Random(41))
            t2 = time.perf_counter()
            made = scale_deployments.create_endpoints(stack, endpoints)
            seeded = scale_deployments.seed(stack, made, scale_deployments.PER_ENDPOINT)
            t3 = time.perf_counter()
            print(f"  seeded {jobs} RUNNING jobs ({t1 - t0:.0f} s), {waiting} waiting requests "
                  f"and {scale_admission.HELD_JOBS} admitted jobs ({t2 - t1:.0f} s), {deployments} "
                  f"Spot deployments on {endpoints} endpoints ({t3 - t2:.0f} s; "
                  f"{seeded['states']})", flush=True)  # fmt: skip
            settle = run_tick(stack, traced=False)
            print(f"  settling tick (builds the watch list and the line): {summary(settle)}, "
                  f"peak RSS {settle['rss_peak_mib']:.0f} MiB", flush=True)  # fmt: skip
            steady = run_tick(stack, traced=False)
            k = max(1, round(jobs * 0.01))
            preempt(stack, names[:k])
            lost = scale_deployments.spot_loss_endpoints(made)
            nodes = scale_deployments.lose_spot(stack, lost)
            changed = run_tick(stack, traced=False)
    finally:
        os.environ.pop("FLEXJOBS_QUEUES", None)
        if before is not None:
            os.environ["FLEXJOBS_QUEUES"] = before
    for label, tick in (
        ("steady tick", steady),
        (f"tick after {k} jobs preempted and {len(lost)} endpoints lost Spot ({nodes} nodes)",
         changed),
    ):  # fmt: skip
        print(f"  {label}: wall {tick['wall']:.1f} s, cpu {tick['cpu']:.1f} s, peak RSS "
              f"{tick['rss_peak_mib']:.1f} MiB (before the tick "
              f"{tick['rss_before_mib']:.1f})")  # fmt: skip
        print(f"    reads {tick['reads']} (documents returned {tick['documents']}), writes "
              f"{tick['writes']}, records changed {tick['changed']}; logged "
              f"{tick['log_lines']} lines, {tick['log_bytes']:,} bytes; Firestore RPCs "
              f"{fmt(tick['rpcs'])}")  # fmt: skip
        print(f"    Vertex calls: {fmt(tick['vertex'])}")
        for what, ok, text in (
            ("wall", tick["wall"] < WALL_SECONDS, f"{tick['wall']:.1f} s < {WALL_SECONDS:.0f}"),
            ("peak memory", tick["rss_peak_mib"] < MEMORY_MIB,
             f"{tick['rss_peak_mib']:.1f} MiB < {MEMORY_MIB:.0f}"),
        ):  # fmt: skip
            checks.append(ok)
            print(f"    target {what}: {text}: {verdict(ok)}")
    checks.append(print_cost(changed, steady, life, life_log, jobs, deployments, load_prices()))
    return checks


def print_cost(
    worst: dict[str, Any],
    steady: dict[str, Any],
    life: Any | None,
    life_log: tuple[int, int],
    jobs: int,
    deployments: int,
    prices: dict[str, Any],
) -> bool:
    from benchmarks.costs import dollars, spot_gpu_dollars

    day = daily_cost(worst, life, life_log, jobs, prices)
    calm = daily_cost(steady, life, life_log, jobs, prices)
    gpu, how = gpu_day(jobs, deployments)
    ratio = day.total / gpu
    print("  the control plane's cost a day, every tick priced as the tick with changes:")
    for note in day.notes:
        print(f"    - {note}")
    print(f"    Functions ${day.functions:.4f}, Firestore ${day.firestore:.4f}, Pub/Sub "
          f"${day.pubsub:.4f}, Scheduler ${day.scheduler:.4f}, Logging ${day.logging:.4f}: "
          f"${day.total:.4f} a day (every tick as the steady one: ${calm.total:.4f})")  # fmt: skip
    print(f"    GPUs managed a day: ${gpu:,.2f} ({how}: the jobs are FLEX_START requests, "
          "priced at the cheaper Spot price; section 5's admitted jobs and the waiting "
          "requests not counted: the smaller the GPU cost, the larger the share)")  # fmt: skip
    ok = ratio < TARGET_RATIO
    print(f"    target control plane / GPU: {ratio * 100:.4f}% < {TARGET_RATIO * 100:.1f}%: "
          f"{verdict(ok)}")  # fmt: skip
    if life is not None:
        life_usd = dollars(life, prices).total
        hours = break_even_hours(life_usd, spot_gpu_dollars(JOB_GPU[0], JOB_GPU[1], 1.0))
        print(f"    a job's own events (${life_usd:.6f} a life) reach {TARGET_RATIO:.1%} of its "
              f"GPU alone when jobs last under {hours * 60:.1f} minutes on average")  # fmt: skip
    return ok
