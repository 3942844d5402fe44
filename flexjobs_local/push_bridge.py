"""A stand-in for Pub/Sub push delivery: pull from the emulator, POST each message as a push.

Production subscriptions push to the functions, and push raises its concurrency while the
endpoint keeps answering 2xx, so a burst reaches a function many messages at once. The
emulator's own push does not: it holds about two messages of a subscription in flight
(measured: 100 messages to an endpoint that answers in 100 ms took 5.2 s, at most 2 at once).
Through it, any throughput figure is one delivery's round trip and any slow handler delays
every other message. So the stack creates pull subscriptions and this process delivers them
as push does:

- the body is the push body, in the same shape (``message`` with ``data``,
  ``attributes``, ``messageId``/``message_id``, ``publishTime``/``publish_time``, and
  ``subscription``), POSTed to the same endpoint the push subscription would name;
- a 102, 200, 201, 202 or 204 answer acknowledges (push's success codes); anything else, or no
  answer within the ack deadline, is redelivered after an exponential backoff (the
  subscription's retry policy: 1 s doubling to 10 s), so delivery stays at least once;
- up to ``--concurrency`` messages of each subscription are in flight at once: the functions'
  thread count (THREADS), as a gen2 function's concurrency bounds production's;
- with ``--sim-clock URL`` (the Vertex AI simulator's control surface), the publish time is
  put on the simulator's clock (:class:`~flexjobs_local.simclock.SimulatedClock`), the clock
  the functions then run on too: a hint's publish time and the read it asks for compare on one
  clock;
- with ``--max-delivery-attempts N``, a message whose Nth delivery fails is given up, as a
  subscription's dead-letter policy gives it up (``infra/``: ``max_delivery_attempts``): it is
  written to ``--dead-letters`` (a JSON line each, the stand-in for the dead-letter topic) and
  acknowledged. Without it (0, the default), a message is redelivered until acknowledged.

Run by the stack as its own process::

    python -m flexjobs_local.push_bridge --concurrency 64 --ack-deadline 60 \\
        --route projects/p/subscriptions/s=http://127.0.0.1:8080/projects/p/topics/t
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests

# What push counts as an acknowledgement.
ACK_CODES = frozenset({102, 200, 201, 202, 204})
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 10.0


@dataclass(frozen=True)
class Route:
    subscription: str
    url: str

    @classmethod
    def parse(cls, text: str) -> Route:
        subscription, sep, url = text.partition("=")
        if not sep or not subscription.startswith("projects/") or not url.startswith("http"):
            raise argparse.ArgumentTypeError(f"expected SUBSCRIPTION=URL, got {text!r}")
        return cls(subscription, url)


def _timestamp(at: datetime) -> str:
    # Push's shape: UTC, milliseconds, "Z".
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def push_body(
    subscription: str,
    *,
    data: bytes,
    attributes: dict[str, str],
    message_id: str,
    published: datetime,
) -> dict[str, Any]:
    """The JSON body push POSTs for one message (both spellings of id and time, as push)."""
    message: dict[str, Any] = {
        "attributes": dict(attributes),  # present when empty too, as push sends it
        "data": base64.b64encode(data).decode("ascii"),
        "messageId": message_id,
        "message_id": message_id,
        "publishTime": _timestamp(published),
        "publish_time": _timestamp(published),
    }
    return {"message": message, "subscription": subscription}


class Backoff:
    """Each unacknowledged message's next delay and failed deliveries so far, by
    (subscription, message id); forgotten once it is acknowledged, so it holds only the
    messages that failed and are not delivered yet."""

    def __init__(self) -> None:
        self._delays: dict[tuple[str, str], float] = {}
        self._failures: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def next(self, key: tuple[str, str]) -> float:
        """Count one more failed delivery; the delay before the next one."""
        with self._lock:
            delay = self._delays.get(key, FIRST_BACKOFF_SECONDS)
            self._delays[key] = min(delay * 2, MAX_BACKOFF_SECONDS)
            self._failures[key] = self._failures.get(key, 0) + 1
            return delay

    def failures(self, key: tuple[str, str]) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._delays.pop(key, None)
            self._failures.pop(key, None)


class DeadLetters:
    """The stand-in for a dead-letter topic: one JSON line per message given up."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, subscription: str, message: Any, attempts: int, problem: str) -> None:
        if self.path is None:
            return
        line = {
            "subscription": subscription,
            "messageId": message.message_id,
            "data": base64.b64encode(message.data).decode("ascii"),
            "attributes": dict(message.attributes),
            "publishTime": _timestamp(message.publish_time),
            "attempts": attempts,
            "problem": problem,
        }
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


class Deliverer:
    """POSTs one route's messages; the subscriber's threads call it, one message each.

    The client library's streaming pull holds each message's lease until it is acknowledged
    or nacked, and its flow control bounds the messages in flight, as a push subscription's
    concurrency would.
    """

    def __init__(
        self,
        route: Route,
        ack_deadline: float,
        backoff: Backoff,
        max_attempts: int = 0,
        dead_letters: DeadLetters | None = None,
        *,
        clock: Callable[[datetime], datetime] | None = None,
    ) -> None:
        self.route = route
        # Maps a publish time onto the functions' clock (None: as published).
        self.clock = clock
        self.ack_deadline = ack_deadline
        self.backoff = backoff
        self.max_attempts = max_attempts
        self.dead_letters = dead_letters or DeadLetters(None)
        self._sessions = threading.local()  # keep-alive per thread; Session is not thread-safe

    def _session(self) -> requests.Session:
        session = getattr(self._sessions, "session", None)
        if session is None:
            session = self._sessions.session = requests.Session()
        return session

    def __call__(self, message: Any) -> None:
        key = (self.route.subscription, message.message_id)
        try:
            body = push_body(
                self.route.subscription,
                data=message.data,
                attributes=dict(message.attributes),
                message_id=message.message_id,
                published=(
                    self.clock(message.publish_time) if self.clock else message.publish_time
                ),
            )
            # Push waits for an answer up to the ack deadline, then counts the delivery failed.
            answer = self._session().post(
                self.route.url,
                data=json.dumps(body).encode("utf-8"),
                headers={"Content-Type": "application/json"},
                timeout=self.ack_deadline,
            )
            problem = None if answer.status_code in ACK_CODES else f"HTTP {answer.status_code}"
        except Exception as exc:  # noqa: BLE001 - any fault is a failed delivery, redelivered
            # Caught broadly: an exception escaping this callback would end the subscriber's
            # stream, and with it every later delivery of the subscription.
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            self.backoff.forget(key)
            message.ack()
            return
        delay = self.backoff.next(key)
        attempts = self.backoff.failures(key)
        if self.max_attempts and attempts >= self.max_attempts:
            # Given up, as a dead-letter policy gives it up: never delivered again.
            self.backoff.forget(key)
            self.dead_letters.write(self.route.subscription, message, attempts, problem)
            print(f"dead-lettered {message.message_id} after {attempts}: {problem}", flush=True)
            message.ack()
            return
        print(f"retry {message.message_id} in {delay:.0f}s: {problem}", flush=True)
        try:
            # The message stays leased (and counts against the flow control) until the nack,
            # so it comes back after the backoff, not at once; no delivery thread waits for it.
            timer = threading.Timer(delay, message.nack)
            timer.daemon = True
            timer.start()
        except RuntimeError:  # no thread to spare: redelivered at once, without the backoff
            message.nack()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flexjobs_local.push_bridge")
    parser.add_argument("--route", type=Route.parse, action="append", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--ack-deadline", type=float, default=60.0)
    parser.add_argument("--max-delivery-attempts", type=int, default=0, help="0: never give up")
    parser.add_argument("--dead-letters", default=None, help="JSON lines of messages given up")
    parser.add_argument(
        "--sim-clock", default=None, help="simulator control URL: publish times on its clock"
    )
    args = parser.parse_args(argv)
    clock = None
    if args.sim_clock:
        from flexjobs_local.simclock import SimulatedClock

        clock = SimulatedClock(args.sim_clock).at

    from google.cloud.pubsub_v1 import SubscriberClient
    from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler
    from google.cloud.pubsub_v1.types import FlowControl

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    subscriber = SubscriberClient()  # PUBSUB_EMULATOR_HOST, from the stack
    backoff = Backoff()
    dead_letters = DeadLetters(args.dead_letters)
    streams = []
    for route in args.route:
        # Leased while the POST runs and through its backoff; past that, the emulator
        # redelivers it anyway (at least once).
        flow = FlowControl(
            max_messages=args.concurrency,
            max_lease_duration=args.ack_deadline + MAX_BACKOFF_SECONDS,
        )
        pool = ThreadPoolExecutor(args.concurrency, thread_name_prefix="push")
        streams.append(
            subscriber.subscribe(
                route.subscription,
                Deliverer(
                    route,
                    args.ack_deadline,
                    backoff,
                    args.max_delivery_attempts,
                    dead_letters,
                    clock=clock,
                ),
                flow_control=flow,
                scheduler=ThreadScheduler(executor=pool),
            )
        )
    print("PUSH READY", flush=True)
    failed = False
    while not stop.wait(0.5):
        for route, stream in zip(args.route, streams, strict=True):
            if stream.done():  # the client retries what it can: the stream ended for good
                print(f"{route.subscription} stopped: {stream.exception()}", flush=True)
                failed = True
                stop.set()
    for stream in streams:
        stream.cancel()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
