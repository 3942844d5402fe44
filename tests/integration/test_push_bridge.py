"""The push bridge alone: the Pub/Sub emulator's messages POSTed as push delivers them.

A Pub/Sub emulator of this module's own and each test's bridge run as processes in their own
groups; the endpoints are small HTTP receivers in threads. The emulator's own push delivery
is the reference for the body's shape: one topic feeds an emulator push subscription and a
bridged pull subscription, and the two bodies must agree.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flexjobs_local import procs
from tests.integration.helpers import Receiver, wait_for

pytestmark = pytest.mark.integration

PROJECT = "flexjobs-push-test"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    gcloud = shutil.which("gcloud")
    assert gcloud, "gcloud is required for the Pub/Sub emulator"
    folder = tmp_path_factory.mktemp("pubsub")
    host = f"127.0.0.1:{procs.free_port()}"
    argv = [gcloud, "beta", "emulators", "pubsub", "start", f"--host-port={host}"]
    child = procs.start("pubsub", [*argv, f"--project={PROJECT}"], dict(os.environ), folder)
    try:
        procs.wait_until(child, procs.http_ok(f"http://{host}"), 90)
        yield host
    finally:
        procs.kill_groups([child.pgid], children=[child.proc])


@pytest.fixture
def clients(emulator: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator)
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


@pytest.fixture
def topic(clients: tuple[Any, Any]) -> str:
    publisher, _ = clients
    name = publisher.topic_path(PROJECT, f"t-{uuid.uuid4().hex[:8]}")
    publisher.create_topic(name=name)
    return str(name)


@pytest.fixture
def subscribe(clients: tuple[Any, Any], topic: str) -> Callable[..., str]:
    """A subscription to the test's topic: pushed by the emulator to ``push_to``, else pull."""
    _, subscriber = clients

    def make(push_to: str | None = None) -> str:
        name = subscriber.subscription_path(PROJECT, f"s-{uuid.uuid4().hex[:8]}")
        push = {"push_config": {"push_endpoint": push_to}} if push_to else {}
        subscriber.create_subscription(
            request={"name": name, "topic": topic, "ack_deadline_seconds": 30, **push}
        )
        return str(name)

    return make


#: The clone's root, where flexjobs_local is found.
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def start_bridge(emulator: str, tmp_path: Path) -> Iterator[Callable[..., None]]:
    """Start a bridge for one route; teardown checks SIGTERM ends it cleanly, group and all."""
    children: list[procs.Child] = []

    def start(subscription: str, url: str, concurrency: int = 64) -> None:
        argv = [
            sys.executable,
            "-m",
            "flexjobs_local.push_bridge",
            f"--concurrency={concurrency}",
            "--ack-deadline=30",
            f"--route={subscription}={url}",
        ]
        # flexjobs_local is run from the clone, never installed: its root on the path.
        env = {**os.environ, "PUBSUB_EMULATOR_HOST": emulator, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        child = procs.start(f"push-{len(children)}", argv, env, tmp_path)
        children.append(child)
        procs.wait_until(child, procs.log_contains(child, "PUSH READY"), 30)

    yield start
    procs.kill_groups([c.pgid for c in children], children=[c.proc for c in children])
    for child in children:
        assert child.proc.wait(timeout=10) == 0, child.tail()
        with pytest.raises(ProcessLookupError):
            os.killpg(child.pgid, 0)


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(delay: float = 0.0) -> Receiver:
        made.append(Receiver(delay=delay))
        return made[-1]

    yield make
    for receiver in made:
        receiver.stop()


def _bodies(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(body) for _, body in receiver.posts]


def test_the_body_is_the_one_the_emulator_pushes(
    clients: tuple[Any, Any],
    topic: str,
    subscribe: Callable[..., str],
    start_bridge: Callable[..., None],
    receivers: Callable[..., Receiver],
) -> None:
    pushed, bridged = receivers(), receivers()
    pushed_subscription = subscribe(push_to=pushed.url)
    bridged_subscription = subscribe()
    start_bridge(bridged_subscription, bridged.url)
    publisher, _ = clients
    publisher.publish(topic, b'{"requestId": "r1"}', origin="upstream", k="v").result(30)
    publisher.publish(topic, b"no attributes").result(30)

    wait_for(lambda: len(pushed.posts) >= 2 and len(bridged.posts) >= 2, 30, "both deliveries")
    by_id = {body["message"]["messageId"]: body for body in _bodies(pushed)}
    for body in _bodies(bridged):
        reference = by_id[body["message"]["messageId"]]
        assert body["message"] == reference["message"]  # every field and spelling, as pushed
        assert body["subscription"] == bridged_subscription
        assert reference["subscription"] == pushed_subscription
    assert {headers["Content-Type"] for headers, _ in bridged.posts} == {"application/json"}


def test_a_refused_delivery_comes_back_after_a_backoff_then_never_again(
    clients: tuple[Any, Any],
    topic: str,
    subscribe: Callable[..., str],
    start_bridge: Callable[..., None],
    receivers: Callable[..., Receiver],
) -> None:
    receiver = receivers()
    receiver.answers = [500]
    start_bridge(subscribe(), receiver.url)
    publisher, _ = clients
    publisher.publish(topic, b"again").result(30)

    wait_for(lambda: len(receiver.posts) >= 2, 30, "the redelivery")
    refused_at, again_at = receiver.times[:2]
    assert again_at - refused_at >= 1.0  # the first backoff is 1 s
    first, second = _bodies(receiver)[:2]
    assert first == second
    time.sleep(2.0)  # an acknowledged message is not delivered again
    assert len(receiver.posts) == 2


def test_many_messages_are_in_flight_at_once_up_to_the_concurrency(
    clients: tuple[Any, Any],
    topic: str,
    subscribe: Callable[..., str],
    start_bridge: Callable[..., None],
    receivers: Callable[..., Receiver],
) -> None:
    receiver = receivers(delay=0.5)
    start_bridge(subscribe(), receiver.url, concurrency=8)
    publisher, _ = clients
    for future in [publisher.publish(topic, str(n).encode()) for n in range(24)]:
        future.result(30)

    wait_for(lambda: len(receiver.posts) >= 24, 30, "24 deliveries")
    assert sorted(int(_data(body)) for body in _bodies(receiver)) == list(range(24))
    # The emulator's own push holds about 2 at once; the bridge fills its 8 and never more.
    assert 4 <= receiver.peak <= 8, receiver.peak


def _data(body: dict[str, Any]) -> str:
    return base64.b64decode(body["message"]["data"]).decode()
