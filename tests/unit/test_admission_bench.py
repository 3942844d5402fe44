"""The model of ``./dev bench admission``: its parts on hand-built jobs, so that the figures it
prints come from the model its docstring states, and its checks can fail."""

from __future__ import annotations

from benchmarks.admission import (
    EPOCH,
    IDLE_ARRIVED,
    IDLE_BORROWS,
    IDLE_HELD,
    IDLE_LAG,
    IDLE_NOTHING,
    QUOTA,
    RESOURCE,
    TICK_SECONDS,
    Job,
    Meter,
    acceptance,
    admission,
    park_and_retry,
    queue_file,
    tick_at_or_after,
    utilisation,
    why_idle,
    workload,
)
from shared.domain.admission.rule import Workload
from shared.domain.policy.retry import Backoff


def job(rid: str, team: str, gpus: int, at: float = 0.0, length: float = 3600.0, priority=0):
    return Job(rid, team, priority, at, gpus, length, seed=1)


def test_the_workload_is_seeded_and_holds_the_sweep_and_the_bursts():
    jobs = workload(7)
    assert jobs == workload(7) and jobs != workload(8)
    trials = [j for j in jobs if j.team == "team-c" and j.gpus == 1 and j.duration <= 2400]
    assert len(trials) >= 500
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    assert len({j.rid for j in jobs}) == len(jobs)


def test_the_queues_split_the_quota_by_weight():
    queues = queue_file()
    nominal = [q.quotas for name, q in queues.queues.items() if name != "default"]
    assert sorted(sum(quota.nominal for quota in n.values()) for n in nominal) == [5, 11, 16]


def test_vertex_refuses_a_create_past_the_quota_and_an_inversion_is_counted():
    low, high = job("low", "team-a", 4), job("high", "team-b", 4, priority=100)
    meter2 = Meter(8, 3600.0)
    for j in (low, high):
        meter2.arrive(j)
    assert meter2.create(low, 0.0)  # high (4) fits the 8 free and waits: an inversion
    assert meter2.inversions == 1
    assert not meter2.create(job("more", "team-a", 8), 0.0)
    assert meter2.refused == 1


def test_utilisation_counts_only_while_demand_exceeds_the_quota():
    meter = Meter(8, 100.0)
    meter.arrive(job("a", "team-a", 8))
    meter.arrive(job("b", "team-b", 4))
    assert meter.create(job("a", "team-a", 8), 0.0)
    meter.advance(50.0)  # 8 held, 4 waiting: over the quota, fully used
    meter.end(job("a", "team-a", 8))
    meter.advance(100.0)  # 0 held, 4 waiting: demand below the quota, not counted
    assert meter.over_seconds == 50.0 and meter.over_held_gpu_seconds == 400.0


def test_park_and_retry_waits_the_jittered_backoff_then_the_tick():
    first = job("first", "team-a", QUOTA, length=10.0)
    second = job("second", "team-b", 1, at=1.0)
    meter = park_and_retry([first, second], 10_000.0, phase=0.0, backoff=Backoff(60, 1800))
    # Refused at t=1 (the quota is full until t=10); retry 1 waits uniform(0, 60) and runs at
    # the tick at or after it: the second create succeeds at a tick.
    assert meter.refused == 1 and meter.creates == 3
    (wait,) = meter.waits[0][1:]
    assert (wait + 1.0) % TICK_SECONDS == 0.0
    assert tick_at_or_after(61.0, 5.0) == 65.0


def test_admission_creates_only_at_ticks_and_sees_ends_a_tick_late():
    first = job("first", "team-a", QUOTA, length=30.0)
    second = job("second", "team-b", 1, at=1.0)
    meter = admission([first, second], 10_000.0, phase=0.0)
    assert meter.refused == 0 and meter.creates == 2
    # first created at the tick at 0; it ends at 30, seen at the tick at 60; second then.
    assert sorted(meter.waits[0]) == [0.0, 59.0]


def test_with_hints_an_end_is_seen_its_hint_later_and_the_ticks_go_on():
    first = job("first", "team-a", QUOTA, length=30.0)
    second = job("second", "team-b", 1, at=1.0)
    third = job("third", "team-b", 1, at=100.0)
    meter = admission([first, second, third], 10_000.0, phase=0.0, hint_seconds=10.0)
    # first ends at 30, its hint at 40 runs a pass: second then, not at the tick at 60;
    # third arrives at 100 and waits for the tick at 120 (a hint's pass starts no ticks).
    assert sorted(meter.waits[0]) == [0.0, 20.0, 39.0]


def test_the_acceptance_checks_fail_when_the_figures_miss():
    # A rule that creates everything at once: refusals, and every share off its weight.
    jobs = [job(f"c{i}", "team-c", 8, at=0.0) for i in range(6)] + [
        job("a", "team-a", 8, at=0.0, priority=100),
        job("b", "team-b", 8, at=0.0),
    ]

    def everything(queues, standing, waiting):
        return sorted(waiting, key=lambda w: w.queue, reverse=True)  # team-c first

    meter = admission(jobs, 7200.0, phase=0.0, rule=everything)
    marks = {what: ok for what, ok, _ in acceptance(meter)}
    assert not marks["no create refused for quota"]
    assert not marks["no priority inversion"]
    assert not any(ok for what, ok in marks.items() if "share" in what)


def test_idle_gpus_are_counted_by_why_while_demand_exceeds_the_quota():
    # "a" takes the whole quota for 30 s; "b" and "c" ask more than all of it from t=2.
    first = job("a", "team-a", QUOTA, length=30.0)
    second = job("b", "team-b", QUOTA, at=1.0, length=3600.0)
    third = job("c", "team-c", 8, at=2.0)
    meter = admission([first, second, third], 600.0, phase=0.0)
    # a ends at 30 and is seen at the tick at 60: its 32 GPUs idle for 30 s; b then holds all.
    assert meter.idle == {IDLE_LAG: QUOTA * 30.0}
    assert utilisation(meter) == 1 - (QUOTA * 30.0) / (QUOTA * meter.over_seconds)


def test_free_gpus_nothing_fits_are_counted_as_such_until_an_arrival_fits_them():
    running = job("a", "team-a", 24, length=3600.0)
    big = job("b", "team-b", 16, at=1.0)  # 8 free: it does not fit, and waits from t=1
    small = job("c", "team-c", 4, at=100.0)  # fits the 8, and waits for the tick at 120
    meter = admission([running, big, small], 200.0, phase=0.0)
    # c goes at 120 (within its queue's nominal); the 4 left fit nothing waiting.
    assert meter.waiting.keys() == {"b"}
    assert meter.idle == {IDLE_NOTHING: 8 * 99.0 + 4 * 80.0, IDLE_ARRIVED: 8 * 20.0}


def test_what_fits_only_by_borrowing_is_counted_apart():
    queues = queue_file()
    usage = {"team-b": {RESOURCE: 24}, "team-c": {RESOURCE: 4}}
    t = EPOCH
    borrowing = Workload("b", "team-b", 0, t, {RESOURCE: 2})
    within = Workload("c", "team-c", 0, t, {RESOURCE: 1})  # team-c: 5 of nominal, 4 held
    head = Workload("a", "team-a", 0, t, {RESOURCE: 8})
    assert why_idle(queues, usage, 4, [head, borrowing]) == IDLE_BORROWS
    assert why_idle(queues, usage, 4, [head, borrowing, within]) == IDLE_HELD
    assert why_idle(queues, usage, 1, [head, borrowing]) == IDLE_NOTHING
