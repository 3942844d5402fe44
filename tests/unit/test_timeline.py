"""The timeline's geometry, from plain values: lanes, spans, marks, checkpoint ticks, axis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.model.checkpoint import Checkpoint
from shared.status.timeline import (
    AXIS_HEIGHT,
    BAR_HEIGHT,
    BAR_TOP,
    LABEL_WIDTH,
    LANE_HEIGHT,
    MIN_WIDTH,
    RIGHT_PAD,
    WIDTH,
    AttemptTimes,
    attempt_times,
    layout,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PLOT = WIDTH - RIGHT_PAD - LABEL_WIDTH


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def preempted_then_succeeded() -> list[AttemptTimes]:
    return [
        AttemptTimes(1, at(0), at(10), at(40), "FAILED", "preempted", 600.0, "SPOT",
                     ((at(30), "step 900"),)),
        AttemptTimes(2, at(50), at(60), at(100), "SUCCEEDED", None, 0.0, "SPOT"),
    ]  # fmt: skip


def spans(lane):
    return {s.kind: s for s in lane.spans}


def test_one_lane_per_attempt_in_attempt_order():
    chart = layout(list(reversed(preempted_then_succeeded())), now=at(120))
    assert [lane.number for lane in chart.lanes] == [1, 2]
    assert [lane.y for lane in chart.lanes] == [AXIS_HEIGHT, AXIS_HEIGHT + LANE_HEIGHT]
    assert [lane.title for lane in chart.lanes] == ["attempt 1", "attempt 2"]
    assert chart.lanes[0].subtitle == "spot"


def test_the_axis_runs_from_the_first_submission_to_the_last_end():
    chart = layout(preempted_then_succeeded(), now=at(500))
    assert (chart.start, chart.end) == (at(0), at(100))
    first, last = spans(chart.lanes[0])["queued"], spans(chart.lanes[1])["running"]
    assert first.x == LABEL_WIDTH
    assert last.x + last.width == pytest.approx(WIDTH - RIGHT_PAD, abs=0.2)


def test_queued_then_running_side_by_side_with_their_durations():
    lane = layout(preempted_then_succeeded(), now=at(120)).lanes[0]
    queued, running = spans(lane)["queued"], spans(lane)["running"]
    assert queued.x + queued.width == pytest.approx(running.x, abs=0.2)
    assert queued.width == pytest.approx(PLOT * 10 / 100, abs=0.2)
    assert running.width == pytest.approx(PLOT * 30 / 100, abs=0.2)
    assert (queued.seconds, running.seconds) == (600, 1800)
    assert (queued.label, running.label) == ("queued 10m00s", "running 30m00s")
    assert running.inside and running.height == BAR_HEIGHT


def test_work_lost_is_shaded_over_the_end_of_the_running_span():
    lane = layout(preempted_then_succeeded(), now=at(120)).lanes[0]
    running, lost = spans(lane)["running"], spans(lane)["lost"]
    assert lost.x + lost.width == pytest.approx(running.x + running.width, abs=0.2)
    assert lost.seconds == 600 and lost.label == "work lost 10m00s"
    assert not lost.inside  # its words would sit on the running span's


def test_work_lost_never_starts_before_the_attempt_ran():
    attempt = AttemptTimes(1, at(0), at(10), at(20), "FAILED", "preempted", 99_999.0)
    lane = layout([attempt], now=at(30)).lanes[0]
    assert spans(lane)["lost"].x == spans(lane)["running"].x
    assert spans(lane)["lost"].seconds == 600


def test_no_lost_span_when_nothing_was_lost():
    lane = layout(preempted_then_succeeded(), now=at(120)).lanes[1]
    assert set(spans(lane)) == {"queued", "running"}


def test_the_end_is_marked_with_the_failure_class_or_how_it_ended():
    first, second = layout(preempted_then_succeeded(), now=at(120)).lanes
    assert (first.mark.kind, first.mark.label) == ("preempted", "preempted")
    assert first.mark.x == pytest.approx(
        spans(first)["running"].x + spans(first)["running"].width, abs=0.2
    )
    assert second.mark.label == "succeeded"
    # The last end is at the right edge: its words are written leftwards, inside the picture.
    assert second.mark.anchor == "end" and second.mark.label_x < second.mark.x
    assert first.mark.anchor == "start"


def test_an_open_attempt_runs_until_now_and_has_no_mark():
    attempt = AttemptTimes(1, at(0), at(5), None, "RUNNING")
    chart = layout([attempt], now=at(20))
    lane = chart.lanes[0]
    assert chart.end == at(20)
    assert spans(lane)["running"].seconds == 900
    assert lane.mark is None


def test_an_attempt_still_queued_has_only_a_queued_span():
    lane = layout([AttemptTimes(1, at(0), None, None, "QUEUED")], now=at(3)).lanes[0]
    assert list(spans(lane)) == ["queued"] and spans(lane)["queued"].seconds == 180


def test_an_instant_span_is_still_visible():
    attempt = AttemptTimes(1, at(0), at(0), at(60), "SUCCEEDED")
    queued = spans(layout([attempt], now=at(60)).lanes[0])["queued"]
    assert queued.width == MIN_WIDTH and queued.seconds == 0 and not queued.inside


def test_checkpoints_are_ticks_on_their_lane():
    lane = layout(preempted_then_succeeded(), now=at(120)).lanes[0]
    (tick,) = lane.checkpoints
    assert tick.label == "step 900"
    assert tick.x == pytest.approx(LABEL_WIDTH + PLOT * 30 / 100, abs=0.2)
    assert tick.y1 < lane.y + BAR_TOP < lane.y + BAR_TOP + BAR_HEIGHT < tick.y2
    assert tick.label_y < tick.y1  # its words above the bar, clear of the end's below it


def test_the_axis_ticks_are_round_offsets_from_the_start():
    chart = layout(preempted_then_succeeded(), now=at(120))
    assert [t.label for t in chart.axis] == [
        "+0",
        "+15m",
        "+30m",
        "+45m",
        "+1h",
        "+1h15m",
        "+1h30m",
    ]
    assert chart.axis[0].x == LABEL_WIDTH
    days = layout([AttemptTimes(1, at(0), at(60), at(60 * 24 * 3), "SUCCEEDED")], now=at(0))
    assert [t.label for t in days.axis] == ["+0", "+12h", "+1d", "+1d12h", "+2d", "+2d12h", "+3d"]


def test_no_attempts_yet_is_an_empty_chart():
    chart = layout([], now=T0)
    assert chart.lanes == () and chart.summary == "No attempts yet."
    assert chart.height == AXIS_HEIGHT + 34


def test_the_summary_reads_without_the_picture():
    chart = layout(preempted_then_succeeded(), now=at(120))
    assert chart.summary == "2 attempt(s). attempt 1: preempted; attempt 2: succeeded."
    assert [entry.kind for entry in chart.legend] == ["queued", "running", "lost", "checkpoint"]


# --- from stored attempt documents ------------------------------------------------------------


def doc(n: int, start: float, run: float, lost: float | None, **more) -> dict:
    document = {
        "attempt": n,
        "state": "FAILED",
        "submittedAt": at(start - 1),
        "startedAt": at(start),
        "endedAt": at(start + run),
        "runningSeconds": run * 60,
        "errorClass": "preempted",
        "strategy": "SPOT",
        **more,
    }
    if lost is not None:
        document["workLostSeconds"] = lost * 60
    return document


def test_attempt_documents_give_the_checkpoint_each_attempt_saved():
    docs = [
        doc(1, 0, 30, 10),
        doc(2, 40, 30, 30, resumedFrom="gs://b/r/checkpoints/step-00000900/"),
        doc(3, 80, 20, None, state="SUCCEEDED", errorClass=None,
            resumedFrom="gs://b/r/checkpoints/step-00000900/"),
    ]  # fmt: skip
    latest = Checkpoint("gs://b/r/checkpoints/step-00001500/", 1500, at(95))
    first, second, third = attempt_times(docs, latest, now=at(200))
    # Attempt 1 lost its last 10 minutes: it saved the checkpoint attempt 2 resumed from.
    assert first.checkpoints == ((at(20), "step 900"),)
    # Attempt 2 lost all it ran: it saved nothing newer.
    assert second.checkpoints == ()
    # The record's latest checkpoint, saved while attempt 3 ran.
    assert third.checkpoints == ((at(95), "step 1500"),)
    assert (first.error_class, third.state, third.work_lost_seconds) == (
        "preempted",
        "SUCCEEDED",
        None,
    )


def test_attempt_documents_sort_by_number_not_by_text():
    docs = [doc(n, n * 10, 5, 5) for n in (10, 9, 1)]
    assert [a.number for a in attempt_times(docs, None, now=at(500))] == [1, 9, 10]


def test_a_checkpoint_file_names_its_step_and_an_unnamed_one_is_a_checkpoint():
    docs = [doc(1, 0, 30, 10), doc(2, 40, 5, 5, resumedFrom="gs://b/r/ck/model_step700.pt")]
    assert attempt_times(docs, None, now=at(99))[0].checkpoints == ((at(20), "step 700"),)
    docs = [doc(1, 0, 30, 10), doc(2, 40, 5, 5, resumedFrom="gs://b/r/ck/last/")]
    assert attempt_times(docs, None, now=at(99))[0].checkpoints == ((at(20), "checkpoint"),)


def test_the_latest_checkpoint_is_not_ticked_twice():
    docs = [doc(1, 0, 30, 10), doc(2, 40, 5, 5, resumedFrom="gs://b/r/ck/step-9/")]
    latest = Checkpoint("gs://b/r/ck/step-9/", 9, at(20))
    assert attempt_times(docs, latest, now=at(99))[0].checkpoints == ((at(20), "step 9"),)


def test_spans_are_on_vertex_clock_from_the_accounting():
    # flexjobs recorded attempt 1 at minute 0 (its clock); Vertex says it waited 3 minutes
    # before starting at minute 10: the queued span is Vertex's, like the running one.
    docs = [
        doc(1, 10, 20, 5, submittedAt=at(0), queuedSeconds=180.0),
        doc(2, 40, 0, None, state="RUNNING", endedAt=None, errorClass=None, submittedAt=at(30)),
        doc(3, 60, 0, None, state="QUEUED", startedAt=None, endedAt=None, submittedAt=at(58)),
    ]
    first, second, third = attempt_times(docs, None, now=at(70), current_created=at(57))
    assert first.submitted_at == at(7)
    assert second.submitted_at == at(30)  # no accounting yet, and not the current attempt
    assert third.submitted_at == at(57)  # the current attempt: its Vertex job's creation
    never_started = doc(1, 10, 0, None, startedAt=None, endedAt=at(20), queuedSeconds=600.0)
    assert attempt_times([never_started], None, now=at(30))[0].submitted_at == at(10)


def test_a_checkpoint_at_the_right_edge_keeps_its_words_inside():
    attempt = AttemptTimes(
        1, at(0), at(1), at(60), "SUCCEEDED", checkpoints=((at(60), "step 1800"),)
    )
    (tick,) = layout([attempt], now=at(60)).lanes[0].checkpoints
    assert tick.anchor == "end" and tick.label_x > tick.x
    middle = AttemptTimes(1, at(0), at(1), at(60), "SUCCEEDED", checkpoints=((at(30), "step 9"),))
    (tick,) = layout([middle], now=at(60)).lanes[0].checkpoints
    assert (tick.anchor, tick.label_x) == ("middle", tick.x)


def test_the_running_words_stay_clear_of_the_shading():
    mostly_lost = AttemptTimes(1, at(0), at(0), at(60), "FAILED", "preempted", 55 * 60.0)
    lane = layout([mostly_lost], now=at(60)).lanes[0]
    assert spans(lane)["running"].width > 100 and not spans(lane)["running"].inside
    little_lost = AttemptTimes(1, at(0), at(0), at(60), "FAILED", "preempted", 60.0)
    assert spans(layout([little_lost], now=at(60)).lanes[0])["running"].inside


def test_each_lane_names_the_region_its_attempt_ran_in():
    docs = [
        {"attempt": 1, "state": "CANCELLED", "strategy": "SPOT", "location": "us-central1",
         "submittedAt": at(0), "endedAt": at(10)},
        {"attempt": 2, "state": "RUNNING", "strategy": "SPOT", "location": "us-east1",
         "submittedAt": at(12), "startedAt": at(13)},
        {"attempt": 3, "state": "QUEUED", "strategy": "SPOT", "location": "evil.example:443#",
         "submittedAt": at(20)},
    ]  # fmt: skip
    chart = layout(attempt_times(docs, None, at(30)), now=at(30))
    assert [lane.region for lane in chart.lanes] == ["us-central1", "us-east1", ""]
    one, _two, three = chart.lanes
    # Three lines inside the lane when it names a region, two otherwise.
    assert one.title_y < one.subtitle_y < one.region_y < one.y + LANE_HEIGHT
    assert three.subtitle_y == three.y + BAR_TOP + 30
