"""``./dev sim``: the deterministic simulator of the control plane.

Examples::

    ./dev sim                                  every controller, CI budget
    ./dev sim --full                           every controller, the full budget
    ./dev sim --controller serving --seeds 500 --steps 600
    ./dev sim --controller jobs --seed 42      one seed, its trace printed
    ./dev sim --controller serving --replay tests/simulation/traces/11-hedge-failed.trace
    ./dev sim --mode exhaustive --depth 30 --preemptions 2 --faults 1

A failing run prints its seed, the invariant and the shortest trace found; paste the trace
into ``tests/simulation/traces/`` and it is a regression test (``test_regressions.py``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.simulation import budget, explore, mutants
from tests.simulation.scenarios import SCENARIOS


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev sim", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--controller",
        action="append",
        choices=sorted(SCENARIOS),
        help="the scope to simulate (repeatable; default: every one)",
    )
    parser.add_argument("--mode", choices=("random", "exhaustive", "both"), default="both")
    parser.add_argument("--full", action="store_true", help="the full budget, not CI's")
    parser.add_argument("--seeds", type=int, help="random runs per controller")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed to run")
    parser.add_argument("--seed", type=int, help="run this one seed and print its trace")
    parser.add_argument("--steps", type=int, help="choices per random run, before the quiet")
    parser.add_argument("--depth", type=int, help="exhaustive: choices per schedule")
    parser.add_argument("--preemptions", type=int, help="exhaustive: switches per schedule")
    parser.add_argument("--faults", type=int, help="exhaustive: faults per schedule")
    parser.add_argument("--seconds", type=float, help="wall time per controller and mode")
    parser.add_argument(
        "--skip", action="append", default=[], help="an invariant a run does not stop for"
    )
    parser.add_argument("--replay", type=Path, help="replay a trace file")
    parser.add_argument(
        "--mutant",
        choices=sorted(mutants.BY_NAME),
        help="run a fixed defect put back (tests/simulation/mutants.py) on its controller",
    )
    parser.add_argument(
        "--no-shrink", action="store_true", help="print a failing trace as it was found"
    )
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the handlers' logs: millions of lines, read by none
    explore.SKIPPED.update(args.skip)
    plan = budget.FULL if args.full else budget.CI
    controllers = args.controller or sorted(SCENARIOS)
    if args.replay is not None:
        if args.mutant is not None:  # the trace replayed with its fix taken out
            with mutants.installed(mutants.BY_NAME[args.mutant]):
                return _replay(controllers[0], args.replay)
        return _replay(controllers[0], args.replay)
    if args.mutant is not None:
        mutant = mutants.BY_NAME[args.mutant]
        print(f"mutant {mutant.name} (defect {mutant.defect}): {mutant.module}.{mutant.function}")
        again = ["--controller", mutant.controller, "--mode", "random"]
        again += ["--full"] if args.full else []
        again += ["--seeds", str(args.seeds)] if args.seeds else []
        again += ["--seconds", str(args.seconds)] if args.seconds else []
        with mutants.installed(mutant):
            return main(again)
    if args.seed is not None:
        if len(controllers) != 1:
            parser.error("--seed needs one --controller")
        return _one_seed(
            controllers[0],
            args.seed,
            args.steps or plan.of(controllers[0]).steps,
            not args.no_shrink,
        )
    failed = False
    started = time.monotonic()
    for name in controllers:
        scope = plan.of(name)
        if args.mode in ("random", "both"):
            report = budget.random_runs(
                SCENARIOS[name],
                seeds=args.seeds or scope.seeds,
                first=args.first_seed,
                steps=args.steps or scope.steps,
                seconds=args.seconds or scope.seconds,
            )
            print(report.line(), flush=True)
            failed |= _failure(name, report.failure, shrink=not args.no_shrink)
        if args.mode in ("exhaustive", "both"):
            bounds = explore.Bounds(
                depth=args.depth or scope.depth,
                preemptions=args.preemptions if args.preemptions is not None else scope.preemptions,
                faults=args.faults if args.faults is not None else scope.faults,
            )
            found = explore.explore(
                SCENARIOS[name].small(), bounds, seconds=args.seconds or scope.exploring
            )
            print(budget.exhaustive_line(found, bounds), flush=True)
            failed |= _failure(name, found.failure, shrink=not args.no_shrink)
    print(f"sim: {time.monotonic() - started:.0f} s in all", flush=True)
    return 1 if failed else 0


def _failure(name: str, result: explore.Result | None, *, shrink: bool) -> bool:
    if result is None or result.violation is None:
        return False
    scenario = SCENARIOS[name]
    trace = result.trace
    if shrink:
        trace = explore.shrink(
            scenario, trace, result.violation.invariant, seed=result.seed, budget_seconds=180
        )
    print(f"FAILED {name} seed {result.seed}: {result.violation}")
    print(f"  shortest trace found ({len(trace)} choices, from {len(result.trace)}):")
    print("  ---- 8< ---- (a trace file: tests/simulation/traces/NAME.trace)")
    for line in explore.trace_file(name, result.seed, result.violation, trace):
        print(line)
    print("  ---- 8< ----")
    print("  replay: ./dev sim --replay FILE (the lines between the marks)")
    return True


def _one_seed(name: str, seed: int, steps: int, shrink: bool) -> int:
    result = explore.run_seed(SCENARIOS[name], seed, steps)
    print(
        f"{name} seed {seed}: {result.steps} steps, then {result.quiet_steps} quiet; {result.swarm}"
    )
    if result.violation is None:
        for line in result.trace:
            print(f"    {line}")
        print("every invariant held")
        return 0
    _failure(name, result, shrink=shrink)
    return 1


def _replay(name: str, path: Path) -> int:
    saved = explore.read_trace(path.read_text())
    scenario = SCENARIOS[saved.scenario or name]
    result = explore.replay(scenario, saved.trace, seed=saved.seed)
    matched = f"{result.matched}/{len(saved.trace)} choices matched"
    if result.violation is None:
        print(f"replayed {path.name} on {scenario.name} ({matched}): every invariant held")
        return 0
    print(f"replayed {path.name} on {scenario.name} ({matched}): {result.violation}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
