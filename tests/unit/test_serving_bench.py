"""The replay of ``./dev bench serving``: its mechanics on hand-built traces, so that the
figures it prints come from the model its docstring states."""

from __future__ import annotations

from benchmarks.capacity.traces import Trace
from benchmarks.serving import (
    DEPLOY_SECONDS,
    GROW_SECONDS,
    HEDGING,
    REPLACE_SECONDS,
    RESTART_ATTEMPTS,
    RESTART_BOOT,
    SpotPool,
    ZonedPool,
    always_on_demand,
    frontier,
    granted,
    halves,
    hedged,
    knob_grid,
    learned_table,
    minute_values,
    plot_frontier,
    policies,
    print_frontier,
    print_objective_mode,
    region_zones,
    short,
    smallest_n,
    spot_ceiling,
    spot_only,
    spot_zone,
    standby,
    standby_floor,
    standby_held,
    undominated,
    verdicts,
)
from shared.adapters.packaged_prices import load_packaged_prices
from shared.adapters.serving_table import decode_table, encode_table
from shared.domain.serving.model import ServingSettings
from shared.domain.serving.objective import (
    AvailabilityObjective,
    Measured,
    ServingPolicy,
    choose,
    default_policy,
)

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


# --- the designs side by side ----------------------------------------------------------------

GRACE, HOLD = int(CFG.grace_seconds) // 60, int(CFG.hold_seconds) // 60
OUTAGE = [1] * 60 + [0] * 120 + [1] * 60


def test_a_warm_standby_with_its_share_keeps_one_replica_serving_through_an_outage():
    run = standby("t", OUTAGE, 1, 1, CFG, proportional=True)
    assert run.any == run.minutes
    # The minute the Spot replica goes, its share still reaches it; the next tick shifts it.
    assert run.full == run.minutes - 1
    # The standby is billed for every minute, whatever Spot does: N = 1 pays a whole replica.
    assert run.on_demand_node_seconds == run.minutes * 60


def test_a_warm_standby_at_zero_percent_loses_the_minute_before_the_shift():
    run = standby("t", OUTAGE, 1, 1, CFG, proportional=False)
    assert run.any == run.full == run.minutes - 1


def test_a_standby_grows_to_the_deficit_after_the_grace_period_and_shrinks_after_the_hold():
    caps = [4] * 60 + [0] * 120 + [4] * 60
    run = standby("t", caps, 4, 4, CFG, proportional=True)
    assert run.any == run.minutes
    # Short of all four from the loss until the grown replicas serve: the grace period, then
    # the MutateDeployedModel.
    assert run.full == run.minutes - GRACE - GROW_SECONDS // 60
    # Three more replicas billed from the grow call until the hold after Spot is back (its
    # nodes placed anew 15 minutes after capacity returns).
    call, back = 60 + GRACE, 180 + REPLACE_SECONDS // 60
    assert run.on_demand_node_seconds == (run.minutes + 3 * (back + HOLD - call)) * 60


def test_a_spread_node_whose_zone_is_gone_is_placed_anew_in_a_zone_with_capacity():
    pool = ZonedPool(2, 1)
    pool.step(0, [0, 1])  # zone 0 reclaims it; its first restart is a minute later
    pool.step(60, [0, 1])  # that restart fails: placed anew in zone 1
    assert [len(z.nodes) for z in pool.zones] == [0, 1]
    pool.step(60 + REPLACE_SECONDS - 60, [0, 1])
    assert pool.available() == 0
    pool.step(60 + REPLACE_SECONDS, [0, 1])
    assert pool.available() == 1
    # With no capacity anywhere, it stays where it is.
    stuck = ZonedPool(2, 1)
    for t in range(0, 600, 60):
        stuck.step(t, [0, 0])
    assert [len(z.nodes) for z in stuck.zones] == [1, 0] and stuck.available() == 0


def test_a_spot_fallback_goes_to_another_zone_with_capacity_else_on_demand():
    assert spot_zone([0, 0, 1], 1, 1) == 2
    assert spot_zone([1, 0, 0], 1, 1) is None  # the Spot model's own zone is never chosen
    assert spot_zone([0], 1, 1) is None
    assert spot_zone([0, 3], 4, 4) is None  # a zone must grant every replica asked for


def test_spot_fallback_first_pays_no_on_demand_and_dies_with_its_zone():
    caps = [1] * 60 + [0] * 120 + [1] * 60
    other = [1] * 240
    run = hedged("t", caps, 1, 1, CFG, zones=[other], spot_fallback=True)
    assert run.hedges == 1 and run.on_demand_node_seconds == 0
    assert run.any == run.minutes - GRACE - DEPLOY_SECONDS // 60 - 1
    # The other zone goes too, once the fallback serves: the rule hedges once, so nothing
    # serves until Spot comes back in the first zone.
    lost = [1] * 100 + [0] * 80 + [1] * 60
    dark = hedged("t", caps, 1, 1, CFG, zones=[lost], spot_fallback=True)
    assert dark.any < run.any - 70


def test_zone_siblings_are_the_same_collection_in_the_same_region():
    def trace(name):
        return (Trace(name, 60.0, (1, 1)), [1, 1], 1)

    loaded = [
        trace("preemption/1-node/gcp-x/us-central1-a_c3.json"),
        trace("preemption/1-node/gcp-x/us-central1-b_c3.json"),
        trace("preemption/1-node/gcp-x/us-east1-b_c3.json"),
        trace("preemption/1-node/gcp-y/us-central1-c_c3.json"),
    ]
    zones = region_zones(loaded)
    assert sorted(zones) == [loaded[0][0].name, loaded[1][0].name]


def test_the_region_ceiling_counts_minutes_with_capacity_in_any_zone():
    assert spot_ceiling([[1, 0, 0, 1], [0, 0, 1, 1]], 1) == 0.75
    assert spot_ceiling([[4, 3, 0, 0]], 4) == 0.5  # N = 4: one replica of four needs 1 of 4


def test_targets_and_bounds_are_computed_not_written_down():
    prices = load_packaged_prices()
    runs = policies("preemption/1-node/gcp-x/us-central1-a_c3.json", [1] * 100, 1, 1, CFG)
    on_demand = verdicts([runs[0]], prices, "NVIDIA_L4")["1-node GCP"]
    assert on_demand[-3:] == (True, True, False)  # serves always, costs 1x
    # The standby pays one on-demand replica of N always: r + 1/N with Spot never failing,
    # (1 + r(N-1))/N at best; 0.5x needs N >= 10 and N >= 6 at r = 0.4.
    assert smallest_n(standby_held, 0.4) == 10
    assert smallest_n(standby_floor, 0.4) == 6
    assert smallest_n(standby_floor, 0.5) is None


# --- the knobs, SpotHedge and objective mode (issue 39) ----------------------------------------

DARK = GRACE + DEPLOY_SECONDS // 60 + 1  # the minutes a reactive hedge leaves dark


def test_a_warm_floor_serves_through_an_outage_and_the_hedge_covers_only_the_rest():
    caps = [4] * 60 + [0] * 120 + [4] * 60
    bare = hedged("t", caps, 4, 4, CFG)
    floor = hedged("t", caps, 4, 4, CFG, knobs=ServingPolicy(1, 0, True))
    assert bare.any == bare.minutes - DARK
    # The floor serves every minute; all four again once the fallback serves, as without it.
    assert floor.any == floor.minutes
    assert floor.full == bare.full == floor.minutes - DARK
    # The deficit is N - (Spot + floor): three on-demand replicas, where the bare hedge needs four.
    assert floor.warm_node_seconds == floor.minutes * 60
    fallback = floor.on_demand_node_seconds - floor.warm_node_seconds
    assert fallback * 4 == bare.on_demand_node_seconds * 3
    # The Spot model asks for N - k: three replicas billed while they hold.
    assert floor.spot_node_seconds * 4 == bare.spot_node_seconds * 3


def test_a_floor_without_the_hedge_keeps_one_replica_but_never_grows():
    run = hedged("t", OUTAGE, 1, 4, CFG, knobs=ServingPolicy(1, 0, False))
    assert run.any == run.minutes and run.hedges == 0
    assert run.on_demand_node_seconds == run.warm_node_seconds == run.minutes * 60


def test_a_floor_of_n_is_always_on_demand():
    run = hedged("t", OUTAGE, 1, 1, CFG, knobs=default_policy(1))
    baseline = always_on_demand("t", OUTAGE, 1, 1)
    assert (run.any, run.full, run.spot_node_seconds) == (run.minutes, run.minutes, 0)
    assert run.vs_on_demand(0.4, 1.0) == baseline.vs_on_demand(0.4, 1.0) == 1.0


def test_extra_spot_replicas_share_their_zone_and_are_billed_while_they_hold():
    plain = hedged("t", OUTAGE, 1, 1, CFG, knobs=ServingPolicy(0, 0, False))
    over = hedged("t", OUTAGE, 1, 1, CFG, knobs=ServingPolicy(0, 2, False))
    assert over.any == plain.any
    assert over.spot_node_seconds == 3 * plain.spot_node_seconds
    assert over.shares() == (3 * plain.shares()[0], 0.0)


def test_spothedge_falls_back_at_once_and_scales_down_as_soon_as_spot_is_ready():
    rule = hedged("t", OUTAGE, 1, 1, CFG)
    sky = hedged("t", OUTAGE, 1, 1, CFG, knobs=ServingPolicy(0, 1, True), skyserve=True)
    # No grace period: dark only for the DeployModel and the tick that shifts the traffic.
    assert sky.any == sky.minutes - DEPLOY_SECONDS // 60 - 1 > rule.any
    assert sky.hedges == 1
    # No hold: the on-demand replica goes when Spot serves again (a new placement 15 minutes
    # after capacity returns at minute 180), where the rule keeps it for the hold period.
    assert sky.on_demand_node_seconds == (180 + REPLACE_SECONDS // 60 - 60) * 60
    assert rule.on_demand_node_seconds > sky.on_demand_node_seconds


def test_spothedge_covers_an_over_provisioned_replica_even_while_n_serve():
    # Six Spot replicas for N = 4: at 3 of 4 the zone grants four, all N serve, and SkyServe
    # still provisions on-demand for the two it is short of its own target.
    caps = [4] * 30 + [3] * 60 + [4] * 30
    run = hedged("t", caps, 4, 4, CFG, knobs=ServingPolicy(0, 2, True), skyserve=True)
    assert run.full == run.minutes
    assert run.hedges >= 1 and run.on_demand_node_seconds >= 2 * 60 * 60


def test_the_knob_grid_is_every_combination_and_a_floor_of_n_is_replayed_once():
    assert len(knob_grid(1)) == 2 * 3 + 3
    assert len(knob_grid(4)) == 4 * 5 * 2 + 5
    assert ServingPolicy(4, 0, True) not in knob_grid(4)
    assert default_policy(4) in knob_grid(4) and HEDGING in knob_grid(4)


def loaded_traces():
    def trace(name, caps, probe):
        return (Trace(name, 60.0, tuple(caps)), caps, probe)

    return [
        trace("preemption/1-node/aws-x/us-east-1b_v100_1.json", OUTAGE, 1),
        trace("preemption/1-node/aws-x/us-east-1c_v100_1.json", [1] * 240, 1),
        trace("preemption/1-node/aws-x/us-east-1d_v100_1.json", [1] * 200 + [0] * 40, 1),
        trace(
            "preemption/4-node/aws-y/us-east-2a_v100_1.json", [4] * 100 + [0] * 40 + [4] * 100, 4
        ),
        trace("preemption/4-node/aws-y/us-west-2c_v100_1.json", [4] * 240, 4),
    ]


def test_the_halves_alternate_by_name_within_each_group():
    learn, held = halves(loaded_traces())
    assert [short(t) for t in learn] == [
        "1n aws us-east-1b v100",
        "1n aws us-east-1d v100",
        "4n aws us-east-2a v100",
    ]
    assert [short(t) for t in held] == ["1n aws us-east-1c v100", "4n aws us-west-2c v100"]


def test_the_table_is_learned_on_one_half_and_chooses_from_its_worst_trace():
    loaded = loaded_traces()
    found = frontier(loaded, [], CFG)
    learn, _ = halves(loaded)
    table = learned_table(found, loaded, learn, 0.4, "NVIDIA_L4")
    assert table.learned_on == tuple(sorted(learn)) and table.spot_ratio == 0.4
    hedge = next(r for r in table.rows if r.replicas == 1 and r.policy == HEDGING)
    runs = [found.grid[(name, HEDGING)] for name in learn if "1-node" in name]
    # The worst learning trace, rounded down; the mean node-hour shares, rounded up.
    worst = min(r.any / r.minutes for r in runs)
    assert worst - 1e-6 < hedge.at_least_one <= worst < 1
    spot = sum(r.shares()[0] for r in runs) / len(runs)
    assert spot <= hedge.spot_share < spot + 1e-4
    # Over-provisioning in one zone serves no better than plain Spot and costs more: never a
    # choice, so it is not in the file; always on-demand is.
    assert all(r.policy.extra_spot == 0 for r in table.rows if r.replicas == 1)
    assert any(r.policy == default_policy(4) for r in table.rows)
    # N = 4 at >= 1 in 99.9%: a floor of one serves through the outage for far less than 1x.
    chosen = choose(AvailabilityObjective(0.999), 4, table)
    assert chosen.policy.min_on_demand == 1 and chosen.row is not None
    assert decode_table(encode_table(table).encode()) == table


def test_a_row_matched_or_beaten_on_every_figure_is_left_out_of_the_table():
    def row(policy, any_, all_, spot, on_demand):
        return Measured(4, policy, any_, all_, spot, on_demand)

    hedge, hedge_off = ServingPolicy(0, 0, True), ServingPolicy(0, 0, False)
    rows = [
        row(hedge_off, 0.9, 0.9, 1.0, 0.0),
        row(hedge, 0.9, 0.9, 1.0, 0.0),  # the same figures: the hedge is kept
        row(ServingPolicy(0, 1, False), 0.9, 0.9, 1.25, 0.0),  # beaten
        row(ServingPolicy(1, 0, True), 1.0, 0.9, 0.75, 0.3),  # more available, more on-demand
    ]
    assert [r.policy for r in undominated(rows)] == [hedge, ServingPolicy(1, 0, True)]


def test_the_frontier_report_and_plot_run_on_synthetic_traces(capsys, tmp_path):
    # One more 4-node trace alone in its group: it learns, and nothing of it is held out.
    loaded = [
        *loaded_traces(),
        (Trace("preemption/2-node/aws-z/us-east-1a_v100_1.json", 60.0, (2,) * 60), [2] * 60, 2),
    ]
    found = frontier(loaded, [], CFG)
    learn, held = halves(loaded)
    table = learned_table(found, loaded, learn, 0.4, "NVIDIA_L4")
    print_frontier(found, loaded, held, table, 0.4, "NVIDIA_L4")
    print_objective_mode(found, loaded, (learn, held), table, 0.4, "NVIDIA_L4")
    out = capsys.readouterr().out
    assert "The cost-availability frontier" in out and "Objective mode, held out" in out
    assert "2-node AWS (N=2): one trace, nothing held out" in out
    assert "halves swapped" in out
    assert plot_frontier(found, loaded, held, table, 0.4, tmp_path).stat().st_size > 0
