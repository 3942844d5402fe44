"""Side effects of the simulation that leave the process: Pub/Sub state hints and checkpoints.

The engine emits events under its lock; :class:`SideEffects` only enqueues them there and does
the network work on one worker thread, in emission order. One thread for both kinds keeps
cause before effect: the checkpoint objects a job wrote are in storage before the hint that it
failed is published.
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import requests
from google.api_core.exceptions import GoogleAPIError
from google.auth.credentials import AnonymousCredentials

from flexjobs_local.simulator.clock import rfc3339
from flexjobs_local.simulator.common import FAILED, CheckpointWrite, StateChanged
from flexjobs_local.simulator.engine import Engine

HINT_TEXT = {
    "JOB_STATE_QUEUED": "Job is queued.",
    "JOB_STATE_PENDING": "Waiting for job to be provisioned.",
    "JOB_STATE_RUNNING": "Job is running.",
    "JOB_STATE_SUCCEEDED": "Job completed successfully.",
    "JOB_STATE_FAILED": "Job failed.",
    "JOB_STATE_CANCELLING": "Job is being cancelled.",
    "JOB_STATE_CANCELLED": "Job was cancelled.",
}
"""``textPayload`` of the hint log entry per state (FAILED appends the error message)."""

# What a side effect can raise when the emulator is down or refuses: all are reported in
# stats() and on stderr, and the worker carries on with the next item.
_EFFECT_ERRORS = (GoogleAPIError, requests.RequestException, OSError, TimeoutError)


@dataclass
class _Stats:
    done: int = 0
    failed: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"done": self.done, "failed": self.failed, "lastError": self.last_error}


@dataclass
class HintChaos:
    """What befalls a state change's hints on their way out, each drawn per state change
    from a seeded generator: ``drop`` (the probability that none is published, as a log sink
    may lose entries), ``repeat`` (published twice over) and ``delay`` (published up to
    ``delay_seconds`` later, so after hints of later changes). All 0: hints as Vertex sends
    them. The counters say what befell how many changes."""

    drop: float = 0.0
    repeat: float = 0.0
    delay: float = 0.0
    delay_seconds: float = 0.0
    dropped: int = 0
    repeated: int = 0
    delayed: int = 0

    def fate(self, rng: random.Random) -> tuple[int, float]:
        """``(batches, wait)`` for one state change: 0 batches when its hints are dropped."""
        if self.drop and rng.random() < self.drop:
            self.dropped += 1
            return 0, 0.0
        batches = 1
        if self.repeat and rng.random() < self.repeat:
            self.repeated += 1
            batches = 2
        wait = 0.0
        if self.delay and self.delay_seconds and rng.random() < self.delay:
            self.delayed += 1
            wait = rng.uniform(0.0, self.delay_seconds)
        return batches, wait

    def to_json(self) -> dict[str, Any]:
        return {
            "drop": self.drop,
            "repeat": self.repeat,
            "delay": self.delay,
            "delaySeconds": self.delay_seconds,
            "dropped": self.dropped,
            "repeated": self.repeated,
            "delayed": self.delayed,
        }


def _probability(name: str, value: float | None) -> float | None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability from 0 to 1")
    return value


def hint_entry(event: StateChanged, insert_id: str) -> dict[str, Any]:
    """The Cloud Logging LogEntry a log sink would deliver for this ``ml_job`` state change."""
    text = HINT_TEXT.get(event.state, f"Job state is {event.state}.")
    if event.state == FAILED and event.error_message:
        text = f"{text} {event.error_message}"
    stamp = datetime.fromtimestamp(event.sim_time, UTC)
    return {
        "insertId": insert_id,
        "logName": f"projects/{event.project}/logs/ml.googleapis.com%2F{event.job_id}",
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": event.job_id, "project_id": event.project, "task_name": "service"},
        },
        "severity": "ERROR" if event.state == FAILED else "INFO",
        "textPayload": text,
        "timestamp": rfc3339(stamp.timestamp()),
        "receiveTimestamp": rfc3339((stamp + timedelta(milliseconds=250)).timestamp()),
        "labels": {"ml.googleapis.com/endpoint": ""},
    }


class SideEffects:
    """Queue + worker thread that publishes hints and writes checkpoint objects.

    Args:
        engine: the engine to listen to (registered here) and to report written objects to.
        project: project of the hint topic and of the storage client.
        events_topic: topic id or full ``projects/P/topics/T`` path; None disables hints.
        hint_copies: how many messages (distinct insertIds) per state change.
        pubsub_host: Pub/Sub emulator ``host:port``; None means a default PublisherClient,
            which honours PUBSUB_EMULATOR_HOST.
        storage: whether to write checkpoints at all.
        storage_host: storage emulator URL (``http://host:port``); None means the
            STORAGE_EMULATOR_HOST environment variable, as the storage client reads it.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        project: str,
        events_topic: str | None = None,
        hint_copies: int = 3,
        pubsub_host: str | None = None,
        storage: bool = False,
        storage_host: str | None = None,
    ) -> None:
        self._engine = engine
        self._project = project
        self._lock = threading.Lock()
        self._topic = self._topic_path(events_topic) if events_topic else None
        self._hints_enabled = events_topic is not None
        self._copies = hint_copies
        self._pubsub_host = pubsub_host
        self._storage_enabled = storage
        self._storage_host = storage_host
        self._publisher: Any = None
        self._storage_client: Any = None
        self._hint_stats = _Stats()
        self._storage_stats = _Stats()
        self._in_flight: set[Any] = set()
        self._chaos = HintChaos()
        self._chaos_rng = random.Random()
        self._delayed: set[threading.Event] = set()  # hints held back, not yet published
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="sim-side-effects", daemon=True)
        self._thread.start()
        engine.add_listener(self._on_event)

    def _topic_path(self, topic: str) -> str:
        return (
            topic if topic.startswith("projects/") else f"projects/{self._project}/topics/{topic}"
        )

    # --- configuration -------------------------------------------------------------------------

    def configure_hints(
        self,
        enabled: bool,
        copies: int | None = None,
        topic: str | None = None,
        *,
        drop: float | None = None,
        repeat: float | None = None,
        delay: float | None = None,
        delay_seconds: float | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Turn hints on/off, change the copies per change or the topic, and what befalls
        them (:class:`HintChaos`; each argument left None keeps its setting, ``seed``
        restarts the generator).

        Raises:
            ValueError: enabling without any topic, copies < 1, a probability outside [0, 1]
                or a negative delay.
        """
        _probability("drop", drop)
        _probability("repeat", repeat)
        _probability("delay", delay)
        if delay_seconds is not None and delay_seconds < 0:
            raise ValueError("delaySeconds must not be negative")
        with self._lock:
            if copies is not None:
                if copies < 1:
                    raise ValueError("copies must be at least 1")
                self._copies = copies
            chaos = self._chaos
            chaos.drop = chaos.drop if drop is None else float(drop)
            chaos.repeat = chaos.repeat if repeat is None else float(repeat)
            chaos.delay = chaos.delay if delay is None else float(delay)
            if delay_seconds is not None:
                chaos.delay_seconds = float(delay_seconds)
            if seed is not None:
                self._chaos_rng = random.Random(seed)
            if topic:
                self._topic = self._topic_path(topic)
            if enabled and self._topic is None:
                raise ValueError("no events topic: pass 'topic' or start with --events-topic")
            self._hints_enabled = enabled
        return self.status()

    def reset_chaos(self) -> None:
        """Hints as Vertex sends them again, counters at 0 (the simulator's reset)."""
        with self._lock:
            self._chaos = HintChaos()

    def status(self) -> dict[str, Any]:
        """Hint and storage settings plus counters (done/failed/lastError), and queue depth."""
        with self._lock:
            return {
                "hints": {
                    "enabled": self._hints_enabled,
                    "topic": self._topic,
                    "copies": self._copies,
                    **self._hint_stats.to_json(),
                    "chaos": self._chaos.to_json(),
                    "held": len(self._delayed),
                },
                "storage": {"enabled": self._storage_enabled, **self._storage_stats.to_json()},
                "queued": self._queue.unfinished_tasks,
            }

    # --- event intake (under the engine lock: enqueue only) ------------------------------------

    def _on_event(self, event: StateChanged | CheckpointWrite) -> None:
        if isinstance(event, StateChanged):
            with self._lock:
                if (
                    not (self._hints_enabled and self._topic)
                    or event.resource == "TrainingPipeline"
                ):
                    return
                topic, copies = self._topic, self._copies
            self._queue.put(lambda: self._publish(event, topic, copies))
        elif self._storage_enabled:
            self._queue.put(lambda: self._write(event))

    # --- worker --------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                if task is None:
                    return
                task()
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued side effect is done (hints published included); False if
        ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        done = threading.Event()
        self._queue.put(done.set)
        if not done.wait(timeout):
            return False
        with self._lock:
            held = list(self._delayed)
        for event in held:
            if not event.wait(max(0.0, deadline - time.monotonic())):
                return False
        with self._lock:
            pending = list(self._in_flight)
        left = max(0.0, deadline - time.monotonic())
        return not concurrent.futures.wait(pending, timeout=left).not_done

    def stop(self, timeout: float = 5.0) -> None:
        """Finish queued work (up to ``timeout``) and stop the worker."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _report(self, stats: _Stats, what: str, exc: BaseException) -> None:
        with self._lock:
            stats.failed += 1
            stats.last_error = f"{what}: {type(exc).__name__}: {exc}"
        print(f"simulator: {what} failed: {exc!r}", file=sys.stderr, flush=True)

    def _get_publisher(self) -> Any:
        if self._publisher is None:
            from google.cloud.pubsub_v1 import PublisherClient
            from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

            if self._pubsub_host:
                channel = grpc.insecure_channel(self._pubsub_host)
                self._publisher = PublisherClient(transport=PublisherGrpcTransport(channel=channel))
            else:
                self._publisher = PublisherClient()
        return self._publisher

    def _publish(self, event: StateChanged, topic: str, copies: int) -> None:
        with self._lock:
            batches, wait = self._chaos.fate(self._chaos_rng)
        if not batches:
            return
        if wait <= 0:
            self._send(event, topic, copies * batches)
            return
        # Held back on a timer of its own, so the hints of later changes overtake it.
        sent = threading.Event()

        def later() -> None:
            try:
                self._send(event, topic, copies * batches)
            finally:
                with self._lock:
                    self._delayed.discard(sent)
                sent.set()

        timer = threading.Timer(wait, later)
        timer.daemon = True
        with self._lock:
            self._delayed.add(sent)
        timer.start()

    def _send(self, event: StateChanged, topic: str, copies: int) -> None:
        # Issued without waiting, as a log sink publishes: each copy's answer would otherwise
        # hold every later event's hints behind it, and a burst of state changes would reach
        # the functions one round trip per copy apart. Cause still comes before effect: a
        # checkpoint write queued before this event has finished when it is published.
        for _ in range(copies):
            entry = hint_entry(event, uuid.uuid4().hex[:16])
            try:
                future = self._get_publisher().publish(
                    topic,
                    json.dumps(entry).encode(),
                    **{"logging.googleapis.com/timestamp": entry["timestamp"]},
                )
            except _EFFECT_ERRORS as exc:
                self._report(self._hint_stats, f"publishing hint for {event.name}", exc)
                return
            with self._lock:
                self._in_flight.add(future)
            future.add_done_callback(lambda f, name=event.name: self._published(f, name))

    def _published(self, future: Any, name: str) -> None:
        exc = future.exception()
        with self._lock:
            self._in_flight.discard(future)
            if exc is None:
                self._hint_stats.done += 1
        if exc is not None:
            self._report(self._hint_stats, f"publishing hint for {name}", exc)

    def _get_storage(self) -> Any:
        if self._storage_client is None:
            from google.cloud import storage

            options = {"api_endpoint": self._storage_host} if self._storage_host else None
            # google-auth leaves Credentials.__init__ unannotated, so mypy calls this untyped.
            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
            self._storage_client = storage.Client(
                project=self._project, credentials=credentials, client_options=options
            )
        return self._storage_client

    def _write(self, event: CheckpointWrite) -> None:
        bucket = self._get_storage().bucket(event.bucket)
        objects = [(f"{event.prefix}/state.bin", _state_bytes(event))]
        if event.commit:
            # The completion marker goes last: a reader that sees it may trust state.bin.
            objects.append((f"{event.prefix}/commit_success.txt", f"step={event.step}\n".encode()))
        for path, data in objects:
            blob = bucket.blob(path)
            # The simulated clock runs faster than the storage emulator's; Custom-Time carries
            # the simulated instant, so work-lost estimates compare times on one clock.
            blob.custom_time = datetime.fromtimestamp(event.sim_time, UTC)
            try:
                blob.upload_from_string(data)
            except _EFFECT_ERRORS as exc:
                self._report(self._storage_stats, f"writing gs://{event.bucket}/{path}", exc)
                return
            with self._lock:
                self._storage_stats.done += 1
            self._engine.mark_checkpoint_written(event.job_name, f"gs://{event.bucket}/{path}")


def _state_bytes(event: CheckpointWrite) -> bytes:
    header = json.dumps({"job": event.job_name, "step": event.step}).encode()
    return header + b"\n" + bytes(1024)
