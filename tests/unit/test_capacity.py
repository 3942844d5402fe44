"""The AUTO capacity policy (pure): decisions pinned on hand-built situations and histories."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.packaged_prices import load_packaged_prices
from shared.domain.capacity.model import (
    FLEX_REVISIT_SECONDS,
    MAX_FLEX_WAIT_SECONDS,
    MAX_SWITCHES,
    SAFETY_MARGIN_SECONDS,
    AttemptOutcome,
    Prices,
    Situation,
    Tuning,
)
from shared.domain.capacity.rule import decide
from shared.domain.capacity.situations import (
    situation_for_first_attempt,
    situation_from_record,
    switch_from_on_demand,
    waited_in_vain,
)
from shared.domain.model.records import JobRecord
from shared.domain.policy.retry import Budgets

NOW = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = 3600.0
WORK = 24 * HOUR
OVERHEAD = 300.0
INTERVAL = 1800.0
A100 = Prices(standard=4.22, spot=1.60, flex_start=2.20)
H100 = Prices(standard=12.63, spot=8.22, flex_start=6.44)  # FLEX_START is the cheapest


def situation(
    *,
    left: float = 48 * HOUR,
    elapsed: float = 0.0,
    done: float = 0.0,
    span: float | None = None,
    **changes,
) -> Situation:
    """A 24 h job ``elapsed`` after its request, ``done`` of it saved, ``left`` before the
    deadline (the request's span is ``elapsed + left`` unless given)."""
    base = Situation(
        now=NOW,
        deadline=NOW + timedelta(seconds=left),
        origin=NOW - timedelta(seconds=elapsed),
        work_seconds=WORK,
        remaining_seconds=WORK - done,
        restart_overhead_seconds=OVERHEAD,
        checkpoint_interval_seconds=INTERVAL,
        prices=A100,
    )
    if span is not None:
        base = replace(base, deadline=base.origin + timedelta(seconds=span))
    return replace(base, **changes)


def preempted(after: float) -> AttemptOutcome:
    """A Spot attempt preempted ``after`` seconds in, before its first checkpoint."""
    return AttemptOutcome("SPOT", "preempted", running_seconds=after, lost_seconds=after)


# --- plenty of slack ---------------------------------------------------------------------------


def test_plenty_of_slack_takes_spot_queued_until_the_job_would_fall_behind():
    # 10 h after a request due in 48 h, 8 h of the 24 h done: the line says 5 h, so the job is
    # 3 h of work ahead; at half a second of work per second that is 6 h of waiting.
    decision = decide(situation(elapsed=10 * HOUR, left=38 * HOUR, done=8 * HOUR))
    assert decision.strategy == "SPOT"
    assert decision.wait_until == NOW + timedelta(hours=6)
    assert decision.max_wait_seconds is None
    assert not decision.final
    assert decision.reason.startswith("ahead of uniform progress by 3.0h")
    assert decision.slack_seconds == 38 * HOUR - 16 * HOUR - OVERHEAD


def test_at_the_start_spot_gets_a_short_look():
    decision = decide(situation())
    assert decision.strategy == "SPOT"
    assert decision.wait_until == NOW + timedelta(minutes=5)


def test_flex_start_comes_first_where_it_is_the_cheapest():
    decision = decide(situation(prices=H100))
    assert decision.strategy == "FLEX_START"
    # The largest wait that still leaves an on-demand attempt time to finish...
    assert decision.max_wait_seconds == 48 * HOUR - WORK - OVERHEAD - SAFETY_MARGIN_SECONDS
    assert decision.max_wait_duration == f"{decision.max_wait_seconds}s"
    # ...but looked at again after an hour (the lifecycle cancels the queued attempt then).
    assert decision.wait_until == NOW + timedelta(seconds=FLEX_REVISIT_SECONDS)


def test_a_long_flex_wait_is_capped_at_the_dws_horizon():
    decision = decide(situation(prices=H100, left=29 * 24 * HOUR))
    assert decision.max_wait_seconds == MAX_FLEX_WAIT_SECONDS


# --- slack running out -------------------------------------------------------------------------


def test_slack_within_the_margin_means_on_demand_to_the_end():
    decision = decide(situation(left=WORK + OVERHEAD + 9 * 60))
    assert (decision.strategy, decision.final) == ("STANDARD", True)
    assert "within the safety margin" in decision.reason


def test_a_deadline_past_reach_still_runs_on_demand_to_finish_soonest():
    decision = decide(situation(left=WORK - HOUR))
    assert (decision.strategy, decision.final) == ("STANDARD", True)
    assert decision.reason == "the deadline can no longer be met; on-demand finishes soonest"


def test_slack_too_small_for_a_preemption_leaves_flex_start_with_the_exact_wait():
    # 40 min of slack: a Spot preemption could cost 5 + 30 min plus the margin, too much; a
    # FLEX_START wait of 30 min still leaves on-demand its run and the margin.
    decision = decide(situation(left=WORK + OVERHEAD + 40 * 60))
    assert decision.strategy == "FLEX_START"
    assert decision.max_wait_seconds == 30 * 60
    finish = NOW + timedelta(seconds=decision.max_wait_seconds + OVERHEAD + WORK)
    assert finish + timedelta(seconds=SAFETY_MARGIN_SECONDS) == NOW + timedelta(
        seconds=WORK + OVERHEAD + 40 * 60
    )


def test_a_flex_start_wait_that_would_blow_the_deadline_is_never_asked_for():
    # FLEX_START is the cheapest, but 15 min of slack leaves a 5-minute wait: not worth it.
    decision = decide(situation(prices=H100, left=WORK + OVERHEAD + 15 * 60))
    assert (decision.strategy, decision.final) == ("STANDARD", True)
    assert "nor a FLEX_START wait" in decision.reason


@pytest.mark.parametrize("slack_minutes", [11, 20, 45, 60, 90, 180, 600])
def test_no_wait_ever_outlasts_the_on_demand_fallback(slack_minutes):
    for prices in (A100, H100):
        s = situation(prices=prices, left=WORK + OVERHEAD + slack_minutes * 60)
        decision = decide(s)
        if decision.wait_until is not None:
            # Whatever waits (Spot or FLEX_START) gives up in time for on-demand to finish.
            latest = s.deadline - timedelta(seconds=WORK + OVERHEAD + SAFETY_MARGIN_SECONDS)
            assert decision.wait_until <= latest
        if decision.max_wait_seconds is not None:
            assert 0 < decision.max_wait_seconds <= slack_minutes * 60 - SAFETY_MARGIN_SECONDS


# --- repeated preemptions ----------------------------------------------------------------------


# Ahead of the line (3 h done 4 h into a 48 h span: 1 h of work ahead), so price decides.
AHEAD = {"elapsed": 4 * HOUR, "left": 44 * HOUR, "done": 3 * HOUR}


def test_one_early_preemption_does_not_condemn_spot():
    decision = decide(situation(**AHEAD, history=(preempted(1200),)))
    assert decision.strategy == "SPOT"
    assert "Spot (2.00/h of progress at 80% kept)" in decision.reason


def test_repeated_early_preemptions_move_the_job_to_flex_start():
    history = tuple(preempted(1200) for _ in range(8))  # 20 min each: nothing ever saved
    decision = decide(situation(**AHEAD, history=history))
    assert decision.strategy == "FLEX_START"
    assert decision.reason.startswith("ahead of uniform progress by 60m: FLEX_START (2.20/h)")


def test_long_spot_lifetimes_keep_spot():
    kept = AttemptOutcome("SPOT", "preempted", running_seconds=6 * HOUR, lost_seconds=600)
    decision = decide(situation(elapsed=HOUR, done=HOUR, history=(kept,) * 8))
    assert decision.strategy == "SPOT"


def test_no_preemption_budget_left_means_no_spot():
    decision = decide(situation(preemptions_left=0))
    assert decision.strategy == "FLEX_START"
    decision = decide(situation(preemptions_left=0, capacity_failures_left=0))
    assert (decision.strategy, decision.final) == ("STANDARD", False)


# --- behind the line: catching up ----------------------------------------------------------------


def test_behind_the_line_looks_for_spot_then_catches_up_on_flex_start():
    behind = situation(elapsed=4 * HOUR, left=44 * HOUR, done=HOUR, history=(preempted(3000),))
    first = decide(behind)
    assert first.strategy == "SPOT"
    assert first.wait_until == NOW + timedelta(minutes=5)
    assert first.reason.startswith("behind uniform progress by 60m; a short look for Spot")
    looked = replace(behind, history=(*behind.history, AttemptOutcome("SPOT")))
    second = decide(looked)
    assert second.strategy == "FLEX_START"
    assert "catching up" in second.reason


def test_behind_with_no_flex_start_catches_up_on_demand():
    looked = situation(
        elapsed=4 * HOUR,
        left=44 * HOUR,
        done=HOUR,
        history=(AttemptOutcome("SPOT"),),
        capacity_failures_left=0,
    )
    decision = decide(looked)
    assert (decision.strategy, decision.final) == ("STANDARD", False)
    assert decision.reason.endswith("on-demand until ahead again")


def test_capacity_missing_a_moment_ago_is_looked_for_elsewhere_first():
    vain_flex = AttemptOutcome("FLEX_START", queued_seconds=HOUR)
    decision = decide(situation(prices=H100, history=(vain_flex,)))
    assert decision.strategy == "SPOT"


# --- asked at a checkpoint of a running attempt --------------------------------------------------


def test_on_demand_is_kept_while_catching_up():
    s = situation(elapsed=10 * HOUR, left=38 * HOUR, done=5 * HOUR, running="STANDARD")
    decision = decide(s)
    assert (decision.strategy, decision.keep) == ("STANDARD", True)
    assert decision.reason.startswith("catching up on on-demand")


def test_on_demand_is_left_once_ahead_by_more_than_a_failed_spot_attempt_costs():
    # Two restarts and a checkpoint interval (40 min) at half pace is 20 min of work.
    s = situation(elapsed=10 * HOUR, left=38 * HOUR, done=5 * HOUR + 21 * 60, running="STANDARD")
    decision = decide(s)
    assert (decision.strategy, decision.keep) == ("SPOT", False)


def test_on_demand_is_never_left_once_the_slack_is_tight():
    s = situation(left=20 * HOUR + OVERHEAD + 5 * 60, elapsed=28 * HOUR, done=4 * HOUR)
    decision = decide(replace(s, running="STANDARD"))
    assert (decision.strategy, decision.keep, decision.final) == ("STANDARD", True, True)


@pytest.mark.parametrize("running", ["SPOT", "FLEX_START"])
def test_capacity_held_at_a_discount_is_kept(running):
    decision = decide(situation(running=running, left=WORK + OVERHEAD + 60))
    assert (decision.strategy, decision.keep) == (running, True)


# --- determinism, prices, recording ------------------------------------------------------------


def test_decisions_are_deterministic():
    s = situation(elapsed=3 * HOUR, done=HOUR, history=(preempted(900), AttemptOutcome("SPOT")))
    assert decide(s) == decide(s)


def test_an_unpriced_accelerator_uses_the_usual_order():
    prices = Prices.of(load_packaged_prices(), "NVIDIA_TESLA_T4")
    assert not prices.priced
    assert decide(situation(prices=prices)).strategy == "SPOT"


def test_the_decision_as_recorded():
    recorded = decide(situation(prices=H100)).to_dict()
    assert set(recorded) == {
        "strategy",
        "reason",
        "maxWaitSeconds",
        "waitUntil",
        "final",
        "slackSeconds",
        "remainingSeconds",
    }
    assert recorded["strategy"] == "FLEX_START"
    assert recorded["waitUntil"] == NOW + timedelta(hours=1)


# --- the situation from what flexjobs records --------------------------------------------------

OPTIONS = {
    "deadline": "2026-12-03T00:00:00Z",
    "estimatedRunSeconds": 86400,
    "checkpointIntervalSeconds": 1800,
    "restartOverheadSeconds": 300,
    "retryPolicy": {"preemption": 10},
}


def test_situation_from_a_record_and_its_attempts():
    record = JobRecord.decode(
        {
            "requestId": "r1",
            "state": "RETRYING",
            "attempt": 2,
            "options": json.dumps(OPTIONS),
            "createdAt": NOW - timedelta(hours=2),
            "acceleratorType": "NVIDIA_TESLA_A100",
            "progress": 0.25,
            "retries": {"preemption": 1},
        }
    )
    attempts = [
        {
            "strategy": "SPOT",
            "errorClass": "preempted",
            "runningSeconds": 7000.0,
            "queuedSeconds": 30.0,
            "workLostSeconds": 400.0,
        },
    ]
    budgets = Budgets.from_request(OPTIONS["retryPolicy"])
    s = situation_from_record(record, attempts, NOW, load_packaged_prices(), budgets=budgets)
    assert s is not None
    assert s.remaining_seconds == 0.75 * WORK  # from progress, exactly
    assert s.origin == NOW - timedelta(hours=2)
    assert s.deadline == datetime(2026, 12, 3, tzinfo=UTC)
    assert s.history == (AttemptOutcome("SPOT", "preempted", 7000.0, 30.0, 400.0),)
    assert (s.preemptions_left, s.capacity_failures_left) == (9, 3)
    assert s.prices == A100
    without_progress = replace(record, progress=None)
    s = situation_from_record(without_progress, attempts, NOW, None)
    assert s is not None and s.remaining_seconds == WORK - (7000 - 400 - 300)
    assert situation_from_record(replace(record, options_text="{}"), [], NOW, None) is None


def test_situation_of_a_first_attempt():
    s = situation_for_first_attempt(OPTIONS, "NVIDIA_H100_80GB", NOW, NOW, load_packaged_prices())
    assert s is not None
    assert (s.remaining_seconds, s.history, s.prices.flex_start) == (WORK, (), 6.44)
    assert decide(s).strategy == "FLEX_START"


# --- the time scale, and the start -----------------------------------------------------------


def test_a_request_decided_seconds_after_its_publish_is_on_the_line_not_behind():
    decision = decide(situation(elapsed=30))
    assert decision.strategy == "SPOT"
    assert decision.reason.startswith("on the uniform-progress line")


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the start
        {"elapsed": 10 * HOUR, "left": 38 * HOUR, "done": 8 * HOUR},  # ahead
        {"elapsed": 10 * HOUR, "left": 38 * HOUR, "done": 2 * HOUR},  # behind
        {"prices": H100},  # FLEX_START first
        {"left": WORK + OVERHEAD + 5 * 60},  # within the margin
        {
            "elapsed": 10 * HOUR,
            "left": 38 * HOUR,
            "done": 5 * HOUR + 21 * 60,
            "running": "STANDARD",
        },
    ],
)
def test_a_scaled_tuning_decides_a_short_job_as_the_default_decides_a_long_one(changes):
    scale = 60.0
    long = situation(**changes)
    short = replace(
        long,
        deadline=NOW + (long.deadline - NOW) / scale,
        origin=NOW - (NOW - long.origin) / scale,
        work_seconds=long.work_seconds / scale,
        remaining_seconds=long.remaining_seconds / scale,
        restart_overhead_seconds=long.restart_overhead_seconds / scale,
        checkpoint_interval_seconds=INTERVAL / scale,
        tuning=Tuning().scaled(scale),
    )
    slow, fast = decide(long), decide(short)
    assert (fast.strategy, fast.final, fast.keep) == (slow.strategy, slow.final, slow.keep)
    if slow.wait_until is not None:
        assert fast.wait_until is not None
        scaled = (slow.wait_until - NOW).total_seconds() / scale
        assert (fast.wait_until - NOW).total_seconds() == pytest.approx(scaled, abs=1)
    if slow.max_wait_seconds is not None:
        assert fast.max_wait_seconds == pytest.approx(slow.max_wait_seconds / scale, abs=1)


@pytest.mark.parametrize("scale", [0, -1, float("nan"), float("inf")])
def test_a_time_scale_must_be_a_positive_number(scale):
    with pytest.raises(ValueError, match="time scale"):
        Tuning().scaled(scale)


# --- the lifecycle's questions ---------------------------------------------------------------

DUE = NOW + timedelta(minutes=5)


def queued(**fields) -> JobRecord:
    raw = {
        "state": "QUEUED",
        "vertexJob": "j",
        "strategy": "SPOT",
        "capacity": {"strategy": "SPOT", "waitUntil": DUE},
        **fields,
    }
    return JobRecord.decode(raw)


def test_a_queued_attempt_is_given_up_at_its_wait_until_and_says_why():
    reason = waited_in_vain(queued(), "j", "JOB_STATE_QUEUED", DUE)
    assert reason == "no SPOT capacity by 00:05:00Z: the capacity policy chooses again"
    flex = queued(strategy="FLEX_START", capacity={"waitUntil": DUE})
    assert waited_in_vain(flex, "j", "JOB_STATE_PENDING", DUE + timedelta(hours=1))


@pytest.mark.parametrize(
    ("record", "job", "state", "at"),
    [
        (queued(), "j", "JOB_STATE_QUEUED", DUE - timedelta(seconds=1)),  # not yet
        (queued(), "j", "JOB_STATE_RUNNING", DUE),  # it started meanwhile
        (queued(), "j", "JOB_STATE_SUCCEEDED", DUE),  # it ended: the settlement's
        (queued(), "other", "JOB_STATE_QUEUED", DUE),  # not the record's job
        (queued(state="RUNNING"), "j", "JOB_STATE_QUEUED", DUE),
        (queued(yielding={"vertexJob": "j"}), "j", "JOB_STATE_QUEUED", DUE),  # asked already
        (queued(cancelRequested=True), "j", "JOB_STATE_QUEUED", DUE),
        (queued(capacity={}), "j", "JOB_STATE_QUEUED", DUE),  # not AUTO
    ],
)
def test_an_attempt_is_left_to_wait(record, job, state, at):
    assert waited_in_vain(record, job, state, at) is None


def test_on_demand_is_left_at_a_checkpoint_only_once_safely_ahead():
    ahead = situation(elapsed=10 * HOUR, left=38 * HOUR, done=5 * HOUR + 21 * 60)
    behind = situation(elapsed=10 * HOUR, left=38 * HOUR, done=5 * HOUR)
    leave = switch_from_on_demand(ahead)
    assert leave is not None and leave.strategy == "SPOT" and not leave.keep
    assert switch_from_on_demand(behind) is None


def test_a_drought_that_used_up_the_switches_with_slack_left_waits_long_on_flex_start():
    # 11 h into a 24 h job due in 48 h, nothing saved (a drought ate the switches): 24 h of
    # slack is left, far more than one FLEX_START wait's worst case.
    drought = situation(elapsed=11 * HOUR, left=37 * HOUR, switches_left=0)
    decision = decide(drought)
    assert decision.strategy == "FLEX_START" and not decision.final
    assert decision.reason.startswith(f"{MAX_SWITCHES} attempts ended by choice")
    # Its whole wait, with no early revisit: giving it up early would be one more switch.
    slack = 37 * HOUR - WORK - OVERHEAD
    assert decision.max_wait_seconds == int(slack - SAFETY_MARGIN_SECONDS)
    assert decision.wait_until is None


def test_past_the_switch_bound_on_demand_only_once_no_long_wait_fits():
    # Slack of 15 minutes: less than the safety margin and the shortest worthwhile wait.
    tight = situation(left=WORK + OVERHEAD + 900, switches_left=0)
    decision = decide(tight)
    assert (decision.strategy, decision.final) == ("STANDARD", True)
    # No capacity retry left: a wait that expires would fail the job, so on-demand too.
    spent = situation(elapsed=11 * HOUR, left=37 * HOUR, switches_left=0, capacity_failures_left=0)
    assert (decide(spent).strategy, decide(spent).final) == ("STANDARD", True)
    # A running on-demand attempt is never left past the bound: leaving is a switch.
    assert (
        switch_from_on_demand(
            situation(elapsed=10 * HOUR, left=38 * HOUR, done=20 * HOUR, switches_left=0)
        )
        is None
    )


def test_a_preemption_at_the_worst_moment_with_the_longest_backoff_leaves_on_demand_time():
    # The longest backoff (1,800 s, the cap) is what the retry after a preemption may wait.
    delay = 1800.0
    spot_needs = OVERHEAD + INTERVAL + SAFETY_MARGIN_SECONDS + 300.0  # + the probe
    # Slack that covers a worst-moment preemption only if the retry waits nothing.
    slack = spot_needs + delay / 2
    s = situation(left=WORK + OVERHEAD + slack)
    assert decide(s).strategy == "SPOT"  # the schedule is not allowed for
    decision = decide(replace(s, retry_delay_seconds=delay))
    assert decision.strategy != "SPOT"
    # With the delay allowed for, Spot is taken only when the worst case still leaves room:
    roomy = replace(s, deadline=s.deadline + timedelta(seconds=delay), retry_delay_seconds=delay)
    spot = decide(roomy)
    assert spot.strategy == "SPOT"
    # Replay the worst moment: queued until its wait_until, preempted just before its first
    # checkpoint, then the retry waits the whole window before the next decision.
    assert spot.wait_until is not None
    failed_at = spot.wait_until + timedelta(seconds=OVERHEAD + INTERVAL)
    next_at = failed_at + timedelta(seconds=delay)
    after = replace(
        roomy,
        now=next_at,
        history=(preempted(OVERHEAD + INTERVAL),),
        preemptions_left=None,
    )
    on_demand_ends = next_at + timedelta(seconds=WORK + OVERHEAD)
    assert on_demand_ends <= roomy.deadline - timedelta(seconds=SAFETY_MARGIN_SECONDS)
    assert decide(after).slack_seconds >= SAFETY_MARGIN_SECONDS


def test_a_flex_start_wait_leaves_the_retry_delay_after_it():
    s = situation(left=30 * HOUR)
    plain = decide(replace(s, prices=H100))
    delayed = decide(replace(s, prices=H100, retry_delay_seconds=1800.0))
    assert plain.strategy == delayed.strategy == "FLEX_START"
    assert plain.max_wait_seconds is not None and delayed.max_wait_seconds is not None
    assert plain.max_wait_seconds - delayed.max_wait_seconds == 1800


def test_the_retry_delay_is_the_next_retrys_longest_backoff():
    from shared.domain.policy.retry import Backoff

    backoff = Backoff(base_seconds=60, cap_seconds=1800)
    raw = {
        "options": json.dumps({"deadline": "2026-12-03T00:00:00Z", "estimatedRunSeconds": 3600}),
        "createdAt": NOW,
        "retries": {"preemption": 4, "capacity": 1},
    }
    s = situation_from_record(JobRecord.decode(raw), [], NOW, None, backoff=backoff)
    assert s is not None and s.retry_delay_seconds == 960.0  # retry 5: 60 * 2^4
    first = situation_for_first_attempt(
        json.loads(raw["options"]), None, NOW, NOW, None, backoff=backoff
    )
    assert first is not None and first.retry_delay_seconds == 60.0
    assert situation_from_record(JobRecord.decode(raw), [], NOW, None).retry_delay_seconds == 0.0


def test_a_records_switches_count_against_the_bound():
    raw = {
        "options": json.dumps({"deadline": "2026-12-03T00:00:00Z", "estimatedRunSeconds": 3600}),
        "createdAt": NOW,
        "switches": MAX_SWITCHES - 1,
    }
    s = situation_from_record(JobRecord.decode(raw), [], NOW, None)
    assert s is not None and s.switches_left == 1
    s = situation_from_record(JobRecord.decode({**raw, "switches": 99}), [], NOW, None)
    assert s is not None and s.switches_left == 0
