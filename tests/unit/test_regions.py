"""AUTO across regions (pure): which allowed region the next attempt runs in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.capacity.model import (
    SAFETY_MARGIN_SECONDS,
    AttemptOutcome,
    Prices,
    Situation,
)
from shared.domain.capacity.regions import (
    CROSS_REGION_SECONDS_PER_GB,
    DEFAULT_CHECKPOINT_GB,
    Regions,
    decide_across_regions,
    placement_chance,
)
from shared.domain.capacity.rule import decide

NOW = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = 3600.0
WORK = 24 * HOUR
OVERHEAD = 300.0
INTERVAL = 1800.0
A100 = Prices(standard=4.22, spot=1.60, flex_start=2.20)
EAST, CENTRAL, WEST = "us-east1", "us-central1", "us-west1"
BOTH = Regions(EAST, (EAST, CENTRAL))


def situation(*, left: float = 48 * HOUR, history=(), **changes) -> Situation:
    """A 24 h job just requested, due in ``left``, with a checkpoint that saved a minute of
    work (so a move has a checkpoint to read)."""
    base = Situation(
        now=NOW,
        deadline=NOW + timedelta(seconds=left),
        origin=NOW,
        work_seconds=WORK + 60,
        remaining_seconds=WORK,
        restart_overhead_seconds=OVERHEAD,
        checkpoint_interval_seconds=INTERVAL,
        prices=A100,
        history=tuple(history),
    )
    return replace(base, **changes)


def preempted(location: str | None, after: float = 600.0) -> AttemptOutcome:
    return AttemptOutcome("SPOT", "preempted", after, 0.0, after, location)


def waited(location: str | None, strategy: str = "SPOT") -> AttemptOutcome:
    """An attempt given up while queued: no capacity came."""
    return AttemptOutcome(strategy, None, 0.0, 900.0, 0.0, location)


def test_one_allowed_region_is_exactly_decide():
    for history in ((), (preempted(EAST),) * 3, (waited(EAST), waited(None, "FLEX_START"))):
        s = situation(history=history)
        result = decide_across_regions(s, Regions(EAST, (EAST,)), {EAST: Prices(9, 9, 9)})
        assert result.region == EAST
        assert result.decision == decide(s)


def test_pinned_never_moves_however_bad_its_region():
    s = situation(history=(preempted(EAST),) * 6 + (waited(EAST, "FLEX_START"),) * 3)
    cheap = {CENTRAL: Prices(1.0, 0.3, 0.5)}
    result = decide_across_regions(s, replace(BOTH, pinned=True), cheap)
    assert result.region == EAST
    assert result.decision == decide(s)
    # Unpinned, the same job does move: the pin is what keeps it.
    assert decide_across_regions(s, BOTH, cheap).region == CENTRAL


def test_equal_fresh_regions_stay():
    result = decide_across_regions(situation(), BOTH)
    assert result.region == EAST
    assert "stays in us-east1" in result.reason


#: Prices where FLEX_START is well above Spot: a region burnt on Spot falls back to it.
DEAR_FLEX = Prices(standard=4.22, spot=1.60, flex_start=3.00)


def burnt(location: str | None) -> list[AttemptOutcome]:
    """Ten Spot attempts preempted after 25 minutes each, before any checkpoint."""
    return [preempted(location, after=1500.0) for _ in range(10)]


def test_repeated_preemptions_lose_to_a_fresh_region():
    s = situation(history=burnt(EAST), prices=DEAR_FLEX)
    result = decide_across_regions(s, BOTH)
    assert result.region == CENTRAL
    # The fresh region is judged on the prior alone: Spot, as for a first attempt.
    fresh = decide(replace(s, history=(), now=NOW + timedelta(seconds=400)))  # after the read
    assert result.decision.strategy == fresh.strategy == "SPOT"
    # Its queue bound is on the real clock: a 5-minute look for Spot from now.
    assert result.decision.wait_until == NOW + timedelta(minutes=5)
    assert "SPOT at 2.92/h of progress in us-east1" in result.reason  # 55% of its Spot kept
    assert result.reason.startswith("moves to us-central1")


def test_the_other_regions_history_is_not_held_against_this_one():
    # Preempted in us-central1, fresh in us-east1: stays, and on Spot.
    s = situation(history=burnt(CENTRAL), prices=DEAR_FLEX)
    result = decide_across_regions(s, BOTH)
    assert (result.region, result.decision.strategy) == (EAST, "SPOT")


def test_attempts_naming_no_location_count_as_the_requests_location():
    s = situation(history=burnt(None), prices=DEAR_FLEX)
    moved = decide_across_regions(s, Regions(EAST, (EAST, CENTRAL)))
    assert moved.region == CENTRAL
    # The request's location is us-central1 here, so those attempts ran there: stay put.
    stays = decide_across_regions(s, Regions(EAST, (CENTRAL, EAST)))
    assert stays.region == EAST


def test_repeated_waits_in_vain_lose_to_a_fresh_region():
    # Spot and FLEX_START both waited for in vain twice in us-east1.
    history = [waited(EAST), waited(EAST, "FLEX_START"), waited(EAST), waited(EAST, "FLEX_START")]
    result = decide_across_regions(situation(history=history), BOTH)
    assert result.region == CENTRAL
    assert placement_chance(tuple(history), "SPOT") == 0.5


def test_one_wait_in_vain_with_a_costly_checkpoint_does_not_move():
    # A huge checkpoint: the read costs more than the saving on what work is left.
    s = situation(history=[waited(EAST), waited(EAST, "FLEX_START")] * 2)
    huge = replace(BOTH, checkpoint_gb=20_000.0, seconds_per_gb=0.0)
    result = decide_across_regions(s, huge)
    assert result.region == EAST
    assert "saves too little" in result.reason


def test_a_move_whose_egress_exceeds_the_saving_is_not_taken():
    # us-central1's Spot is cheaper by 0.10/h of price: on 24 h of work, about $2.7 (and the
    # rule divides by the share kept). A 100 GB checkpoint at $0.02 is $2, under the saving...
    s = situation()
    cheaper = {CENTRAL: Prices(4.22, 1.20, 2.20)}
    small = replace(BOTH, checkpoint_gb=100.0, seconds_per_gb=0.0)
    assert decide_across_regions(s, small, cheaper).region == CENTRAL
    # ...at $0.50 per GB (a read across continents) it is $50, far over: stays.
    dear = replace(small, egress_usd_per_gb=0.50)
    result = decide_across_regions(s, dear, cheaper)
    assert result.region == EAST
    assert result.decision == decide(s)


def test_a_saving_within_the_hysteresis_margin_does_not_move():
    # 5% cheaper Spot, a move that costs next to nothing: still under the 10% margin.
    s = situation()
    slightly = {CENTRAL: Prices(4.22, 1.52, 2.20)}
    free = replace(BOTH, checkpoint_gb=0.001, egress_usd_per_gb=0.0)
    assert decide_across_regions(s, free, slightly).region == EAST
    assert decide_across_regions(s, replace(free, hysteresis=0.0), slightly).region == CENTRAL


def test_the_cheapest_of_several_regions_wins():
    s = situation()
    prices = {CENTRAL: Prices(4.22, 1.10, 2.20), WEST: Prices(4.22, 0.90, 2.20)}
    regions = Regions(EAST, (EAST, CENTRAL, WEST), checkpoint_gb=1.0)
    assert decide_across_regions(s, regions, prices).region == WEST


def test_a_running_attempt_is_never_moved():
    s = situation(history=burnt(EAST), prices=DEAR_FLEX, running="STANDARD")
    result = decide_across_regions(s, BOTH)
    assert result.region == EAST


def test_the_unknown_checkpoint_size_is_the_documented_default():
    assert BOTH.size_gb == DEFAULT_CHECKPOINT_GB
    assert BOTH.transfer_seconds == DEFAULT_CHECKPOINT_GB * CROSS_REGION_SECONDS_PER_GB


@pytest.mark.parametrize(
    "bad",
    [
        {"current": "attacker.example:443#"},
        {"allowed": ("us-east1", "US-CENTRAL1")},
        {"checkpoint_gb": -1.0},
        {"egress_usd_per_gb": float("nan")},
        {"gpus": 0},
    ],
)
def test_regions_refuses_what_is_not_a_region_or_a_bounded_figure(bad):
    with pytest.raises(ValueError):
        replace(BOTH, **bad)


# --- deadline safety ---------------------------------------------------------------------------


def _real_slack(s: Situation) -> float:
    return (s.deadline - s.now).total_seconds() - s.remaining_seconds - s.restart_overhead_seconds


@pytest.mark.parametrize("size_gb", [1.0, 50.0, 400.0, 1500.0, 4000.0])
@pytest.mark.parametrize("slack_hours", [0.2, 0.5, 1.0, 2.0, 4.0, 12.0, 24.0])
def test_a_move_never_leaves_less_slack_than_decide_requires(size_gb, slack_hours):
    # us-east1 is burnt (Spot preempted at once), us-central1 fresh and much cheaper: the
    # rule wants to move, but the read takes size_gb x 8 s of the slack.
    s = situation(
        left=WORK + OVERHEAD + slack_hours * HOUR, history=[preempted(EAST) for _ in range(6)]
    )
    cheap = {CENTRAL: Prices(3.0, 0.8, 1.2)}
    regions = replace(BOTH, checkpoint_gb=size_gb, egress_usd_per_gb=0.0)
    result = decide_across_regions(s, regions, cheap)
    if size_gb == 1.0 and slack_hours >= 1.0:
        assert result.region == CENTRAL  # the grid does hold moves
    if result.region == EAST:
        assert result.decision == decide(s)
        return
    transfer = regions.transfer_seconds
    slack = _real_slack(s) - transfer  # what is left once the checkpoint is read there
    d = result.decision
    assert d.slack_seconds == pytest.approx(slack)
    assert slack >= SAFETY_MARGIN_SECONDS
    if d.strategy == "SPOT":
        # Queued until wait_until, then preempted at the worst moment: still time for the
        # read, a restart, the work at risk and an on-demand finish within the margin.
        assert d.wait_until is not None
        queued = (d.wait_until - NOW).total_seconds()
        worst = queued + transfer + OVERHEAD + INTERVAL + SAFETY_MARGIN_SECONDS
        assert worst <= _real_slack(s)
    if d.strategy == "FLEX_START":
        assert d.max_wait_seconds is not None
        assert d.max_wait_seconds + transfer + SAFETY_MARGIN_SECONDS <= _real_slack(s)


def test_a_read_longer_than_the_slack_does_not_move():
    # 0.5 h of slack, a read of 1500 GB x 8 s = 3.3 h: never a candidate.
    s = situation(left=WORK + OVERHEAD + 0.5 * HOUR, history=[preempted(EAST) for _ in range(6)])
    regions = replace(BOTH, checkpoint_gb=1500.0, egress_usd_per_gb=0.0)
    result = decide_across_regions(s, regions, {CENTRAL: Prices(1.0, 0.1, 0.2)})
    assert result.region == EAST
    assert "enough slack" in result.reason


def test_a_job_with_nothing_saved_moves_without_a_read():
    # No complete checkpoint yet: the attempt starts from scratch wherever it runs, so a
    # 1,500 GB checkpoint size (3.3 h of reading, more than the slack) does not hold it back.
    s = situation(left=WORK + OVERHEAD + 0.5 * HOUR, history=[preempted(EAST) for _ in range(6)])
    s = replace(s, work_seconds=WORK)
    regions = replace(BOTH, checkpoint_gb=1500.0, egress_usd_per_gb=0.0)
    result = decide_across_regions(s, regions, {CENTRAL: Prices(1.0, 0.1, 0.2)})
    assert result.region == CENTRAL
    assert result.decision.slack_seconds == pytest.approx(_real_slack(s))


def test_an_attempt_away_from_the_checkpoint_region_is_charged_its_read_too():
    # The job moved to us-central1 earlier; its checkpoint's URI stays in us-east1 (the
    # request's location), so staying in us-central1 reads it again: the decision there is
    # taken on the slack left after that read, as for the first move.
    s = situation(left=WORK + OVERHEAD + 3 * HOUR, history=[preempted(EAST) for _ in range(6)])
    away = Regions(CENTRAL, (EAST, CENTRAL), checkpoint_gb=400.0, egress_usd_per_gb=0.0)
    result = decide_across_regions(s, away, {CENTRAL: Prices(3.0, 0.8, 1.2)})
    read = 400.0 * CROSS_REGION_SECONDS_PER_GB
    if result.region == CENTRAL:
        assert result.decision.slack_seconds == pytest.approx(_real_slack(s) - read)
    else:  # back where the checkpoint lives: nothing to read
        assert result.region == EAST
        assert result.decision.slack_seconds == pytest.approx(_real_slack(s))
    # Going back to the checkpoint's region reads nothing, so it is never refused for slack.
    tight = situation(left=WORK + OVERHEAD + 0.5 * HOUR, history=[preempted(CENTRAL)] * 6)
    back = decide_across_regions(tight, replace(away, checkpoint_gb=1500.0), {})
    assert back.region == EAST
    assert back.decision.slack_seconds == pytest.approx(_real_slack(tight))


def test_an_attempt_away_goes_home_when_staying_would_read_past_the_deadline():
    # The job ran in us-central1 (cheaper, and us-east1 is burnt); 0.3 h of slack left and a
    # 400 GB checkpoint back in us-east1 that takes 0.9 h to read: on-demand in us-central1
    # would finish late however cheap it is. The net every earlier decision kept is an
    # attempt that reads nothing, so the attempt goes back to the checkpoint's region.
    s = situation(left=WORK + OVERHEAD + 0.3 * HOUR, history=[preempted(EAST) for _ in range(6)])
    away = Regions(CENTRAL, (EAST, CENTRAL), checkpoint_gb=400.0, egress_usd_per_gb=0.0)
    result = decide_across_regions(s, away, {CENTRAL: Prices(3.0, 0.8, 1.2)})
    assert result.region == EAST
    assert "goes back to us-east1" in result.reason
    assert result.decision.strategy == "STANDARD"
    assert result.decision.slack_seconds == pytest.approx(_real_slack(s))
    # On time, where staying would not be: the read alone is longer than the slack.
    assert 0 <= result.decision.slack_seconds < 400.0 * CROSS_REGION_SECONDS_PER_GB
