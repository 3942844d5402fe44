"""The push bridge's pure parts: the body it POSTs, its routes and its backoff."""

from __future__ import annotations

import argparse
import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from flexjobs_local.push_bridge import Backoff, DeadLetters, Deliverer, Route, push_body

SUBSCRIPTION = "projects/p/subscriptions/job-requests-handle_job_request"


def test_the_body_spells_id_and_time_both_ways_in_utc_milliseconds():
    published = datetime(2026, 12, 1, 4, 13, 38, 453911, tzinfo=timezone(timedelta(hours=1)))
    body = push_body(
        SUBSCRIPTION, data=b'{"a": 1}', attributes={"k": "v"}, message_id="7", published=published
    )
    assert body == {
        "message": {
            "attributes": {"k": "v"},
            "data": base64.b64encode(b'{"a": 1}').decode(),
            "messageId": "7",
            "message_id": "7",
            "publishTime": "2026-12-01T03:13:38.453Z",
            "publish_time": "2026-12-01T03:13:38.453Z",
        },
        "subscription": SUBSCRIPTION,
    }


def test_empty_attributes_are_sent_empty_not_left_out():
    at = datetime(2026, 12, 1, tzinfo=UTC)
    body = push_body(SUBSCRIPTION, data=b"", attributes={}, message_id="1", published=at)
    assert body["message"]["attributes"] == {} and body["message"]["data"] == ""


def test_a_route_is_a_subscription_and_an_http_url():
    route = Route.parse(f"{SUBSCRIPTION}=http://127.0.0.1:8080/projects/p/topics/t")
    assert route == Route(SUBSCRIPTION, "http://127.0.0.1:8080/projects/p/topics/t")
    for bad in ("no-equals", "s=http://x", f"{SUBSCRIPTION}=ftp://x"):
        with pytest.raises(argparse.ArgumentTypeError):
            Route.parse(bad)


def test_the_backoff_doubles_to_its_cap_per_message_and_starts_over_once_acknowledged():
    backoff = Backoff()
    a, b, other = (SUBSCRIPTION, "a"), (SUBSCRIPTION, "b"), ("projects/p/subscriptions/o", "a")
    assert [backoff.next(a) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.next(b) == 1.0  # each message its own
    assert backoff.next(other) == 1.0  # and each subscription's copy of it
    backoff.forget(a)
    assert backoff.next(a) == 1.0


def test_the_backoff_counts_failed_deliveries_per_message():
    backoff = Backoff()
    key = (SUBSCRIPTION, "a")
    for _ in range(3):
        backoff.next(key)
    assert backoff.failures(key) == 3 and backoff.failures((SUBSCRIPTION, "b")) == 0
    backoff.forget(key)
    assert backoff.failures(key) == 0


class FakeMessage:
    def __init__(self) -> None:
        self.message_id, self.data, self.attributes = "m1", b"{}", {"k": "v"}
        self.publish_time = datetime(2026, 12, 1, tzinfo=UTC)
        self.acks = self.nacks = 0

    def ack(self) -> None:
        self.acks += 1

    def nack(self) -> None:
        self.nacks += 1


def test_a_message_is_given_up_at_its_last_delivery_attempt_as_a_dead_letter(tmp_path):
    # Nothing listens on port 9 of 127.0.0.1: every delivery fails at once.
    route = Route(SUBSCRIPTION, "http://127.0.0.1:9/projects/p/topics/t")
    path = tmp_path / "dead.jsonl"
    deliver = Deliverer(route, 5, Backoff(), max_attempts=3, dead_letters=DeadLetters(str(path)))
    message = FakeMessage()
    for _ in range(2):
        deliver(message)
    assert message.acks == 0 and not path.exists()  # redelivered after its backoff
    deliver(message)
    assert message.acks == 1
    (line,) = [json.loads(text) for text in path.read_text().splitlines()]
    assert line["messageId"] == "m1" and line["attempts"] == 3
    assert line["subscription"] == SUBSCRIPTION and line["attributes"] == {"k": "v"}
    assert "ConnectionError" in line["problem"]


def test_with_the_simulators_clock_the_publish_time_is_delivered_on_it():
    sent: list[dict] = []

    class Session:
        def post(self, url, data, headers, timeout):
            sent.append(json.loads(data))

            class Answer:
                status_code = 204

            return Answer()

    route = Route(SUBSCRIPTION, "http://127.0.0.1:9/projects/p/topics/t")
    deliver = Deliverer(route, 5, Backoff(), clock=lambda at: at + timedelta(hours=1))
    deliver._session = Session  # type: ignore[method-assign]
    message = FakeMessage()
    deliver(message)
    assert message.acks == 1
    assert sent[0]["message"]["publishTime"] == "2026-12-01T01:00:00.000Z"
