"""The world a simulation runs in: the fakes of every port behind scheduling points, the
functions wired over them by the production bootstrap, Pub/Sub's topics, the clock, and the
choices the scheduler may take at each step.

A run is a sequence of choices among :meth:`World.options`, each one of:

- ``step``: a delivery in flight makes its pending port call (``ok``), or it fails with a
  fault that call can have (``fault``), or the process dies there (``crash``: the message is
  redelivered later; ``crash-lost``: it never is);
- ``deliver``: Pub/Sub delivers a ready message to its function (the real entry point in
  ``functions/main.py``, with a CloudEvent as Eventarc and Pub/Sub push send it); a message
  already delivered may be delivered once more (``duplicate``), at-least-once;
- ``event``: the scenario's inputs (a request published, a cancel, a resume, an upload) and
  the world's own changes (Spot capacity lost or back, a region that stops answering, an
  operation that ends late or with an error, a hand edit of an endpoint);
- ``clock``: the clock moves on, across one of the boundaries the code waits on (the claim
  TTL, the grace and hold periods, the backoff, the quota read interval, the 2-hour operation
  limit); Cloud Scheduler publishes a tick at every minute it crosses, and Vertex moves on
  (:meth:`~tests.simulation.vertex.Vertex.advance`).

Nothing here reads the wall clock or a thread: the same choices make the same run.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import json
import random
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import bootstrap
from shared.adapters.packaged_prices import load_packaged_prices
from shared.app.context import Intake, Tracker, Uploads
from shared.bootstrap import Ports
from shared.kernel.config import Settings
from tests.fakes import (
    InMemoryCheckpointStore,
    InMemoryDeploymentStore,
    InMemoryJobDatabase,
    InMemoryNotifier,
    InMemoryQuotaLimits,
    InMemoryRejectionLog,
    InMemoryStoredObjects,
    in_memory_job_stores,
)
from tests.simulation.ports import Clock, Port, Sleep
from tests.simulation.scheduler import CRASH_LOST, CRASHES, OK, Crash, Delivery, Scheduler
from tests.simulation.vertex import Vertex

#: Where every run starts (a Monday morning).
START = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
#: Pub/Sub's delivery attempts before a message is dead-lettered (infra's
#: ``max_delivery_attempts``), and its retry backoff between two deliveries of one message.
MAX_DELIVERIES = 10
MIN_BACKOFF = 10.0
MAX_BACKOFF = 600.0
#: The prices the simulation runs on (flexjobs' own table; the rule weighs them).
PRICES = load_packaged_prices


@dataclass
class Message:
    """A message on one of the topics (or a storage event): delivered until acknowledged."""

    key: int
    topic: str
    name: str
    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    published: datetime = START
    not_before: datetime = START
    deliveries: int = 0
    acked: bool = False
    dead: bool = False
    duplicates_left: int = 1
    #: A storage event's object resource (uploads), instead of a Pub/Sub body.
    resource: dict[str, Any] | None = None
    #: Deliveries of it in flight now.
    in_flight: int = 0


@dataclass
class Option:
    """One choice the scheduler may take now: its ``group`` (step, fault, crash, deliver,
    event, clock), its label in a trace, and what taking it does."""

    group: str
    label: str
    take: Callable[[], None]
    #: The delivery it steps (None for the others): preemption bounding reads it.
    delivery: int | None = None
    weight: float = 1.0


@dataclass
class Event:
    """A change the scenario or the world can make, once (``once``) or whenever it is
    ``ready``; ``label`` names it in a trace."""

    label: str
    apply: Callable[[World], None]
    ready: Callable[[World], bool] = lambda world: True
    once: bool = True
    done: bool = False
    #: How often a random run picks it among the events open (1: as often as any input).
    weight: float = 1.0


@dataclass
class Violation:
    """An invariant that did not hold: its name (docs/simulation.md) and what was seen."""

    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


class InvariantViolated(AssertionError):
    def __init__(self, violation: Violation) -> None:
        super().__init__(str(violation))
        self.violation = violation


#: The environment every simulated function runs with (as infra/ sets it), which a scenario
#: extends.
BASE_ENV = {
    "GOOGLE_CLOUD_PROJECT": "p",
    "FLEXJOBS_LOCATION": "us-central1",
    "FLEXJOBS_REQUEST_BUCKET": "flexjobs-uploads",
    "FLEXJOBS_CLAIM_TTL_SECONDS": "600",
    "FLEXJOBS_BACKOFF_BASE_SECONDS": "60",
    "FLEXJOBS_BACKOFF_CAP_SECONDS": "1800",
    "FLEXJOBS_SERVING_GRACE_SECONDS": "300",
    "FLEXJOBS_SERVING_HOLD_SECONDS": "1800",
}


class _Tokens:
    """``uuid.uuid4`` for claim tokens, drawn from the run's seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)


@contextlib.contextmanager
def seeded_tokens(rng: random.Random) -> Iterator[None]:
    """Claim tokens from ``rng`` while the run lasts (a token is compared, never read, so
    only the replay needs them the same)."""
    from shared.app.repository import claims

    kept = claims.uuid
    claims.uuid = _Tokens(rng)  # type: ignore[assignment]
    try:
        yield
    finally:
        claims.uuid = kept


class World:
    """One simulated world (see the module docstring)."""

    def __init__(self, env: Mapping[str, str], *, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.at = START
        self.scheduler = Scheduler()
        self.faults = True
        self.crashes = True
        self.checkpoints = InMemoryCheckpointStore()
        self.vertex = Vertex(self.now, self.checkpoints)
        # The job stores' documents (jobs, attempts, admission, watch, series), shared by
        # their five fakes as the adapters share Firestore.
        self.database = InMemoryJobDatabase()
        self.job_stores = in_memory_job_stores(self.database)
        self.deployment_store = InMemoryDeploymentStore()
        self.notifier = InMemoryNotifier()
        self.rejections = InMemoryRejectionLog()
        self.quota_limits = InMemoryQuotaLimits()
        self.quota_limits.values = self.vertex.quota  # the quota system reads the real one
        self.objects = InMemoryStoredObjects()
        self.messages: list[Message] = []
        self.events: list[Event] = []
        self.trace: list[str] = []
        self.violations: list[Violation] = []
        self.notified: list[tuple[datetime, dict[str, Any]]] = []
        #: The requests the scenario published (what the checks need of each: its strategy,
        #: deadline, regions...), the cancels published, and those acknowledged.
        self.published: dict[str, dict[str, Any]] = {}
        self.cancel_asked: set[str] = set()
        self.cancelled: dict[str, datetime] = {}
        #: Each message's fate once it has left the topic, by name: how many were acknowledged
        #: and how many dead-lettered (a retired message is no longer in ``messages``).
        self.acked_names: dict[str, int] = {}
        self.dead_names: dict[str, int] = {}
        #: When each endpoint was edited by hand (the world's own hand, never flexjobs').
        self.hand_edits: dict[str, list[datetime]] = {}
        #: When each record first named each of its jobs (see :meth:`_note_followed`).
        self.followed: dict[tuple[str, str], datetime] = {}
        #: Each deployment's phase as the checks last saw it (serving-moves-in-table).
        self.seen_phases: dict[str, str] = {}
        #: Each preemption victim's judgement, made at the step its preemption was written
        #: (nominal-never-reclaimed): its queue's usage once every victim then was gone.
        self.victims_judged: dict[str, list[str]] = {}
        #: Each deployment record's state as the checks last saw it (serving-moves-in-table).
        self.seen_states: dict[str, str] = {}
        #: For requests a client built from an SDK job: what the SDK itself would have sent,
        #: by dotted path in the REST body.
        self.expected_bodies: dict[str, dict[str, Any]] = {}
        #: Requests a client refused before publishing them, with its reasons.
        self.client_refused: dict[str, list[str]] = {}
        #: The concurrency of each scheduled series (by its requestId template).
        self.series_concurrency: dict[str, str] = {}
        #: Ticks that ran alone, unhurt, to the end (the admission liveness check reads them).
        self.lone_ticks: list[datetime] = []
        #: How many lone ticks had run when each endpoint was first seen dark (its split empty
        #: while a model serves): the dark-taken check counts the lone ticks since.
        self.dark_since: dict[str, int] = {}
        self._cursors: dict[str, int] = {}
        self._names: dict[str, int] = {}
        #: Bounds of the code a small scope lowers to reach them (module, name) -> value,
        #: set while the run lasts (:meth:`installed`): 1,000 waiting requests per queue is
        #: no scope to explore, 4 is.
        self.bounds: dict[tuple[str, str], Any] = {}
        #: The first violation the quiet ticks found (None: none yet), and the always-checks
        #: a calm stretch of time runs after each step (the runner sets them).
        self.failed: Violation | None = None
        self.check: Callable[[World], Violation | None] | None = None
        self._keys = 0
        self._last_tick = START
        self.env = {**BASE_ENV, **env}
        self.settings = Settings.from_env(self.env)
        self._wire()

    def new(self, reader: str, items: Sequence[Any]) -> Sequence[Any]:
        """The items of ``items`` that ``reader`` has not seen yet (a check that reads what
        happened reads each thing once, not the whole history every step)."""
        seen = self._cursors.get(reader, 0)
        self._cursors[reader] = len(items)
        return items[seen:]

    # -- wiring ---------------------------------------------------------------------------------

    def now(self) -> datetime:
        return self.at

    def _port(self, name: str, target: Any) -> Any:
        return Port(
            name,
            target,
            self.scheduler,
            observe=self._observe,
            gate=self.vertex.gate if name in ("vertex", "endpoints") else None,
        )

    def _wire(self) -> None:
        clock = Clock(self.scheduler, self.now)
        ports = Ports(
            # Every job store behind a port named "store": their method names are distinct,
            # so a call's label (store.transact, store.read_watch...) is the one the traces
            # and the faults (tests/simulation/ports.py) name it by.
            **{name: self._port("store", fake) for name, fake in self.job_stores.items()},
            job_backend=self._port("vertex", self.vertex.jobs),
            rejections=self._port("rejections", self.rejections),
            notifier=self._port("pubsub", self.notifier),
            deployment_store=self._port("deployments", self.deployment_store),
            deployment_backend=self._port("endpoints", self.vertex.endpoints),
            checkpoints=self._port("gcs", self.checkpoints),
            objects=self._port("objects", self.objects),
            quota_limits=self._port("quotas", self.quota_limits),
            prices=PRICES(),
            jitter=self.rng.random,
            sleep=Sleep(self.scheduler, self.now),
        )
        self.ports = ports
        self.intake: Intake = bootstrap.build_intake(self.settings, clock, ports)
        self.tracker: Tracker = bootstrap.build_tracker(self.settings, clock, ports)
        self.uploads: Uploads = bootstrap.build_uploads(self.settings, clock, ports)
        # One request of a file at a time: every port call stays on the scheduler's greenlet.
        self.uploads.workers = 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[World]:
        """The functions' instance-wide contexts are this world's while the block runs."""
        bootstrap.override(self.intake)
        bootstrap.override_tracker(self.tracker)
        bootstrap.override_uploads(self.uploads)
        kept = {}
        for (module, name), value in self.bounds.items():
            owner = importlib.import_module(module)
            kept[(module, name)] = getattr(owner, name)
            setattr(owner, name, value)
        try:
            with seeded_tokens(self.rng):
                yield self
        finally:
            for (module, name), value in kept.items():
                setattr(importlib.import_module(module), name, value)
            self.scheduler.abandon()
            bootstrap.override(None)
            bootstrap.override_tracker(None)
            bootstrap.override_uploads(None)

    def _observe(
        self, port: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        if port in ("vertex", "endpoints"):
            self.vertex.observe(port, method, args, kwargs, result)
        elif port == "pubsub" and method == "notify":
            self.notified.append((self.at, dict(args[0])))

    # -- Pub/Sub --------------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        name: str,
        data: bytes | dict[str, Any],
        attributes: Mapping[str, str] | None = None,
        *,
        resource: dict[str, Any] | None = None,
        delay: float = 0.0,
    ) -> Message:
        self._keys += 1
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        # Each message's name is unique in a run (a trace names it): the second hint about
        # one job is "hint 1001 (2)".
        count = self._names.get(name, 0) + 1
        self._names[name] = count
        name = name if count == 1 else f"{name} ({count})"
        message = Message(
            key=self._keys,
            topic=topic,
            name=name,
            data=raw,
            attributes=dict(attributes or {}),
            published=self.at,
            not_before=self.at + timedelta(seconds=delay),
            resource=resource,
        )
        self.messages.append(message)
        return message

    def ready(self) -> list[Message]:
        """Messages Pub/Sub would deliver now: not acknowledged, past their backoff, and not
        being delivered already (a duplicate is a choice of its own)."""
        return [
            m
            for m in self.messages
            if not m.acked and not m.dead and m.not_before <= self.at and not m.in_flight
        ]

    def deliver(self, message: Message, *, duplicate: bool = False) -> Delivery:
        """Deliver ``message`` to its function now: a delivery that runs to its first port
        call."""
        from functions import main

        handler = {
            "requests": main.handle_job_request,
            "events": main.handle_job_event,
            "ticks": main.handle_scheduler_tick,
            "uploads": main.handle_upload,
        }[message.topic]
        message.deliveries += 1
        message.in_flight += 1
        if duplicate:
            message.duplicates_left -= 1
        event = self._cloud_event(message)
        name = f"{message.name}#{message.deliveries}"
        delivery = self.scheduler.spawn(
            name, message.topic, lambda: handler(event), attempt=message.deliveries, message=message
        )
        self.scheduler.step(delivery)
        self._settled(delivery)
        return delivery

    def _cloud_event(self, message: Message) -> Any:
        from cloudevents.http import CloudEvent

        if message.topic == "uploads":
            from tests.events import storage_cloud_event

            assert message.resource is not None
            return storage_cloud_event(message.resource)
        published = message.published.isoformat().replace("+00:00", "Z")
        body = {
            "message": {
                "attributes": dict(message.attributes),
                "data": base64.b64encode(message.data).decode(),
                "messageId": str(message.key),
                "publishTime": published,
            },
            "subscription": f"projects/p/subscriptions/{message.topic}",
        }
        return CloudEvent(
            {
                "type": "google.cloud.pubsub.topic.v1.messagePublished",
                "source": f"//pubsub.googleapis.com/projects/p/topics/{message.topic}",
                "id": f"{message.key}-{message.deliveries}",
            },
            body,
        )

    def _settled(self, delivery: Delivery) -> None:
        """A delivery that ended: acknowledged when it returned; redelivered after Pub/Sub's
        backoff when it raised or its process died, unless its deliveries ran out (or the
        crash lost it)."""
        self._note_followed()
        if not delivery.finished:
            return
        message: Message = delivery.message
        message.in_flight -= 1
        error = delivery.error
        if error is None:
            message.acked = True
            self.acked_names[message.name] = self.acked_names.get(message.name, 0) + 1
            self._retire(message)
            cancel = self._cancel_of(message)
            if cancel is not None:
                self.cancelled.setdefault(cancel, self.at)
            if message.topic == "ticks" and not delivery.faulted and not delivery.overlapped:
                self.lone_ticks.append(self.at)
            return
        lost = isinstance(error, Crash) and delivery.lost
        if lost or message.deliveries >= MAX_DELIVERIES:
            message.dead = True
            self.dead_names[message.name] = self.dead_names.get(message.name, 0) + 1
            self._retire(message)
            return
        backoff = min(MAX_BACKOFF, MIN_BACKOFF * 2 ** (message.deliveries - 1))
        message.not_before = self.at + timedelta(seconds=backoff)

    def _retire(self, message: Message) -> None:
        """An acknowledged or dead message leaves the topic, unless it may still come once
        more (a duplicate) or is being delivered."""
        if message.in_flight == 0 and (message.duplicates_left <= 0 or message.topic == "ticks"):
            self.messages = [m for m in self.messages if m is not message]

    @staticmethod
    def _cancel_of(message: Message) -> str | None:
        if message.topic != "requests":
            return None
        try:
            body = json.loads(message.data)
        except ValueError:
            return None
        found = body.get("cancel") if isinstance(body, dict) else None
        return found if isinstance(found, str) else None

    # -- time -----------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, a minute at most at a time: Vertex moves on, its
        changes are published (hints, storage events), and Cloud Scheduler publishes a tick
        at each minute crossed."""
        end = self.at + timedelta(seconds=seconds)
        while self.at < end:
            minute = (self.at.replace(second=0, microsecond=0)) + timedelta(minutes=1)
            stop = min(end, minute)
            before, self.at = self.at, stop
            self.vertex.advance(before, stop)
            self._publish_world()
            if stop == minute and stop > self._last_tick:
                self._last_tick = stop
                self.publish("ticks", f"tick {stop:%H:%M}", {"tick": stop.isoformat()})

    def fast_forward(
        self, seconds: float, check: Callable[[World], Violation | None] | None = None
    ) -> None:
        """Time passes calmly for ``seconds``: every minute Vertex moves on, Cloud Scheduler
        ticks, and every message that comes is delivered to its end with no fault. The
        deliveries in flight when it began stall meanwhile (a process that hangs: its claim
        may expire under it), and go on after it."""
        stalled = frozenset(d.key for d in self.scheduler.in_flight())
        end = self.at + timedelta(seconds=seconds)
        while self.at < end and self.failed is None:
            self.advance(min(60.0, (end - self.at).total_seconds()))
            self.drain(check=check, stalled=stalled)

    def _publish_world(self) -> None:
        """Vertex's changes go out as hints (job events) and storage events (checkpoints)."""
        for name in self.vertex.hints:
            self.publish("events", f"hint {name.rsplit('/', 1)[-1]}", {"jobName": name})
        self.vertex.hints.clear()
        for bucket, name in self.vertex.objects:
            self._storage_event(bucket, name)
        self.vertex.objects.clear()

    def _storage_event(self, bucket: str, name: str, size: int = 32) -> Message:
        from tests.events import object_resource

        self._keys += 1
        generation = str(1_000_000 + self._keys)
        resource = object_resource(name, generation, size, bucket=bucket)
        resource["timeCreated"] = self.at.isoformat().replace("+00:00", "Z")
        resource["updated"] = resource["timeCreated"]
        return self.publish("uploads", f"object {name.rsplit('/', 2)[-2]}", b"", resource=resource)

    def upload(self, bucket: str, name: str, data: bytes) -> Message:
        """A file written to a bucket (a request file): stored, then its storage event."""
        message = self._storage_event(bucket, name, len(data))
        assert message.resource is not None
        self.objects.put(bucket, name, message.resource["generation"], data)
        return message

    # -- choices --------------------------------------------------------------------------------

    def options(self, *, faults: bool = True, crashes: bool = True) -> list[Option]:
        """Every choice open now (see the module docstring)."""
        out: list[Option] = []
        for delivery in self.scheduler.in_flight():
            if delivery.wake_at is not None and delivery.wake_at > self.at:
                continue
            call = delivery.pending
            label = f"> {delivery.name} | {call.label if call else 'start'}"
            out.append(Option("step", label, self._stepper(delivery, OK), delivery.key))
            if faults and self.faults and call is not None:
                for fault in call.faults:
                    out.append(
                        Option(
                            "fault",
                            f"{label} !{fault}",
                            self._stepper(delivery, fault),
                            delivery.key,
                        )
                    )
            if crashes and self.crashes:
                for crash in CRASHES:
                    out.append(
                        Option(
                            "crash",
                            f"{label} !{crash}",
                            self._stepper(delivery, crash),
                            delivery.key,
                        )
                    )
        for message in self.ready():
            out.append(Option("deliver", f"+ deliver {message.name}", self._deliverer(message)))
        for message in self.messages:
            if message.deliveries and message.duplicates_left > 0 and message.topic != "ticks":
                out.append(
                    Option(
                        "deliver",
                        f"+ duplicate {message.name}",
                        self._deliverer(message, duplicate=True),
                    )
                )
        for event in self.events:
            if not event.done and event.ready(self):
                out.append(
                    Option("event", f"+ {event.label}", self._happening(event), weight=event.weight)
                )
        return out

    def _stepper(self, delivery: Delivery, outcome: str) -> Callable[[], None]:
        def take() -> None:
            if outcome == CRASH_LOST:
                delivery.lost = True
            if outcome != OK:
                delivery.faulted = True
            self.scheduler.step(delivery, outcome)
            self._settled(delivery)

        return take

    def _deliverer(self, message: Message, *, duplicate: bool = False) -> Callable[[], None]:
        def take() -> None:
            self.deliver(message, duplicate=duplicate)

        return take

    def _happening(self, event: Event) -> Callable[[], None]:
        def take() -> None:
            if event.once:
                event.done = True
            event.apply(self)

        return take

    def take(self, option: Option) -> None:
        self.trace.append(option.label)
        running = self.scheduler.in_flight()
        # A delivery overlapped another when anything else happened while it was in flight.
        for delivery in running:
            if option.delivery != delivery.key:
                delivery.overlapped = True
        option.take()
        if option.group == "deliver" and running:
            for delivery in self.scheduler.in_flight():
                delivery.overlapped = True

    # -- quiet ----------------------------------------------------------------------------------

    def drain(
        self,
        limit: int = 100_000,
        check: Callable[[World], Violation | None] | None = None,
        *,
        stalled: frozenset[int] = frozenset(),
    ) -> int:
        """Run every delivery in flight and every ready message to its end, in order, with no
        fault: what a calm minute does. Returns the steps taken. ``check`` runs after each
        step; the first violation it finds is kept (:attr:`failed`) and ends the drain."""
        steps = 0
        while steps < limit:
            if check is not None and steps:
                found = check(self)
                if found is not None:
                    self.failed = found
                    return steps
            running = [
                d for d in self.scheduler.in_flight() if d.wake_at is None or d.wake_at <= self.at
            ]
            if running:
                delivery = running[0]
                self.scheduler.step(delivery, OK)
                self._settled(delivery)
                steps += 1
                continue
            ready = self.ready()
            if not ready:
                asleep = [
                    d
                    for d in self.scheduler.in_flight()
                    if d.wake_at is not None and d.key not in stalled
                ]
                if not asleep:
                    return steps
                self.advance(max((asleep[0].wake_at - self.at).total_seconds(), 0.001))
                continue
            self.deliver(ready[0])
            steps += 1
        raise RuntimeError(f"the world did not settle in {limit} steps")

    def _note_followed(self) -> None:
        """When each record first named each job (``followed``): what flexjobs knew, and
        since when, for the checks that judge what it did with it."""
        for request_id, record in self.database.jobs.items():
            job = record.get("vertexJob")
            if isinstance(job, str) and (request_id, job) not in self.followed:
                self.followed[(request_id, job)] = self.at

    def at_rest(self) -> bool:
        """Nothing can move any more: every job and deployment record has ended, no Vertex
        job runs, no operation is pending, no delivery is in flight and no message waits.
        Every later tick then finds nothing to do (the quiet can stop early)."""
        from shared.domain.model.states import JobState

        ended = {"UNDEPLOYED", "FAILED"}
        return (
            not self.scheduler.in_flight()
            and not self.vertex.operations
            and all(not m for m in (self.vertex.hints, self.vertex.objects))
            and all(m.acked or m.dead for m in self.messages)
            and all(
                r.get("state") in JobState.__members__ and JobState(r["state"]).terminal
                for r in self.database.jobs.values()
            )
            and all(r.get("state") in ended for r in self.deployment_store.records.values())
            and all(self.vertex._ended(name) for name in self.vertex.runs)
        )

    def hashed(self, extra: object = None) -> str:
        """A digest of the whole world's state between deliveries (none in flight): the
        stores, Vertex, the messages waiting, the clock, and ``extra`` (what is left to do)."""
        state = {
            "at": self.at.isoformat(),
            "jobs": self.database.jobs,
            "attempts": {f"{k[0]}/{k[1]}": v for k, v in self.database.attempts.items()},
            "ledger": self.database.ledger,
            "series": self.database.series,
            "deployments": self.deployment_store.records,
            "vertex": {n: (j.state, j.labels) for n, j in self.vertex.jobs.jobs.items()},
            "endpoints": self.vertex.endpoints.endpoints,
            "splits": self.vertex.endpoints.splits,
            "operations": sorted(self.vertex.operations),
            "capacity": (
                sorted(self.vertex.spot_out),
                sorted(self.vertex.down),
                sorted(self.vertex.flex_out),
            ),
            "messages": [
                (m.topic, m.name, m.acked, m.dead, m.not_before.isoformat(), m.duplicates_left)
                for m in self.messages
                if not m.acked and not m.dead
            ],
            "events": [e.label for e in self.events if not e.done],
            # How long each dark endpoint has been dark, in lone ticks (dark-taken reads it).
            "dark": {k: len(self.lone_ticks) - v for k, v in self.dark_since.items()},
            "extra": extra,
        }
        text = json.dumps(state, sort_keys=True, default=str)
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def violated(world: World, checks: Sequence[Callable[[World], list[Violation]]]) -> list[Violation]:
    found: list[Violation] = []
    for check in checks:
        found.extend(check(world))
    return found
