"""The trace-replay simulator of ``./dev bench capacity``: its mechanics on hand-built traces."""

from __future__ import annotations

import math

import pytest

from benchmarks.capacity import (
    Auto,
    Job,
    Ladder,
    OnDemand,
    Plan,
    Replay,
    SpotRetries,
    Trace,
    UniformProgress,
    View,
    simulate,
)
from shared.domain.capacity.model import Prices

GAP = 600.0  # one value every 10 minutes
PRICES = Prices(standard=4.0, spot=1.0, flex_start=2.0)


def job(spot: tuple[int, ...], flex: tuple[int, ...] = (1,), *, nodes: int = 1, **kw) -> Job:
    """A 2 h job (5-minute restarts, a checkpoint every 20 min) due in ``deadline`` seconds."""
    fields = {
        "name": "hand-built",
        "factor": 2.0,
        "work": 7200.0,
        "deadline": 14400.0,
        "overhead": 300.0,
        "interval": 1200.0,
        "nodes": nodes,
        "spot": Replay(Trace("spot", GAP, spot), nodes, 0),
        "flex": Replay(Trace("flex", GAP, flex), nodes, 0),
        "prices": PRICES,
    }
    return Job(**{**fields, **kw})


def test_a_drop_is_a_preemption_and_the_work_since_the_checkpoint_is_lost():
    # Spot holds for 40 min, is gone for 20 min, then holds for good.
    result = simulate(job((1, 1, 1, 1, 0, 0) + (1,) * 30), SpotRetries())
    first, second = result.history
    # 40 min ran: 5 min restart, then 35 min of work, of which one 20-minute checkpoint kept.
    assert (first.failure, first.running_seconds, first.lost_seconds) == ("preempted", 2400, 900)
    # Queued for the 20 minutes without capacity, then the 100 minutes left plus a restart.
    assert (second.queued_seconds, second.running_seconds) == (1200, 300 + 6000)
    assert result.finish == 3600 + 6300
    assert result.lost == 900
    assert result.waited == 1200
    assert result.cost == pytest.approx(PRICES.spot * (2400 + 6300) / 3600)
    assert not result.missed


def test_a_preemption_before_the_first_checkpoint_loses_the_whole_attempt():
    result = simulate(job((1, 1, 0) + (1,) * 30), SpotRetries())
    assert result.history[0].lost_seconds == 1200  # all of it, restart included
    assert result.finish == 1800 + 300 + 7200


def test_a_gang_needs_every_node_and_loses_them_together():
    spot = (4, 4, 3) + (4,) * 30  # one node of four reclaimed: the gang job is preempted
    result = simulate(job(spot, (4,), nodes=4), SpotRetries())
    assert result.history[0].failure == "preempted"
    assert result.cost == pytest.approx(4 * PRICES.spot * (1200 + 300 + 7200 - 0) / 3600)


def test_flex_start_starts_when_availability_covers_every_node_then_runs_unpreempted():
    flex = (0, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)  # all 4 nodes only at the 4th tick
    result = simulate(job((0,), flex, nodes=4), Ladder())
    (attempt,) = result.history
    assert (attempt.strategy, attempt.queued_seconds) == ("FLEX_START", 1800)
    assert attempt.running_seconds == 300 + 7200  # availability dropping later is no preemption
    assert result.waited == 1800


def test_a_flex_start_wait_expires_then_the_ladder_climbs():
    result = simulate(job((0,), (0,) * 100, deadline=30 * 3600.0), Ladder())
    assert [a.failure for a in result.history] == ["max-wait-expired"] * 2 + [None]
    assert result.history[-1].strategy == "STANDARD"
    assert result.waited == 2 * 7200
    assert result.finish == 2 * 7200 + 300 + 7200


def test_replays_are_cyclic_and_never_is_infinite():
    replay = Replay(Trace("t", GAP, (0, 0, 1)), 1, 2)  # starts at the third tick
    assert replay.available_at(0) == 0
    assert replay.lost_at(0) == GAP  # the next tick wraps to the first value
    assert replay.available_at(GAP) == 3 * GAP
    assert Replay(Trace("t", GAP, (0, 0)), 1, 0).available_at(0) == math.inf


def test_on_demand_is_always_there():
    result = simulate(job((0,)), OnDemand())
    assert (result.finish, result.waited, result.lost) == (7500, 0, 0)
    assert result.cost == pytest.approx(PRICES.standard * 7500 / 3600)


def test_a_policy_asked_at_checkpoints_switches_there_without_losing_work():
    class SwitchOnce(OnDemand):
        def at_checkpoint(self, view: View, running: str) -> Plan | None:
            return Plan("SPOT") if running == "STANDARD" else None

    result = simulate(job((1,) * 40), SwitchOnce())
    on_demand, spot = result.history
    assert (on_demand.running_seconds, on_demand.lost_seconds) == (300 + 1200, 0)
    assert spot.running_seconds == 300 + 6000
    assert result.lost == 0


@pytest.mark.parametrize("policy", [UniformProgress(), Auto()])
def test_deadline_policies_meet_a_deadline_spot_alone_would_miss(policy):
    # Spot is gone after the first 40 minutes for good, and FLEX_START never comes.
    spot = (1, 1, 1, 1) + (0,) * 60
    tight = job(spot, (0,), deadline=3 * 3600.0)
    assert simulate(tight, SpotRetries()).missed
    result = simulate(tight, policy)
    assert not result.missed
    assert result.history[0].strategy == "SPOT"
    assert result.history[-1].strategy == "STANDARD"


def test_auto_records_each_decision_it_made():
    auto = Auto()
    simulate(job((1,) * 40), auto)
    assert [d.strategy for d in auto.decisions] == ["SPOT"]
    assert auto.decisions[0].reason.startswith("on the uniform-progress line")
