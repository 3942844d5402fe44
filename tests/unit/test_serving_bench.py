"""The replay of ``./dev bench serving``: its mechanics on hand-built traces, so that the
figures it prints come from the model its docstring states."""

from __future__ import annotations

from benchmarks.capacity.traces import Trace
from benchmarks.serving import (
    DEPLOY_SECONDS,
    REPLACE_SECONDS,
    RESTART_ATTEMPTS,
    RESTART_BOOT,
    SpotPool,
    granted,
    hedged,
    minute_values,
    policies,
    spot_only,
)
from shared.domain.serving.model import ServingSettings

CFG = ServingSettings()


def test_a_dip_inside_a_minute_counts_for_the_whole_minute():
    # 30-second values: the dip in the second half of minute 1 takes minute 1.
    trace = Trace("t", 30.0, (1, 1, 1, 0, 1, 1))
    assert minute_values(trace) == [1, 0, 1]
    assert minute_values(trace, limit=2) == [1, 0]


def test_a_zone_grants_replicas_in_proportion_to_what_its_probe_kept_rounded_down():
    assert [granted(v, 4, 5) for v in range(5)] == [0, 1, 2, 3, 5]
    assert [granted(v, 1, 2) for v in (0, 1)] == [0, 2]


def test_a_restart_that_finds_capacity_serves_after_its_boot():
    pool = SpotPool(1)
    pool.step(0, 0)  # reclaimed
    assert pool.available() == 0
    pool.step(60, 1)  # the first restart attempt finds capacity
    for t in range(60, 60 + RESTART_BOOT, 60):
        pool.step(t, 1)
        assert pool.available() == 0
    pool.step(60 + RESTART_BOOT, 1)
    assert pool.available() == 1


def test_after_six_failed_restarts_the_node_waits_for_capacity_then_a_new_placement():
    pool = SpotPool(1)
    t = 0
    for t in range(0, 60 * (RESTART_ATTEMPTS + 3), 60):
        pool.step(t, 0)
    assert pool.nodes[0].status == "EXHAUSTED"
    back = t + 60
    pool.step(back, 1)
    pool.step(back + REPLACE_SECONDS - 60, 1)
    assert pool.available() == 0
    pool.step(back + REPLACE_SECONDS, 1)
    assert pool.available() == 1


def test_an_hour_without_spot_plain_spot_serves_nothing_and_hedging_serves_after_its_deploy():
    minutes = 60 + 120 + 60
    caps = [1] * 60 + [0] * 120 + [1] * 60
    plain = spot_only("t", caps, 1, 1, 0, "plain Spot")
    hedge = hedged("t", caps, 1, 1, CFG)
    assert plain.minutes == hedge.minutes == minutes
    # Plain Spot: down for the 2 h outage, then a new placement after six failed restarts.
    assert plain.any == minutes - 120 - REPLACE_SECONDS // 60
    # Hedging: the grace period (5 ticks), the DeployModel (20 min), then the tick that
    # shifts the traffic; nothing serves in between.
    gap = 5 + DEPLOY_SECONDS // 60 + 1
    assert hedge.hedges == 1
    assert hedge.any == minutes - gap
    assert hedge.full == hedge.any
    # The fallback was billed from its deploy call: never cheaper than its gap suggests.
    assert hedge.on_demand_node_seconds >= (120 - 5) * 60


def test_every_policy_replays_the_same_minutes_and_on_demand_is_the_unit_of_cost():
    caps = [4, 4, 3, 0, 0, 4] * 40
    runs = policies("t", caps, 4, 4, CFG)
    assert {r.minutes for r in runs} == {len(caps)}
    on_demand = runs[0]
    assert on_demand.vs_on_demand(0.4, 1.0) == 1.0
    assert (on_demand.full, on_demand.any) == (len(caps), len(caps))
