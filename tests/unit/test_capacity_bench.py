"""The trace replay of ``./dev bench capacity``: its mechanics on hand-built traces, in plain
values (the lifecycle's timing, gangs, the DWS models, the policies as the product asks them)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from benchmarks.capacity.dws import Correlated, Independent, MinimumDelay
from benchmarks.capacity.model import Job, Lifecycle, Plan, Site, View, simulate
from benchmarks.capacity.multiregion import MultiRegionAuto
from benchmarks.capacity.multiregion import population as regional_population
from benchmarks.capacity.policies import (
    EPOCH,
    Auto,
    GreedySpot,
    Ladder,
    OnDemand,
    UniformProgress,
    deadline_options,
)
from benchmarks.capacity.traces import Replay, Trace
from benchmarks.capacity.workload.population import population
from shared.adapters.packaged_prices import load_packaged_prices
from shared.domain.capacity.model import Prices
from shared.domain.capacity.rule import decide
from shared.domain.capacity.situations import situation_for_first_attempt
from shared.domain.policy.retry import Backoff, Budgets

GAP = 600.0  # one value every 10 minutes
PRICES = Prices(standard=4.0, spot=1.0, flex_start=2.0)
NO_BACKOFF = Lifecycle(backoff=Backoff(base_seconds=0))


def job(
    spot: tuple[int, ...], flex: tuple[int, ...] = (1,), *, nodes: int = 1, **fields: float
) -> Job:
    """A 2 h job (5-minute restarts, a checkpoint every 20 min) due in 4 h, its tick at 0 s."""
    values = {"work": 7200.0, "deadline": 14400.0, "overhead": 300.0, "interval": 1200.0}
    values.update(fields)
    site = Site(
        "us-east-1",
        Replay(Trace("s", GAP, spot), nodes, 0),
        Replay(Trace("f", GAP, flex), nodes, 0),
    )
    return Job(name="hand-built", nodes=nodes, sites=(site,), seed=7, **values)


class Always:
    """One strategy for every attempt (queued until capacity), never leaving one."""

    def __init__(self, strategy: str, **plan: float) -> None:
        self.name, self.plan = strategy, Plan(strategy, **plan)

    def start(self, view: View) -> Plan:
        return self.plan

    def at_checkpoint(self, view: View, running: str) -> Plan | None:
        return None


def test_a_preemption_loses_the_work_since_the_checkpoint_and_the_retry_waits_its_backoff():
    # Spot holds for 40 min, then is gone for 20, then holds for good.
    result = simulate(job((1, 1, 1, 1, 0, 0) + (1,) * 30), Always("SPOT"))
    first, second = result.history
    # 40 min ran: the 5-minute restart, then 35 min of work, of which one checkpoint kept.
    assert (first["errorClass"], first["runningSeconds"], first["workLostSeconds"]) == (
        "preempted",
        2400,
        900,
    )
    # The tick notices the preemption at 2400 s; the product's backoff for retry 1 (its base
    # 60 s window, jittered from the job's seed), then the next tick runs the retry.
    delay = Backoff(jitter=random.Random(7).random).seconds(1)
    retried_at = 60.0 * math.ceil((2400 + delay) / 60.0)
    assert 2400 < retried_at <= 2400 + 120
    # Spot is back at 3600 s: queued until then, then the 100 minutes left plus a restart.
    assert second["queuedSeconds"] == 3600 - retried_at
    assert result.finish == 3600 + 300 + 6000
    assert result.gpu_seconds["SPOT"] == 2400 + 6300


def test_the_longest_backoff_is_charged_before_the_next_decision():
    # A 30-minute backoff window from the first retry: the job waits it out after the
    # preemption even though Spot is back at once.
    life = Lifecycle(backoff=Backoff(base_seconds=1800, cap_seconds=1800, jitter=lambda: 1.0))
    spot = (1, 1, 0) + (1,) * 40
    result = simulate(job(spot), Always("SPOT"), lifecycle=life)
    assert result.history[0]["runningSeconds"] == 1200
    seed_free = Backoff(base_seconds=1800, cap_seconds=1800, jitter=random.Random(7).random)
    waited = 60.0 * math.ceil((1200 + seed_free.seconds(1)) / 60.0)
    assert result.history[1]["queuedSeconds"] == 0
    assert result.finish == waited + 300 + 7200
    assert result.finish > 1200 + 300 + 7200  # the backoff was charged


def test_without_a_hint_the_tick_notices_a_failure():
    # The job's tick falls at 45 s past each minute: a preemption at 1200 s is noticed at
    # 1245 s, and with no backoff the retry (on-demand here) runs then.
    class SpotThenOnDemand(Always):
        def start(self, view: View) -> Plan:
            return Plan("STANDARD") if view.attempts else Plan("SPOT")

    base = job((1, 1, 0) + (1,) * 40)
    ticked = Job(**{**base.__dict__, "tick_phase": 45.0})
    result = simulate(ticked, SpotThenOnDemand("SPOT"), lifecycle=NO_BACKOFF)
    assert result.finish == 1245 + 300 + 7200


def test_a_gang_needs_every_node_and_loses_them_all_when_one_is_reclaimed():
    spot = (4, 4, 3) + (4,) * 30  # one node of four reclaimed at 1200 s
    result = simulate(job(spot, nodes=4), Always("SPOT"), lifecycle=NO_BACKOFF)
    assert result.history[0]["errorClass"] == "preempted"
    assert result.history[0]["runningSeconds"] == 1200
    assert result.gpu_seconds["SPOT"] == 4 * (1200 + 300 + 7200)
    # Three nodes free are not capacity for it.
    waiting = simulate(job((3, 3, 4) + (4,) * 30, nodes=4), Always("SPOT"))
    assert waiting.history[0]["queuedSeconds"] == 1200


def test_the_independent_dws_model_places_at_the_first_tick_covering_every_node():
    flex = (0, 2, 3, 4, 0, 0) + (0,) * 20  # all 4 nodes only at the fourth tick
    result = simulate(
        job((0,), flex, nodes=4), Always("FLEX_START", max_wait=7200.0), Independent()
    )
    (attempt,) = result.history
    assert attempt["queuedSeconds"] == 1800
    assert attempt["runningSeconds"] == 300 + 7200  # availability dropping later is no preemption


def test_the_minimum_delay_model_places_no_sooner_than_30_minutes_after_the_request():
    model = MinimumDelay()
    result = simulate(job((0,), (1,)), Always("FLEX_START", max_wait=7200.0), model)
    assert result.history[0]["queuedSeconds"] == 1800
    always = Replay(Trace("f", GAP, (1,)), 1, 0)
    assert model.placed_at(always, always, 0.0, 1799.0) == math.inf


def test_the_correlated_model_places_only_while_spot_has_capacity_too():
    flex = (1, 1, 0, 1, 1) + (1,) * 20
    spot = (0, 0, 1, 0, 1) + (1,) * 20
    # DWS alone would place at once; Spot's drought holds it until both are there (tick 4).
    assert Independent().placed_at(*_replays(spot, flex), 0.0, 86400.0) == 0
    assert Correlated().placed_at(*_replays(spot, flex), 0.0, 86400.0) == 4 * GAP
    # Never together within the limit: not placed.
    assert Correlated().placed_at(*_replays((0, 1), (1, 0)), 0.0, 86400.0) == math.inf


def _replays(spot: tuple[int, ...], flex: tuple[int, ...]) -> tuple[Replay, Replay]:
    return Replay(Trace("s", GAP, spot), 1, 0), Replay(Trace("f", GAP, flex), 1, 0)


def test_an_expired_flex_start_wait_charges_the_capacity_budget_and_backs_off():
    life = Lifecycle(backoff=Backoff(base_seconds=0), budgets=Budgets(capacity=1))
    result = simulate(job((0,), (0,)), Always("FLEX_START", max_wait=3600.0), lifecycle=life)
    # Expired twice: the first retried, the second past the budget of 1: the job fails.
    assert [a["errorClass"] for a in result.history] == ["max-wait-expired"] * 2
    assert result.finish == math.inf and result.missed


def test_a_wait_given_up_is_a_switch_at_the_tick_then_the_next_decision_a_tick_later():
    class SpotThenOnDemand(Always):
        def start(self, view: View) -> Plan:
            return Plan("SPOT", wait_until=630.0) if not view.attempts else Plan("STANDARD")

    result = simulate(job((0,) * 50), SpotThenOnDemand("SPOT"))
    given_up, on_demand = result.history
    # Given up at the first tick at or after 630 s (660 s), decided again at 720 s.
    assert (given_up["endedBy"], given_up["queuedSeconds"]) == ("gave-up", 660)
    assert result.switches == 1 and result.gpu_seconds["SPOT"] == 0
    assert result.finish == 720 + 300 + 7200
    assert on_demand["strategy"] == "STANDARD"


def test_leaving_on_demand_at_a_checkpoint_bills_to_it_and_loses_nothing():
    class SwitchOnce(Always):
        def at_checkpoint(self, view: View, running: str) -> Plan | None:
            return Plan("SPOT")

        def start(self, view: View) -> Plan:
            return Plan("SPOT") if view.attempts else Plan("STANDARD")

    result = simulate(job((1,) * 40), SwitchOnce("STANDARD"))
    on_demand, spot = result.history
    assert spot["strategy"] == "SPOT"
    assert on_demand["runningSeconds"] == 300 + 1200 and on_demand["endedBy"] == "switch"
    assert result.gpu_seconds["STANDARD"] == 1500
    # The next decision at the tick after the checkpoint (1560 s); 100 minutes left.
    assert result.finish == 1560 + 300 + 6000
    assert result.lost == 0


def test_auto_is_the_products_rule_through_the_lifecycles_situation_builders():
    table = load_packaged_prices()
    auto = Auto("NVIDIA_TESLA_A100", table)
    hand = job((1,) * 40)
    simulate(hand, auto)
    first = situation_for_first_attempt(
        deadline_options(hand),
        "NVIDIA_TESLA_A100",
        origin=EPOCH,
        now=EPOCH,
        prices=table,
        budgets=Lifecycle().budgets,
        backoff=Backoff(),
    )
    assert first is not None
    assert auto.decisions[0] == decide(first)
    assert auto.decisions[0].strategy == "SPOT"


@pytest.mark.parametrize("policy", [UniformProgress(), GreedySpot()])
def test_deadline_baselines_go_on_demand_when_spot_is_gone(policy):
    # Spot for the first 40 minutes, then gone for good; FLEX_START never comes.
    tight = job((1, 1, 1, 1) + (0,) * 60, (0,), deadline=3 * 3600.0)
    result = simulate(tight, policy, lifecycle=NO_BACKOFF)
    assert not result.missed
    assert result.history[0]["strategy"] == "SPOT"
    assert result.history[-1]["strategy"] == "STANDARD"


def test_auto_meets_that_deadline_too():
    tight = job((1, 1, 1, 1) + (0,) * 60, (0,), deadline=4 * 3600.0)
    result = simulate(tight, Auto("NVIDIA_TESLA_A100", load_packaged_prices()))
    assert not result.missed
    assert result.history[-1]["strategy"] == "STANDARD"


def test_the_ladder_climbs_from_flex_start_to_spot():
    result = simulate(job((1,) * 50, (0,)), Ladder(), lifecycle=NO_BACKOFF)
    expired, spot = result.history
    assert (expired["strategy"], expired["errorClass"]) == ("FLEX_START", "max-wait-expired")
    assert spot["strategy"] == "SPOT" and result.finish == 7200 + 300 + 7200


def test_on_demand_is_always_there_and_priced_per_node():
    result = simulate(job((0,), nodes=4), OnDemand())
    assert (result.finish, result.waited, result.lost) == (7500, 0, 0)
    assert result.cost(PRICES) == pytest.approx(4 * PRICES.standard * 7500 / 3600)


def test_the_population_is_seeded_and_within_its_bounds():
    traces = [
        Trace("preemption/1-node/aws/us-east-1f_v100_1.json", GAP, (1, 0) * 50),
        Trace("preemption/4-node/aws/us-east-2a_v100_1.json", GAP, (4, 3) * 50),
        Trace("availability/1-node/aws/us-west-2a_v100_1.json", GAP, (1,) * 100),
        Trace("availability/16-node/aws/us-west-2c_v100_1.json", GAP, (16,) * 100),
    ]
    jobs = population(traces, 200, seed=5)
    assert [(j.work, j.deadline, j.nodes) for j in jobs] == [
        (j.work, j.deadline, j.nodes) for j in population(traces, 200, seed=5)
    ]
    assert all(4 * 3600 <= j.work <= 48 * 3600 for j in jobs)
    assert all(600 <= j.interval <= 7200 and 120 <= j.overhead <= 900 for j in jobs)
    assert all(j.work + j.overhead <= j.deadline <= 4 * j.work + 1 for j in jobs)
    assert {j.nodes for j in jobs} == {1, 4}
    assert all(j.site.region == ("aws-us-east2" if j.nodes == 4 else "aws-us-east1") for j in jobs)


def test_trace_names_give_their_region_and_cloud():
    gcp = Trace("preemption/1-node/gcp-04-30-2023/us-central1-a_c3-88.json", 30.0, (1,))
    aws = Trace("preemption/1-node/aws-04-22-2023/us-west-2b_v100_1.json", 32.0, (1,))
    assert (gcp.region, gcp.cloud, gcp.location) == ("us-central1", "gcp", "us-central1")
    assert (aws.region, aws.cloud, aws.location) == ("us-west-2", "aws", "aws-us-west2")


def test_the_real_traces_load_when_present():
    root = Path(__file__).resolve().parents[3] / "shared" / "traces" / "spot-traces"
    if not root.is_dir():
        pytest.skip("the traces live beside the clone (../shared/traces)")
    from benchmarks.capacity.traces import load_all

    assert {t.region for t in load_all(root)} >= {"us-east-1", "us-west-2", "us-central1"}


# --- the multi-region replay ------------------------------------------------------------------


def two_regions(home_spot: tuple[int, ...], away_spot: tuple[int, ...], **fields: float) -> Job:
    """The hand-built job, allowed its home (us-east1) and us-central1; FLEX_START nowhere."""
    never = Replay(Trace("f", GAP, (0,)), 1, 0)
    home = Site("us-east1", Replay(Trace("h", GAP, home_spot), 1, 0), never)
    away = Site("us-central1", Replay(Trace("a", GAP, away_spot), 1, 0), never)
    base = job((0,))
    values = {**base.__dict__, "sites": (home, away), "checkpoint_gb": 100.0, **fields}
    return Job(**values)


class SpotThenAway(Always):
    """Spot at home; once preempted, Spot in the other region."""

    def start(self, view: View) -> Plan:
        return Plan("SPOT", region="us-central1") if view.attempts else Plan("SPOT")


def test_a_move_with_work_saved_reads_the_checkpoint_across_regions():
    life = Lifecycle(backoff=Backoff(base_seconds=0), seconds_per_gb=2.0)
    # Preempted at home at 2400 s with one 20-minute checkpoint saved (1200 s of work).
    result = simulate(
        two_regions((1,) * 4 + (0,) * 40, (1,) * 50), SpotThenAway("SPOT"), lifecycle=life
    )
    home, away = result.history
    assert (home["location"], away["location"]) == ("us-east1", "us-central1")
    # The read: 100 GB of egress, and 200 s more restart, billed, before progress resumes.
    assert result.egress_gb == 100.0
    assert away["runningSeconds"] == 300 + 200 + 6000
    assert result.finish == 2400 + 300 + 200 + 6000
    assert result.cost(PRICES, egress_usd_per_gb=0.02) == pytest.approx(
        PRICES.spot * (2400 + 6500) / 3600 + 100 * 0.02
    )


def test_a_move_before_any_work_is_saved_reads_nothing():
    # Preempted before the first checkpoint: nothing to read in the other region.
    life = Lifecycle(backoff=Backoff(base_seconds=0))
    result = simulate(
        two_regions((1, 0) + (0,) * 40, (1,) * 50), SpotThenAway("SPOT"), lifecycle=life
    )
    assert result.egress_gb == 0
    assert result.history[1]["runningSeconds"] == 300 + 7200


def test_multi_region_auto_runs_where_the_capacity_is_and_single_region_auto_cannot():
    table = load_packaged_prices()
    # No Spot at home, ever; Spot always in us-central1; 4 h for 2 h of work; a small
    # checkpoint (5 GB), so that the move's read is cheap against the 2 h left.
    drought = two_regions((0,), (1,) * 50, checkpoint_gb=5.0)
    single = simulate(drought, Auto("NVIDIA_TESLA_A100", table))
    multi = simulate(drought, MultiRegionAuto("NVIDIA_TESLA_A100", table))
    assert not single.missed and not multi.missed
    assert {a["location"] for a in single.history} == {"us-east1"}
    assert multi.history[-1]["location"] == "us-central1"
    assert multi.history[-1]["strategy"] == "SPOT"
    a100 = Prices.of(table, "NVIDIA_TESLA_A100")
    assert multi.cost(a100) < single.cost(a100)


def test_the_multi_region_population_allows_two_or_three_regions_of_one_cloud():
    traces = [
        Trace("preemption/1-node/gcp-04-30-2023/us-central1-a_c3-88.json", 30.0, (1,) * 10),
        Trace("preemption/1-node/gcp-04-30-2023/us-east1-b_c3-88.json", 30.0, (1,) * 10),
        Trace("preemption/1-node/aws-04-22-2023/us-east-1c_v100_1.json", 32.0, (1,) * 10),
        Trace("preemption/1-node/aws-04-22-2023/us-west-2b_v100_1.json", 32.0, (1,) * 10),
        Trace("preemption/4-node/aws-08-03-2023/us-east-1f_v100_1.json", 300.0, (4,) * 10),
        Trace("preemption/4-node/aws-08-03-2023/us-east-2a_v100_1.json", 300.0, (4,) * 10),
        Trace("preemption/4-node/aws-08-03-2023/us-west-2c_v100_1.json", 300.0, (4,) * 10),
        Trace("availability/1-node/aws-02-15-2023/us-west-2a_v100_1.json", 195.0, (1,) * 10),
    ]
    jobs = regional_population(traces, 300, seed=3)
    for j in jobs:
        clouds = {s.region.startswith("aws-") for s in j.sites}
        assert len(clouds) == 1 and 2 <= len(j.sites) <= 3
        assert len({s.region for s in j.sites}) == len(j.sites)
        assert j.nodes == 1 or clouds == {True}  # no GCP gang traces
        assert j.checkpoint_gb > 0
        for s in j.sites:
            # A region without a DWS trace of the job's scale stands in its Spot trace.
            west = s.region == "aws-us-west2" and j.nodes == 1
            assert (s.flex is not s.spot) == west
    assert {len(j.sites) for j in jobs} == {2, 3}
    assert {j.nodes for j in jobs} == {1, 4}
