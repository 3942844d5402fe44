"""Preemption and the waiting estimate (shared.domain.admission.preemption, .estimate), on
plain values, with properties over random running jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.admission.config import Pool, Resource, read_queues
from shared.domain.admission.estimate import Running, estimate_start, position
from shared.domain.admission.preemption import choose_victims
from shared.domain.admission.quota import Ceiling, add, shortfalls, usage_of
from shared.domain.admission.rule import Standing, Workload

T0 = datetime(2026, 12, 1, tzinfo=UTC)
R = Resource("us-central1", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)
WHERE = {"region": "us-central1", "acceleratorType": "NVIDIA_H100_80GB", "pool": "PREEMPTIBLE"}
PRIORITIES = {"high": 100, "normal": 0}


def queue(name: str, nominal: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "quotas": [{**WHERE, "nominal": nominal}],
        "priorities": PRIORITIES,
        **extra,
    }


def job(rid: str, q: str, gpus: int, priority: int = 0, ago: float | None = 1.0, **kw: Any):
    checkpoint = None if ago is None else T0 - timedelta(hours=ago)
    return Running(rid, q, priority, {R: gpus}, checkpoint=checkpoint, **kw)


def standing_of(running: list[Running], ceiling: Ceiling | None = None) -> Standing:
    return Standing(usage_of((j.queue, j.demand) for j in running), ceiling or Ceiling())


def urgent(gpus: int, q: str = "a") -> Workload:
    return Workload("urgent", q, 100, T0, {R: gpus})


def names(victims: Any) -> list[str] | None:
    return None if victims is None else [v.request_id for v in victims]


WITHIN = {"preemption": {"withinQueue": True}}


def test_it_picks_the_freshest_checkpoint_and_only_as_many_as_needed():
    queues = read_queues({"queues": [queue("a", 16, **WITHIN)]})
    running = [job("old", "a", 4, ago=5), job("new", "a", 4, ago=0.1), job("mid", "a", 8, ago=1)]
    assert names(choose_victims(queues, standing_of(running), running, urgent(4))) == ["new"]
    # 8 needed: new (4) is not enough, mid (8) is; new is then spared.
    assert names(choose_victims(queues, standing_of(running), running, urgent(8))) == ["mid"]
    assert names(choose_victims(queues, standing_of(running), running, urgent(12))) == [
        "new",
        "mid",
    ]
    assert choose_victims(queues, standing_of(running), running, urgent(17)) is None


def test_no_checkpoint_no_preemption_unless_the_queue_allows_it():
    running = [job("bare", "a", 8, ago=None)]
    strict = read_queues({"queues": [queue("a", 8, **WITHIN)]})
    assert choose_victims(strict, standing_of(running), running, urgent(8)) is None
    lax = read_queues(
        {"queues": [queue("a", 8, preemption={"withinQueue": True, "requireCheckpoint": False})]}
    )
    assert names(choose_victims(lax, standing_of(running), running, urgent(8))) == ["bare"]


def test_preemption_is_opt_in_and_never_takes_an_equal_or_higher_priority():
    running = [job("peer", "a", 8, priority=100)]
    on = read_queues({"queues": [queue("a", 8, **WITHIN)]})
    off = read_queues({"queues": [queue("a", 8)]})
    assert choose_victims(on, standing_of(running), running, urgent(8)) is None
    low = [job("low", "a", 8)]
    assert choose_victims(off, standing_of(low), low, urgent(8)) is None
    assert choose_victims(on, standing_of(low), low, urgent(4)) is not None
    assert choose_victims(on, Standing(), [], urgent(4)) == ()


def test_across_a_cohort_only_borrowed_capacity_is_taken_back():
    queues = read_queues(
        {
            "queues": [
                queue("a", 8, cohort="c", preemption={"withinCohort": True}),
                queue("b", 8, cohort="c"),
            ]
        }
    )
    # b borrows 4 of a's 8 (holds 12 of the cohort's 16) and a has 4 running.
    running = [job("b1", "b", 8), job("b2", "b", 4, ago=0.5), job("a1", "a", 4, ago=0.1)]
    victims = choose_victims(queues, standing_of(running), running, urgent(4))
    assert names(victims) == ["b2"]  # a's own job is not a candidate: a has no withinQueue
    # Within its nominal, b is never preempted by a.
    running = [job("b1", "b", 8), job("a1", "a", 8)]
    assert choose_victims(queues, standing_of(running), running, urgent(4)) is None


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[Running], int, bool]:
    running = []
    for i in range(draw(st.integers(1, 8))):
        ago = draw(st.none() | st.floats(0.01, 48.0))
        running.append(
            job(f"j{i}", "a", draw(st.integers(1, 8)), draw(st.sampled_from([0, 100])), ago)
        )
    return running, draw(st.integers(1, 24)), draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(situations())
def test_victims_make_it_fit_lose_least_work_and_none_is_spare(case):
    running, need, require = case
    preemption = {"withinQueue": True, "requireCheckpoint": require}
    queues = read_queues({"queues": [queue("a", 32, preemption=preemption)]})
    held = sum(j.demand[R] for j in running)
    ceiling = Ceiling({R: max(held, 1)})
    standing = standing_of(running, ceiling)
    victims = choose_victims(queues, standing, running, urgent(need))
    a = queues.queue("a")
    if victims is None:
        eligible = [j for j in running if j.priority < 100 and (j.checkpoint or not require)]
        usage = usage_of((j.queue, j.demand) for j in running if j not in eligible)
        assert shortfalls(queues, usage, ceiling, a, {R: need})  # even all of them: no fit
        return
    for v in victims:
        assert v.priority < 100 and (v.checkpoint is not None or not require)
    usage = usage_of((j.queue, j.demand) for j in running if j not in victims)
    assert not shortfalls(queues, usage, ceiling, a, {R: need})
    for v in victims:
        add(usage, v.queue, v.demand, 1)
        assert shortfalls(queues, usage, ceiling, a, {R: need}), "a victim was not needed"
        add(usage, v.queue, v.demand, -1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | st.floats(0.01, 48.0), min_size=1, max_size=8), st.integers(1, 4))
def test_of_jobs_alike_the_victim_is_the_freshest_checkpoint(agos, need):
    running = [job(f"j{i}", "a", 4, ago=ago) for i, ago in enumerate(agos)]
    queues = read_queues({"queues": [queue("a", 4 * len(running), **WITHIN)]})
    victims = choose_victims(queues, standing_of(running), running, urgent(need))
    with_checkpoint = [j for j in running if j.checkpoint is not None]
    if not with_checkpoint:
        assert victims is None
        return
    assert victims is not None and len(victims) == 1
    assert victims[0].checkpoint == max(j.checkpoint for j in with_checkpoint)


def test_position_is_the_place_in_its_own_queue():
    t = T0
    ws = [
        Workload("a1", "a", 0, t, {R: 1}),
        Workload("a2", "a", 0, t + timedelta(minutes=1), {R: 1}),
        Workload("a0", "a", 100, t + timedelta(minutes=5), {R: 1}),
        Workload("b1", "b", 0, t - timedelta(hours=1), {R: 1}),
    ]
    assert [position(ws, r) for r in ("a0", "a1", "a2", "b1")] == [1, 2, 3, 1]


def test_the_estimate_replays_the_rule_over_expected_ends():
    queues = read_queues({"queues": [queue("a", 16)]})
    running = [
        job("r1", "a", 8, expected_end=T0 + timedelta(hours=1)),
        job("r2", "a", 8, expected_end=T0 + timedelta(hours=3)),
    ]
    standing = standing_of(running)
    ws = [
        Workload("first", "a", 0, T0, {R: 8}),
        Workload("second", "a", 0, T0 + timedelta(seconds=1), {R: 8}),
        Workload("third", "a", 0, T0 + timedelta(seconds=2), {R: 8}),
    ]
    start = {
        w.request_id: estimate_start(queues, standing, ws, running, w.request_id, now=T0)
        for w in ws
    }
    assert start["first"] == T0 + timedelta(hours=1)
    assert start["second"] == T0 + timedelta(hours=3)
    assert start["third"] is None  # what the replay admits never ends in it: unknown
    # An end already past counts from now; a workload that fits starts now.
    late = [job("r1", "a", 8, expected_end=T0 - timedelta(hours=1))]
    assert estimate_start(queues, standing_of(late), ws[:1], late, "first", now=T0) == T0
    assert estimate_start(queues, standing_of(late), ws[:2], late, "second", now=T0) == T0
    assert estimate_start(queues, standing, ws, running, "nobody", now=T0) is None
