"""A stand-in for the Eventarc Cloud Storage trigger: the storage emulator, plus a CloudEvent
for every object finalize, delivered the way Eventarc delivers it.

Production wires ``google.cloud.storage.object.v1.finalized`` to ``handle_upload`` with an
Eventarc trigger. The emulator has no notifications, so this process runs the emulator's HTTP
server itself, over a ``Storage`` that turns each successful write into an event, and POSTs
the events in HTTP binary content mode, retrying until they are acknowledged (at least once,
as Eventarc does).

With ``--sim-clock URL`` (the Vertex AI simulator's control surface), an event's object times
(``timeCreated``, ``updated``, and ``ce-time``) are put on the simulator's clock
(:class:`~flexjobs_local.simclock.SimulatedClock`), the one the functions then run on: a
request file's publish time is its object's time.

Run by the stack as its own process::

    python -m flexjobs_local.storage_bridge --port 9023 --bucket flexjobs-local \\
        --deliver-to http://127.0.0.1:8080/ --events-log storage-events.jsonl
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import logging
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
from gcp_storage_emulator.handlers.buckets import create_bucket
from gcp_storage_emulator.server import APIThread
from gcp_storage_emulator.storage import Storage

FINALIZED = "google.cloud.storage.object.v1.finalized"
WORKERS = 4
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 10.0
# How long one delivery may take before it counts as failed and is retried: the ack deadline
# of the stack's Pub/Sub push subscriptions, so every local delivery path behaves alike.
ACK_DEADLINE_SECONDS = 60.0

# Eventarc's ce-id is a Pub/Sub message id: a decimal string. Starting from the clock keeps
# ids unique across restarts of the bridge too; next() on a count is atomic under the GIL.
_ids = itertools.count(time.time_ns() // 1000)


@dataclass(frozen=True)
class Finalize:
    """One finalize, as it goes on the wire: its headers and the JSON object resource."""

    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def id(self) -> str:
        return self.headers["ce-id"]


def encode_body(body: dict[str, Any]) -> bytes:
    """The bytes of an event's body. The events log stores the body as parsed JSON, so a
    redelivery that encodes it with this function sends exactly the bytes first sent."""
    return json.dumps(body).encode("utf-8")


def _header_value(text: str) -> str:
    # HTTP header values are printable ASCII; the CloudEvents HTTP binding percent-encodes
    # anything else (UTF-8), which is the only way a non-ASCII object name fits in ce-subject.
    return "".join(c if " " <= c <= "~" else quote(c, safe="") for c in text)


def finalize_event(
    file_obj: dict[str, Any],
    base_url: str,
    clock: Callable[[datetime], datetime] | None = None,
) -> Finalize:
    """The CloudEvent Eventarc sends for the object resource the emulator just stored.

    ``base_url`` is the emulator's own address: ``selfLink`` and ``mediaLink`` point there, in
    the JSON API's shape (absolute, the object name percent-encoded), where the emulator has a
    relative, unencoded ``selfLink``. ``clock`` maps the object's times onto the functions'
    clock (None: as stored).
    """
    # The emulator stores None for unset fields and keeps ACLs on the resource; the JSON API
    # omits unset fields and Eventarc's StorageObjectData carries no ACL.
    body = {k: v for k, v in file_obj.items() if v is not None and k != "acl"}
    # int64 fields are strings in the JSON API; compose hands the emulator an int size.
    for key in ("generation", "metageneration", "size"):
        if key in body:
            body[key] = str(body[key])
    bucket, name = str(body["bucket"]), str(body["name"])
    path = f"/b/{bucket}/o/{quote(name, safe='')}"
    body["selfLink"] = f"{base_url}/storage/v1{path}"
    body["mediaLink"] = (
        f"{base_url}/download/storage/v1{path}?generation={body['generation']}&alt=media"
    )
    if clock is not None:
        for key in ("timeCreated", "updated"):
            body[key] = _on_clock(body.get(key), clock)
    headers = {
        "ce-specversion": "1.0",
        "ce-type": FINALIZED,
        "ce-source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "ce-subject": _header_value(f"objects/{name}"),
        "ce-id": str(next(_ids)),
        "ce-time": str(body["updated"]),
        "ce-bucket": bucket,
        "Content-Type": "application/json; charset=utf-8",
    }
    return Finalize(headers=headers, body=body)


def _on_clock(value: Any, clock: Callable[[datetime], datetime]) -> Any:
    """An RFC 3339 time of the resource on ``clock``; anything else as it is."""
    try:
        at = datetime.fromisoformat(str(value))
    except ValueError:
        return value
    if at.tzinfo is None:
        return value
    mapped = clock(at).astimezone(UTC)
    return mapped.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FinalizingStorage(Storage):  # type: ignore[misc]  # the emulator ships no types
    """The emulator's storage, announcing every object it finalizes.

    Every write path (media, multipart and resumable uploads, copy, rewrite, compose, restore)
    ends in ``create_file``, so hooking it alone covers them all.
    """

    def __init__(
        self,
        announce: queue.Queue[Finalize],
        base_url: str,
        clock: Callable[[datetime], datetime] | None = None,
    ) -> None:
        super().__init__(use_memory_fs=True)
        self._announce = announce
        self._base_url = base_url
        self._clock = clock

    def create_file(
        self,
        bucket_name: str,
        file_name: str,
        content: bytes,
        file_obj: dict[str, Any],
        file_id: str | None = None,
    ) -> None:
        # A finalize starts a new generation, and GCS starts every generation at
        # metageneration 1; the emulator bumps it to 2 while applying the upload's metadata.
        # Fixed before storing, so a reader's metageneration precondition matches the event.
        file_obj["metageneration"] = "1"
        super().create_file(bucket_name, file_name, content, file_obj, file_id)
        # Only a write that succeeded is announced (an unknown bucket raises above). A copy,
        # because a later metadata patch edits the stored resource in place.
        event = finalize_event(copy.deepcopy(file_obj), self._base_url, self._clock)
        print(f"finalized gs://{bucket_name}/{file_name} as event {event.id}", flush=True)
        self._announce.put(event)


class EventLog:
    """The events that were delivered (all of them, without a destination), one JSON line
    each, for tests to read and redeliver."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()  # several workers append

    def append(self, event: Finalize) -> None:
        if self._path is None:
            return
        line = json.dumps({"headers": event.headers, "body": event.body})
        with self._lock, self._path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")


def deliver(event: Finalize, url: str | None, log: EventLog, stop: threading.Event) -> None:
    """POST ``event`` until a 2xx answer (Eventarc's acknowledgement) or until ``stop``.

    Without ``url`` nothing is delivered: the event is only recorded. Several workers call
    this, so events may arrive out of order, as Eventarc's may.
    """
    delay = FIRST_BACKOFF_SECONDS
    while url is not None:
        if stop.is_set():
            return  # stopped before an acknowledgement: never recorded as delivered
        try:
            answer = requests.post(
                url,
                data=encode_body(event.body),
                headers=event.headers,
                timeout=ACK_DEADLINE_SECONDS,
            )
            if 200 <= answer.status_code < 300:
                print(f"delivered {event.id}: HTTP {answer.status_code}", flush=True)
                break
            problem = f"HTTP {answer.status_code}"
        except requests.RequestException as exc:
            # The function not answering yet is the common case: the stack starts it after us.
            problem = type(exc).__name__
        print(f"retry {event.id} in {delay:.0f}s: {problem}", flush=True)
        stop.wait(delay)
        delay = min(delay * 2, MAX_BACKOFF_SECONDS)
    log.append(event)


def _work(
    events: queue.Queue[Finalize], url: str | None, log: EventLog, stop: threading.Event
) -> None:
    while not stop.is_set():
        try:
            event = events.get(timeout=0.5)
        except queue.Empty:
            continue
        deliver(event, url, log, stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flexjobs_local.storage_bridge")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--bucket", action="append", default=[], help="created at start; repeatable"
    )
    parser.add_argument("--deliver-to", help="URL to POST finalize events to (default: none)")
    parser.add_argument("--events-log", type=Path, help="append delivered events here (jsonl)")
    parser.add_argument(
        "--sim-clock", default=None, help="simulator control URL: object times on its clock"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    events: queue.Queue[Finalize] = queue.Queue()
    clock = None
    if args.sim_clock:
        from flexjobs_local.simclock import SimulatedClock

        clock = SimulatedClock(args.sim_clock).at
    storage = FinalizingStorage(events, f"http://{args.host}:{args.port}", clock)
    for bucket in args.bucket:
        create_bucket(bucket, storage)
    log = EventLog(args.events_log)
    for n in range(WORKERS):
        threading.Thread(
            target=_work,
            args=(events, args.deliver_to, log, stop),
            name=f"deliver-{n}",
            daemon=True,
        ).start()
    # Server.start in the emulator, less the bucket handling: the server binds inside its
    # thread, so a port in use shows as the thread dying before it runs.
    api = APIThread(args.host, args.port, storage, daemon=True)
    api.start()
    while not api.is_running.wait(0.1):
        if not api.is_alive():
            return 1
    print("STORAGE READY", flush=True)
    while not stop.wait(0.5):
        pass
    api.join()  # shuts the HTTP server down; workers are daemons and stop with the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
