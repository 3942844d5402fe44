"""The deterministic simulator in CI: every controller over its CI budget (random runs and the
exhaustive exploration of its small scope), the regression traces of the defects it found,
and the simulator's own properties (a seed replays exactly; the invariants are the ones
docs/simulation.md lists).

What a budget run prints (its figures) is what ``./dev sim`` prints; the figures of a run are
in the closing notes and docs/simulation.md, never asserted here (a timed test would flatter
or flake)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simulation import budget, explore, mutants
from tests.simulation.invariants import INVARIANTS
from tests.simulation.scenarios import SCENARIOS

TRACES = Path(__file__).parent / "traces"
DOC = Path(__file__).parents[2] / "docs" / "simulation.md"
#: The scenarios whose small scope the exhaustive mode explores in CI.
SMALL = ("jobs", "serving", "admission", "quota")


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    # The real handlers log every step: millions of lines over a budget, read by nobody.
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _explain(name: str, result: explore.Result) -> str:
    assert result.violation is not None
    lines = explore.trace_file(name, result.seed, result.violation, result.trace)
    return "\n".join([str(result.violation), *lines])


@pytest.mark.parametrize("controller", sorted(SCENARIOS))
def test_every_controller_keeps_its_invariants_over_random_runs(controller: str) -> None:
    scope = budget.CI.of(controller)
    report = budget.random_runs(
        SCENARIOS[controller], seeds=scope.seeds, steps=scope.steps, seconds=scope.seconds
    )
    print(report.line())
    assert report.seeds >= 1 and report.points > 0
    if report.failure is not None:
        pytest.fail(_explain(controller, report.failure))


@pytest.mark.parametrize("controller", SMALL)
def test_every_interleaving_of_a_small_scope_keeps_the_invariants(controller: str) -> None:
    scope = budget.CI.of(controller)
    bounds = explore.Bounds(scope.depth, scope.preemptions, scope.faults)
    found = explore.explore(SCENARIOS[controller].small(), bounds, seconds=scope.exploring)
    print(budget.exhaustive_line(found, bounds))
    assert found.schedules >= 1 and found.deepest >= 1
    if found.failure is not None:
        pytest.fail(_explain(controller, found.failure))


def _traces() -> list[Path]:
    return sorted(TRACES.glob("*.trace"))


@pytest.mark.parametrize("path", _traces(), ids=lambda p: p.stem)
def test_a_defect_found_by_the_simulator_stays_fixed(path: Path) -> None:
    """Each trace drove the unfixed code into the invariant its header names; replayed on
    today's code, every invariant holds, and the replay still drives the interleaving (most
    of its choices find their step: a trace that no longer matches tests nothing)."""
    saved = explore.read_trace(path.read_text())
    assert saved.headers.get("invariant") in {i.name for i in INVARIANTS}, path.name
    result = explore.replay(SCENARIOS[saved.scenario], saved.trace, seed=saved.seed)
    if result.violation is not None:
        pytest.fail(f"{path.name}: {result.violation}")
    assert result.matched >= 0.6 * len(saved.trace), (
        f"{path.name}: only {result.matched} of {len(saved.trace)} choices found their step"
    )


@pytest.mark.parametrize(
    "path",
    [p for p in _traces() if "mutant" in explore.read_trace(p.read_text()).headers],
    ids=lambda p: p.stem,
)
def test_a_trace_fails_again_with_its_fix_taken_out(path: Path) -> None:
    """A trace whose header names its mutant (its fix taken out): replayed with the mutant,
    it breaks the invariant it broke on the unfixed code, so it still reaches the defect."""
    saved = explore.read_trace(path.read_text())
    mutant = mutants.BY_NAME[saved.headers["mutant"]]
    with mutants.installed(mutant):
        result = explore.replay(SCENARIOS[saved.scenario], saved.trace, seed=saved.seed)
    assert result.violation is not None, path.name
    assert result.violation.invariant == saved.headers["invariant"], result.violation


def test_every_defect_of_the_issue_has_its_trace() -> None:
    defects = {int(m) for p in _traces() if (m := p.stem.split("-", 1)[0]).isdigit()}
    assert defects == set(range(1, 18)), sorted(set(range(1, 18)) - defects)


@pytest.mark.parametrize("name", [m.name for m in mutants.MUTANTS if m.ci])
def test_a_fixed_defect_put_back_is_found_within_the_ci_budget(name: str) -> None:
    """A fix's line taken out again (:mod:`tests.simulation.mutants`): the simulator's own
    exploration, on the controller's CI budget, fails the invariant that defect broke."""
    mutant = mutants.BY_NAME[name]
    scope = budget.CI.of(mutant.controller)
    with mutants.installed(mutant):
        report = budget.random_runs(
            SCENARIOS[mutant.controller],
            seeds=scope.seeds,
            steps=scope.steps,
            seconds=scope.seconds,
        )
    print(report.line())
    assert report.failure is not None and report.failure.violation is not None, name
    assert report.failure.violation.invariant == mutant.invariant, report.failure.violation


def test_a_seed_replays_exactly() -> None:
    scenario = SCENARIOS["serving"]
    first = explore.run_seed(scenario, 7, 120)
    again = explore.run_seed(scenario, 7, 120)
    other = explore.run_seed(scenario, 8, 120)
    assert first.trace == again.trace and first.points == again.points
    assert first.trace != other.trace
    # The trace alone (its labels) drives the same run again.
    replayed = explore.replay(scenario, first.trace, seed=7)
    assert replayed.trace == first.trace and replayed.matched == len(first.trace)


def test_the_invariants_are_the_ones_the_docs_list() -> None:
    section = DOC.read_text().split("## The invariants", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.MULTILINE)
    assert listed == [i.name for i in INVARIANTS]
    assert len(set(listed)) == len(listed)
