"""``./dev bench capacity``: deadline-aware capacity replayed on the public Spot traces.

Replays a seeded mix of deadline jobs (:mod:`benchmarks.capacity.workload.population`) over the
"Can't Be Late" traces (``../shared/traces/``) under five policies
(:mod:`benchmarks.capacity.policies`), three DWS wait models (:mod:`benchmarks.capacity.dws`)
and the lifecycle's worst-case timing (:mod:`benchmarks.capacity.model`), for every accelerator
of ``shared/domain/policy/prices.yaml``; prints the figures and issue 23's acceptance lines
(:mod:`benchmarks.capacity.report`); then the multi-region replay
(:mod:`benchmarks.capacity.multiregion`). ``--quick`` (or ``--ci``) runs small populations.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.capacity import multiregion, report
from benchmarks.capacity.dws import MODELS
from benchmarks.capacity.model import Job, Lifecycle, Result, simulate
from benchmarks.capacity.policies import Auto, GreedySpot, Ladder, OnDemand, UniformProgress
from benchmarks.capacity.traces import DEFAULT_TRACES, load_all
from benchmarks.capacity.workload.population import describe, population
from shared.adapters.packaged_prices import load_packaged_prices
from shared.domain.capacity.model import Prices
from shared.domain.policy.pricing import PriceTable

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = ROOT / "bench-output"
FULL_JOBS, QUICK_JOBS = 3000, 80
#: The multi-region replay's jobs (its own population, same seed).
FULL_REGION_JOBS, QUICK_REGION_JOBS = 1500, 60
SEED = 23


Replayed = dict[str, dict[str, dict[str, list[Result]]]]


def replay(jobs: Sequence[Job], table: PriceTable, life: Lifecycle) -> Replayed:
    """Every policy on every job, per DWS model and accelerator. Only AUTO reads prices, so
    the others are replayed once per model and priced per accelerator."""
    out: Replayed = {}
    for dws in MODELS:
        shared = {
            p.name: [simulate(j, p, dws, life) for j in jobs]
            for p in (OnDemand(), UniformProgress(), Ladder(), GreedySpot())
        }
        out[dws.name] = {
            acc: {**shared, "AUTO": [simulate(j, Auto(acc, table), dws, life) for j in jobs]}
            for acc in table.rates
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deadline-aware capacity on real traces.")
    folder = Path(os.environ.get("FLEXJOBS_TRACES", DEFAULT_TRACES))
    parser.add_argument("--traces", type=Path, default=folder, help="the spot-traces folder")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the PNG goes")
    parser.add_argument("--jobs", type=int, help=f"jobs to replay (default {FULL_JOBS})")
    parser.add_argument("--seed", type=int, default=SEED, help="the population's seed")
    parser.add_argument(
        "--quick", "--ci", action="store_true", help=f"a small run ({QUICK_JOBS} jobs), for CI"
    )
    parser.add_argument("--region-jobs", type=int, help="jobs of the multi-region replay")
    parser.add_argument(
        "--worst-jitter",
        action="store_true",
        help="every retry waits its backoff's whole window (default: jitter drawn per job)",
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = parser.parse_args(argv)
    count = args.jobs or (QUICK_JOBS if args.quick else FULL_JOBS)
    region_count = args.region_jobs or (QUICK_REGION_JOBS if args.quick else FULL_REGION_JOBS)
    began = time.perf_counter()
    table = load_packaged_prices()
    prices = {acc: Prices.of(table, acc) for acc in table.rates}
    life = Lifecycle(worst_jitter=args.worst_jitter)
    traces = load_all(args.traces)
    jobs = population(traces, count, args.seed)
    results = replay(jobs, table, life)
    region_jobs = multiregion.population(traces, region_count, args.seed)
    comparisons = [
        multiregion.compare(region_jobs, model, report.HEADLINE, table, life) for model in MODELS
    ]
    out = report.console()
    out.print(
        f"{describe(jobs)}; seed {args.seed}. Lifecycle at its worst: no hints, a "
        f"{life.tick_seconds:.0f} s tick, the product's "
        f"{'backoff at its whole window' if life.worst_jitter else 'jittered backoff'} "
        f"({life.backoff.base_seconds:.0f} s doubling to {life.backoff.cap_seconds:.0f} s); "
        f"budgets: preemption {life.budgets.preemption}, capacity {life.budgets.capacity}"
    )
    report.print_models(out, results, prices)
    report.print_deadlines(out, results, prices)
    report.print_accelerators(out, results, prices)
    report.print_acceptance(out, results, prices)
    report.print_regions(out, comparisons, report.HEADLINE)
    out.print(f"replayed in {time.perf_counter() - began:.1f} s")
    if not args.no_plot:
        out.print(f"plot: {report.plot(results, prices, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
