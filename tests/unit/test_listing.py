"""Query strings of the status page: what is accepted, what is refused, and cursors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.kernel.errors import InvalidRequest
from shared.status.listing import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Cursor,
    next_cursor,
    parse_age,
    read_filters,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def problems(params, **kwargs) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as refused:
        read_filters(params, now=NOW, **kwargs)
    return {e.path: e.message for e in refused.value.errors}


def test_no_parameters_is_the_newest_page_of_everything():
    asked = read_filters({}, now=NOW)
    assert asked.listing.states == () and asked.listing.since is None
    assert asked.listing.size == DEFAULT_PAGE_SIZE and asked.listing.after is None


def test_states_age_limit_and_cursor_are_read():
    token = Cursor(NOW, "job/1").token()
    asked = read_filters(
        {"state": ["RUNNING", "QUEUED", "RUNNING"], "age": ["7d"], "limit": ["25"],
         "cursor": [token]},
        now=NOW,
    )  # fmt: skip
    assert asked.listing.states == ("RUNNING", "QUEUED")
    assert asked.listing.since == NOW - timedelta(days=7)
    assert asked.listing.size == 25 and asked.limit == 25 and asked.age == "7d"
    assert asked.listing.after == Cursor(NOW, "job/1")


def test_empty_values_from_a_form_count_as_not_given():
    asked = read_filters({"state": [""], "age": [""], "limit": [""]}, now=NOW)
    assert asked.listing.states == () and asked.listing.since is None
    assert asked.listing.size == DEFAULT_PAGE_SIZE


@pytest.mark.parametrize(
    ("text", "span"), [("30m", timedelta(minutes=30)), ("24h", timedelta(hours=24)),
                       ("366d", timedelta(days=366))],
)  # fmt: skip
def test_ages(text, span):
    assert parse_age(text) == span


@pytest.mark.parametrize("text", ["0h", "367d", "1w", "-1h", "1.5h", "24", "h", "\uff11h", " 1h"])
def test_bad_ages(text):
    with pytest.raises(ValueError):
        parse_age(text)


def test_every_problem_is_reported_at_once():
    found = problems(
        {"state": ["RUNNING", "<script>"], "age": ["forever"], "limit": ["0"],
         "cursor": ["%%%"], "debug": ["1"]}
    )  # fmt: skip
    assert set(found) == {"state", "age", "limit", "cursor", "debug"}
    assert found["state"].endswith('not "<script>"')
    assert found["debug"] == "is not a parameter of this page"
    assert found["limit"] == f"must be a whole number from 1 to {MAX_PAGE_SIZE}"


@pytest.mark.parametrize("limit", ["1001", "-5", "1e3", "10.0", "99999999999999999999"])
def test_limits_out_of_range(limit):
    assert "limit" in problems({"limit": [limit]})


def test_a_parameter_given_twice_is_refused():
    assert problems({"age": ["1h", "2h"]}) == {"age": "is given more than once"}


def test_pages_without_filters_refuse_them():
    assert set(problems({"state": ["RUNNING"], "age": ["1h"]}, filters=False)) == {"state", "age"}
    assert read_filters({"limit": ["5"]}, now=NOW, filters=False).listing.size == 5


def test_deployment_states_are_checked_against_their_own_names():
    assert "state" in problems({"state": ["RUNNING"]}, states=("DEPLOYED", "FAILED"))


def test_a_cursor_round_trips_with_microseconds_and_any_request_id():
    cursor = Cursor(NOW + timedelta(microseconds=123456), "gcs:b/x.jsonl#1:2 é/%")
    assert Cursor.parse(cursor.token()) == cursor
    assert "=" not in cursor.token() and "/" not in cursor.token()


@pytest.mark.parametrize(
    "token",
    ["", "bm90IGpzb24", "e30", "eyJ0IjogMSwgImlkIjogIngifQ", "x" * 7000,
     Cursor(NOW, "x").token()[:-3] + "!!!"],
)  # fmt: skip
def test_tokens_this_page_did_not_make_are_refused(token):
    with pytest.raises(ValueError):
        Cursor.parse(token)


def test_a_cursor_without_a_time_zone_is_refused():
    import base64
    import json

    raw = json.dumps({"t": "2026-11-30T12:00:00", "id": "x"}).encode()
    with pytest.raises(ValueError):
        Cursor.parse(base64.urlsafe_b64encode(raw).decode())


def test_the_next_cursor_is_the_last_row_shown_when_more_follow():
    rows = [{"createdAt": NOW - timedelta(seconds=n), "requestId": f"r{n}"} for n in range(4)]
    assert next_cursor(rows, 3) == Cursor(NOW - timedelta(seconds=2), "r2")
    assert next_cursor(rows[:3], 3) is None
