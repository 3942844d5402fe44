"""The storage bridge alone: the storage emulator plus Eventarc-shaped finalize events.

Each test starts ``python -m flexjobs_local.storage_bridge`` on a free port, in its own process
group, delivering to a small HTTP receiver this test runs in a thread. Objects are written
with the real ``google-cloud-storage`` client, and the events are read back with
``cloudevents.http.from_http``, the parser functions-framework uses.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from cloudevents.http import from_http
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from flexjobs_local import procs
from flexjobs_local.storage_bridge import FINALIZED, encode_body
from tests.integration.helpers import Receiver, wait_for

pytestmark = pytest.mark.integration

BUCKET = "uploads"
OTHER_BUCKET = "other-uploads"
# Every JSON API object field a finalize of an uploaded object carries.
OBJECT_FIELDS = {
    "kind",
    "id",
    "selfLink",
    "name",
    "bucket",
    "generation",
    "metageneration",
    "contentType",
    "timeCreated",
    "updated",
    "storageClass",
    "timeStorageClassUpdated",
    "size",
    "md5Hash",
    "crc32c",
    "etag",
    "mediaLink",
}

#: The clone's root, where flexjobs_local is found.
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.stop()


@pytest.fixture
def start_bridge(tmp_path: Path) -> Iterator[Callable[..., tuple[str, Path]]]:
    """Start a bridge (``deliver_to`` None: no destination); returns its URL and events log.

    Teardown sends SIGTERM to each bridge's group and checks it exited cleanly and left no
    process behind.
    """
    children: list[procs.Child] = []

    def start(deliver_to: str | None) -> tuple[str, Path]:
        port = procs.free_port()
        events_log = tmp_path / f"events-{port}.jsonl"
        argv = [
            sys.executable,
            "-m",
            "flexjobs_local.storage_bridge",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--bucket={BUCKET}",
            f"--bucket={OTHER_BUCKET}",
            f"--events-log={events_log}",
            *([f"--deliver-to={deliver_to}"] if deliver_to else []),
        ]
        # flexjobs_local is run from the clone, never installed: its root on the path.
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        child = procs.start(f"bridge-{port}", argv, env, tmp_path)
        children.append(child)
        procs.wait_until(child, procs.log_contains(child, "STORAGE READY"), 30)
        return f"http://127.0.0.1:{port}", events_log

    yield start
    procs.kill_groups([c.pgid for c in children], children=[c.proc for c in children])
    for child in children:
        assert child.proc.wait(timeout=10) == 0, child.tail()  # SIGTERM is a clean exit
        with pytest.raises(ProcessLookupError):
            os.killpg(child.pgid, 0)


def _client(url: str) -> storage.Client:
    return storage.Client(
        project="flexjobs-test",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": url},
    )


def _logged(events_log: Path) -> list[dict[str, Any]]:
    if not events_log.exists():
        return []
    return [json.loads(line) for line in events_log.read_text().splitlines()]


def _lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def test_an_upload_posts_one_finalize_shaped_as_eventarc_sends_it(
    start_bridge: Callable[..., tuple[str, Path]], receiver: Receiver
) -> None:
    url, events_log = start_bridge(receiver.url)
    name = "requests/team a/job 1.json"
    blob = _client(url).bucket(BUCKET).blob(name)
    blob.metadata = {"origin": "test"}
    blob.upload_from_string(b'{"requestId": "r1"}', content_type="application/json")

    wait_for(lambda: receiver.posts, 15, "the finalize POST")
    time.sleep(0.5)  # a second POST would show up here
    assert len(receiver.posts) == 1
    raw_headers, raw_body = receiver.posts[0]
    headers = _lower(raw_headers)
    body = json.loads(raw_body)

    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-type"] == "google.cloud.storage.object.v1.finalized"
    assert headers["ce-source"] == f"//storage.googleapis.com/projects/_/buckets/{BUCKET}"
    assert headers["ce-subject"] == f"objects/{name}"
    assert headers["ce-bucket"] == BUCKET
    assert headers["ce-id"].isdigit()
    assert headers["ce-time"] == body["updated"]
    assert headers["content-type"] == "application/json; charset=utf-8"

    assert set(body) == OBJECT_FIELDS | {"metadata"}
    assert body["kind"] == "storage#object"
    assert body["name"] == name
    assert body["bucket"] == BUCKET
    assert body["id"] == f"{BUCKET}/{name}/{blob.generation}"
    assert body["generation"] == str(blob.generation)
    assert body["metageneration"] == "1"
    assert body["size"] == "19"
    assert body["contentType"] == "application/json"
    assert body["md5Hash"] == blob.md5_hash
    assert body["crc32c"] == blob.crc32c
    assert body["metadata"] == {"origin": "test"}
    assert body["selfLink"] == f"{url}/storage/v1/b/{BUCKET}/o/{quote(name, safe='')}"
    assert body["mediaLink"].startswith(f"{url}/download/storage/v1/b/{BUCKET}/o/requests%2F")
    # The emulator answers a read with the same metageneration the event announced.
    assert _client(url).bucket(BUCKET).get_blob(name).metageneration == 1

    event = from_http(raw_headers, raw_body)
    assert event["type"] == FINALIZED
    assert event["source"] == f"//storage.googleapis.com/projects/_/buckets/{BUCKET}"
    assert event["subject"] == f"objects/{name}"
    assert event["bucket"] == BUCKET
    assert event["id"] == headers["ce-id"]
    assert isinstance(event.data["generation"], str)
    assert event.data["generation"] == str(blob.generation)
    assert isinstance(event.data["size"], str)

    # The log keeps the delivered event so that it can be sent again byte for byte.
    logged = wait_for(lambda: _logged(events_log), 5, "the events log")
    assert len(logged) == 1
    assert _lower(logged[0]["headers"]) == {
        k: v for k, v in headers.items() if k.startswith("ce-") or k == "content-type"
    }
    assert encode_body(logged[0]["body"]) == raw_body


def test_every_write_path_finalizes_with_string_sizes(
    start_bridge: Callable[..., tuple[str, Path]], receiver: Receiver
) -> None:
    url, _ = start_bridge(receiver.url)
    bucket = _client(url).bucket(BUCKET)
    part = bucket.blob("parts/a")
    part.upload_from_string(b"abc")
    bucket.copy_blob(part, bucket, "parts/copied")
    composed = bucket.blob("parts/composed")
    composed.compose([part, bucket.blob("parts/copied")])
    resumable = bucket.blob("parts/resumable", chunk_size=256 * 1024)
    resumable.upload_from_string(b"x" * (300 * 1024))
    other = _client(url).bucket(OTHER_BUCKET).blob("elsewhere")
    other.upload_from_string(b"z")

    wait_for(lambda: len(receiver.posts) >= 5, 15, "five finalize POSTs")
    events = [from_http(h, b) for h, b in receiver.posts]
    by_name = {e.data["name"]: e for e in events}
    assert set(by_name) == {
        "parts/a",
        "parts/copied",
        "parts/composed",
        "parts/resumable",
        "elsewhere",
    }
    assert by_name["parts/composed"].data["size"] == "6"  # the emulator's compose gives an int
    assert by_name["parts/resumable"].data["size"] == str(300 * 1024)
    assert all(e.data["metageneration"] == "1" for e in events)
    assert by_name["elsewhere"]["bucket"] == OTHER_BUCKET
    assert by_name["elsewhere"]["source"].endswith(f"/buckets/{OTHER_BUCKET}")
    assert len({e["id"] for e in events}) == 5


def test_a_failed_delivery_is_retried_with_the_same_event(
    start_bridge: Callable[..., tuple[str, Path]], receiver: Receiver
) -> None:
    receiver.answers = [500]
    url, events_log = start_bridge(receiver.url)
    _client(url).bucket(BUCKET).blob("requests/retry.json").upload_from_string(b"{}")

    wait_for(lambda: len(receiver.posts) >= 2, 15, "the redelivery after a 500")
    (first_headers, first_body), (second_headers, second_body) = receiver.posts[:2]
    assert _lower(first_headers)["ce-id"] == _lower(second_headers)["ce-id"]
    assert first_body == second_body
    wait_for(lambda: _logged(events_log), 5, "the events log")
    time.sleep(1.5)  # past the first backoff: an acknowledged event is not sent again
    assert len(receiver.posts) == 2
    logged = _logged(events_log)
    assert [_lower(e["headers"])["ce-id"] for e in logged] == [_lower(first_headers)["ce-id"]]


def test_events_written_before_the_receiver_listens_are_delivered_once_it_does(
    start_bridge: Callable[..., tuple[str, Path]],
) -> None:
    port = procs.free_port()
    url, events_log = start_bridge(f"http://127.0.0.1:{port}/")
    _client(url).bucket(BUCKET).blob("requests/early.json").upload_from_string(b"{}")
    time.sleep(1.5)  # at least one connection refused
    late = Receiver(port)
    try:
        wait_for(lambda: late.posts, 20, "the delivery once the receiver is up")
        assert json.loads(late.posts[0][1])["name"] == "requests/early.json"
        wait_for(lambda: _logged(events_log), 5, "the events log")
    finally:
        late.stop()


def test_without_a_destination_events_are_only_recorded(
    start_bridge: Callable[..., tuple[str, Path]], receiver: Receiver
) -> None:
    url, events_log = start_bridge(None)
    blob = _client(url).bucket(BUCKET).blob("requests/quiet.json")
    blob.upload_from_string(b"{}")

    logged = wait_for(lambda: _logged(events_log), 10, "the recorded event")
    assert logged[0]["body"]["generation"] == str(blob.generation)
    assert receiver.posts == []


def test_a_write_that_fails_announces_nothing(
    start_bridge: Callable[..., tuple[str, Path]], receiver: Receiver
) -> None:
    url, events_log = start_bridge(receiver.url)
    with pytest.raises(gexc.NotFound):
        _client(url).bucket("no-such-bucket").blob("x").upload_from_string(b"x")
    _client(url).bucket(BUCKET).blob("after").upload_from_string(b"x")

    wait_for(lambda: _logged(events_log), 10, "the event of the good write")
    assert [json.loads(body)["name"] for _, body in receiver.posts] == ["after"]
