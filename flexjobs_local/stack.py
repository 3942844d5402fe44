"""The embedded stack: real Pub/Sub and Firestore emulators, a storage emulator (whose object
finalizes reach handle_upload as Eventarc delivers them), the Vertex AI simulator and one
functions-framework server per entry point (the status page among them, over plain HTTP),
wired like production.

Examples:
    >>> with LocalStack(StackConfig()) as stack:      # doctest: +SKIP
    ...     stack.publish_request({"requestId": "r1", "customJob": {...}})
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from flexjobs_local import procs
from flexjobs_local.simclock import CLOCK_URL_ENV, SimulatedClock
from flexjobs_local.simulator.client import SimulatorControl
from shared.kernel.config import Settings

REPO = Path(__file__).resolve().parent.parent
FUNCTIONS_SOURCE = REPO / "functions" / "main.py"
# The same entry points on the simulator's clock (StackConfig.sim_clock).
SIM_CLOCK_FUNCTIONS_SOURCE = REPO / "flexjobs_local" / "functions_sim" / "main.py"
# What the functions' settings bound in wall time, not in the time they measure: how long a
# claim may be held (across a Vertex call), and how long a hint about a job no record knows
# yet is redelivered (the intake that will record it is still running). On the simulator's
# clock they are scaled by the time factor, unless function_env sets them.
WALL_BOUND_SETTINGS = {
    "FLEXJOBS_CLAIM_TTL_SECONDS": Settings(project="").claim_ttl_seconds,
    "FLEXJOBS_HINT_RECENT_SECONDS": Settings(project="").hint_recent_seconds,
}

# Entry point → the topic whose push subscription delivers to it. None: no subscription,
# because Eventarc posts the storage events to the function directly (the storage bridge here),
# or because people call it (the status page).
FUNCTIONS: dict[str, str | None] = {
    "handle_job_request": "requests",
    "handle_job_event": "events",
    "handle_scheduler_tick": "ticks",
    "handle_upload": None,
    "status_page": None,
}
UPLOAD_FUNCTION = "handle_upload"
STATUS_PAGE = "status_page"
# Served with functions-framework's ``http`` signature; every other entry point takes CloudEvents.
HTTP_FUNCTIONS = frozenset({STATUS_PAGE})
TICKS_TOPIC = "scheduler-ticks"
# Each function server's thread count, and so how many messages of a subscription the push
# bridge has in flight: a gen2 function's concurrency, in production.
FUNCTION_THREADS = 64
# How many times start() tries when a chosen port is taken before its service binds it.
START_ATTEMPTS = 3
NOTIFICATIONS_TAP = "job-notifications-tap"


@dataclass
class StackConfig:
    """How to run the stack; every field has a working default."""

    project: str = "flexjobs-local"
    location: str = "us-central1"
    time_factor: float = 60.0
    default_capacity: int = 16
    default_run_seconds: float = 300.0
    # Simulated seconds a new job stays QUEUED before it is PENDING, and starts at once when
    # its GPUs are free: how long Vertex takes to place a job that fits.
    queue_seconds: float = 5.0
    requests_topic: str = "job-requests"
    events_topic: str = "job-events"
    notifications_topic: str = "job-notifications"
    ack_deadline_seconds: int = 60
    # Deliveries of one message before the push bridge gives it up, as a subscription's
    # dead-letter policy does (infra/: max_delivery_attempts); 0: redelivered until
    # acknowledged. Given-up messages are in dead_letters().
    max_delivery_attempts: int = 0
    # Extra environment for the function servers (settings such as FLEXJOBS_CLAIM_TTL_SECONDS).
    function_env: dict[str, str] = field(default_factory=dict)
    functions: tuple[str, ...] = tuple(FUNCTIONS)
    # Seconds between scheduler ticks (the local Cloud Scheduler); None starts no scheduler.
    tick_seconds: float | None = None
    # The simulator publishes ml_job log-entry hints to the events topic, like a log sink.
    hints: bool = True
    # The simulator's training writes step checkpoints to the storage emulator.
    checkpoints: bool = True
    seed: int = 7
    # Created in the storage emulator at start: the request bucket (FLEXJOBS_REQUEST_BUCKET),
    # whose request files under upload_prefix go to handle_upload, and, apart from it as in
    # production, the bucket jobs write their outputs and checkpoints to. Every finalize of
    # either reaches handle_upload; only the first holds requests, only the second checkpoints.
    bucket: str = "flexjobs-local"
    checkpoint_bucket: str = "flexjobs-local-checkpoints"
    upload_prefix: str = "requests/"
    # One clock for the whole stack: the functions' clock (records' times, the status page's
    # "now", AUTO's deadlines, the serving grace and hold periods), the publish times the
    # push bridge delivers and the object times the storage bridge sends are the
    # simulator's, time_factor times faster than the wall clock (flexjobs_local/simclock.py;
    # the demo's). Off: the functions run on the wall clock while Vertex's times are
    # simulated, as the tests that scale the product's constants expect.
    sim_clock: bool = False


class LocalStack:
    """Start, use and stop the embedded stack. Use as a context manager."""

    def __init__(self, config: StackConfig | None = None, workdir: Path | None = None) -> None:
        self.config = config or StackConfig()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="flexjobs-local-"))
        self.children: list[procs.Child] = []
        self.ports: dict[str, int] = {}
        self.env: dict[str, str] = {}
        self._pubsub: tuple[Any, Any] | None = None

    def __enter__(self) -> LocalStack:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalStack:
        """Start every service, create topics and subscriptions, and wait until all answer.

        A port is chosen free and bound seconds later by its service; anything on the machine
        may take it in between (an outgoing connection draws from the same range). A service
        that exits for that reason is no fault of the stack's: everything started is stopped
        and the whole stack starts again on new ports, up to ``START_ATTEMPTS`` times. Any
        other early exit fails at once.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start_once()
            except procs.PortTaken as taken:
                self._stop_children()
                if attempt == START_ATTEMPTS:
                    raise
                print(f"stack: a port was taken, starting again ({taken})", file=sys.stderr)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start_once(self) -> LocalStack:
        cfg = self.config
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Empty, so a second attempt's emulator holds nothing of the first's.
        shutil.rmtree(self.workdir / "pubsub-data", ignore_errors=True)
        (self.workdir / "pubsub-data").mkdir()
        # The function ports too, before anything starts: the storage bridge, started first,
        # needs handle_upload's URL. It retries, so what is written before the function
        # answers is delivered once it does.
        names = ("pubsub", "firestore", "storage", "vertex", "vertex_control", *cfg.functions)
        self.ports = dict(zip(names, procs.free_ports(len(names)), strict=True))
        self.env = {
            "GOOGLE_CLOUD_PROJECT": cfg.project,
            "FLEXJOBS_LOCATION": cfg.location,
            "FLEXJOBS_VERTEX_ENDPOINT": f"127.0.0.1:{self.ports['vertex']}",
            # The simulator serves Cloud Quotas on its gRPC port: the quota it enforces.
            "FLEXJOBS_CLOUDQUOTAS_ENDPOINT": f"127.0.0.1:{self.ports['vertex']}",
            "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{self.ports['pubsub']}",
            "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{self.ports['firestore']}",
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{self.ports['storage']}",
            "FLEXJOBS_REQUESTS_TOPIC": cfg.requests_topic,
            "FLEXJOBS_EVENTS_TOPIC": cfg.events_topic,
            "FLEXJOBS_NOTIFICATIONS_TOPIC": cfg.notifications_topic,
            "FLEXJOBS_UPLOAD_PREFIX": cfg.upload_prefix,
            "FLEXJOBS_REQUEST_BUCKET": cfg.bucket,
            # `flexjobs logs` reads the jobs' entries from the simulator's Logging API.
            "FLEXJOBS_LOGGING_ENDPOINT": f"http://127.0.0.1:{self.ports['vertex_control']}",
        }
        base_env = {**os.environ, **self.env}
        # flexjobs_local is not installed (pip installs the product: flexjobs and shared), so
        # its own processes find it on the clone's root, wherever they are started from.
        root = str(Path(__file__).resolve().parents[1])
        inherited = base_env.get("PYTHONPATH")
        base_env["PYTHONPATH"] = f"{root}{os.pathsep}{inherited}" if inherited else root
        gcloud = shutil.which("gcloud")
        if gcloud is None:
            raise RuntimeError("gcloud is required: install the Google Cloud CLI and emulators")
        pubsub = self._start(
            "pubsub",
            [
                gcloud,
                "beta",
                "emulators",
                "pubsub",
                "start",
                f"--host-port=127.0.0.1:{self.ports['pubsub']}",
                f"--project={cfg.project}",
                f"--data-dir={self.workdir / 'pubsub-data'}",
            ],
            base_env,
        )
        firestore = self._start(
            "firestore",
            [
                gcloud,
                "emulators",
                "firestore",
                "start",
                f"--host-port=127.0.0.1:{self.ports['firestore']}",
            ],
            base_env,
        )
        deliver_to = (
            [f"--deliver-to={self.upload_function_url}"] if UPLOAD_FUNCTION in cfg.functions else []
        )
        storage = self._start(
            "storage",
            [
                sys.executable,
                "-m",
                "flexjobs_local.storage_bridge",
                "--host=127.0.0.1",
                f"--port={self.ports['storage']}",
                f"--bucket={cfg.bucket}",
                f"--bucket={cfg.checkpoint_bucket}",
                f"--events-log={self.storage_events_path}",
                *deliver_to,
                *([f"--sim-clock={self.simulator.base_url}"] if cfg.sim_clock else []),
            ],
            base_env,
        )
        vertex = self._start(
            "vertex",
            [
                sys.executable,
                "-m",
                "flexjobs_local.simulator",
                f"--grpc-port={self.ports['vertex']}",
                f"--control-port={self.ports['vertex_control']}",
                f"--time-factor={cfg.time_factor}",
                f"--project={cfg.project}",
                f"--default-capacity={cfg.default_capacity}",
                f"--default-run-seconds={cfg.default_run_seconds}",
                f"--queue-seconds={cfg.queue_seconds}",
                f"--seed={cfg.seed}",
                *([f"--events-topic={cfg.events_topic}"] if cfg.hints else []),
                *(["--storage"] if cfg.checkpoints else []),
            ],
            base_env,
        )
        procs.wait_until(pubsub, procs.http_ok(f"http://127.0.0.1:{self.ports['pubsub']}"), 90)
        procs.wait_until(
            firestore, procs.http_ok(f"http://127.0.0.1:{self.ports['firestore']}"), 90
        )
        procs.wait_until(storage, procs.log_contains(storage, "STORAGE READY"), 60)
        procs.wait_until(vertex, procs.log_contains(vertex, "SIMULATOR READY"), 60)
        self._start_functions(base_env)
        routes = self._create_topics()
        if routes:
            push = self._start(
                "push",
                [
                    sys.executable,
                    "-m",
                    "flexjobs_local.push_bridge",
                    f"--concurrency={FUNCTION_THREADS}",
                    f"--ack-deadline={cfg.ack_deadline_seconds}",
                    *([f"--sim-clock={self.simulator.base_url}"] if cfg.sim_clock else []),
                    *(
                        [
                            f"--max-delivery-attempts={cfg.max_delivery_attempts}",
                            f"--dead-letters={self.dead_letters_path}",
                        ]
                        if cfg.max_delivery_attempts
                        else []
                    ),
                    *routes,
                ],
                base_env,
            )
            procs.wait_until(push, procs.log_contains(push, "PUSH READY"), 60)
        if cfg.tick_seconds:
            scheduler = self._start(
                "scheduler",
                [
                    sys.executable,
                    "-m",
                    "flexjobs_local.scheduler",
                    f"--every={cfg.tick_seconds}",
                    f"--topic={TICKS_TOPIC}",
                ],
                base_env,
            )
            procs.wait_until(scheduler, procs.log_contains(scheduler, "SCHEDULER READY"), 30)
        return self

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> procs.Child:
        child = procs.start(name, argv, env, self.workdir)
        self.children.append(child)
        return child

    def _start_functions(self, base_env: dict[str, str]) -> None:
        # THREADS is functions-framework's gunicorn thread count: like a gen2 function's
        # concurrency setting, it lets a job's hint reader wait out its window without
        # holding up other deliveries.
        cfg = self.config
        scaled: dict[str, str] = {}
        if cfg.sim_clock:
            factor = max(cfg.time_factor, 1.0)
            scaled = {k: f"{v * factor:g}" for k, v in WALL_BOUND_SETTINGS.items()}
            scaled[CLOCK_URL_ENV] = self.simulator.base_url
        env = {
            "THREADS": str(FUNCTION_THREADS),
            **base_env,
            **scaled,
            **cfg.function_env,
            "PYTHONUNBUFFERED": "1",
        }
        source = SIM_CLOCK_FUNCTIONS_SOURCE if cfg.sim_clock else FUNCTIONS_SOURCE
        started = []
        for target in cfg.functions:
            port = self.ports[target]
            ff = Path(sys.executable).with_name("functions-framework")
            started.append(
                self._start(
                    target,
                    [
                        str(ff),
                        f"--source={source}",
                        f"--target={target}",
                        "--signature-type="
                        + ("http" if target in HTTP_FUNCTIONS else "cloudevent"),
                        "--host=127.0.0.1",
                        f"--port={port}",
                    ],
                    env,
                )
            )
        for child in started:
            url = f"http://127.0.0.1:{self.ports[child.name]}/"
            procs.wait_until(child, procs.http_ok(url), 60)

    def _child(self, name: str) -> procs.Child:
        for child in self.children:
            if child.name == name:
                return child
        raise KeyError(f"{name} is not among this stack's services")

    def kill_function(self, target: str) -> None:
        """SIGKILL one function server's process group, as an instance crash would end it,
        mid-delivery included: what it was handling is never answered, so the push bridge
        (or the storage bridge) delivers it again. It stays down until
        :meth:`restart_function`."""
        if target not in self.config.functions:
            raise KeyError(f"{target} is not among this stack's functions")
        procs.crash(self._child(target))

    def restart_function(self, target: str, timeout: float = 60.0) -> None:
        """Start one function server again (killing it first if it still runs) with the same
        argv, environment and port, its log appended to, and wait until it answers."""
        old = self._child(target)
        if old.alive():
            self.kill_function(target)
        new = procs.restart(old, self.workdir)
        self.children[self.children.index(old)] = new
        procs.wait_until(new, procs.http_ok(f"http://127.0.0.1:{self.ports[target]}/"), timeout)

    def pubsub_clients(self) -> tuple[Any, Any]:
        """A publisher and a subscriber client bound to this stack's emulator.

        Built on explicit plaintext channels, so they work whatever this process's environment
        says (the emulator variables are set for the functions, not necessarily here).
        """
        import grpc
        from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
        from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
        from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

        host = self.env["PUBSUB_EMULATOR_HOST"]
        if self._pubsub is None:
            self._pubsub = (
                PublisherClient(
                    transport=PublisherGrpcTransport(channel=grpc.insecure_channel(host))
                ),
                SubscriberClient(
                    transport=SubscriberGrpcTransport(channel=grpc.insecure_channel(host))
                ),
            )
        return self._pubsub

    def _create_topics(self) -> list[str]:
        """Create the topics and subscriptions; returns the push bridge's ``--route`` flags."""
        cfg = self.config
        publisher, subscriber = self.pubsub_clients()
        topics = {
            "requests": cfg.requests_topic,
            "events": cfg.events_topic,
            "notifications": cfg.notifications_topic,
            "ticks": TICKS_TOPIC,
        }
        for topic in topics.values():
            publisher.create_topic(name=publisher.topic_path(cfg.project, topic))
        routes: list[str] = []
        for target in cfg.functions:
            key = FUNCTIONS[target]
            if key is None:
                continue
            topic = topics[key]
            endpoint = (
                f"http://127.0.0.1:{self.ports[target]}/projects/{cfg.project}/topics/{topic}"
            )
            # A pull subscription, delivered as push by the push bridge (see its docstring:
            # the emulator's own push holds about two messages in flight).
            subscription = subscriber.subscription_path(cfg.project, f"{topic}-{target}")
            subscriber.create_subscription(
                request={
                    "name": subscription,
                    "topic": publisher.topic_path(cfg.project, topic),
                    "ack_deadline_seconds": cfg.ack_deadline_seconds,
                }
            )
            routes.append(f"--route={subscription}={endpoint}")
        subscriber.create_subscription(
            name=subscriber.subscription_path(cfg.project, NOTIFICATIONS_TAP),
            topic=publisher.topic_path(cfg.project, cfg.notifications_topic),
        )
        return routes

    def stop(self) -> None:
        """Stop everything this stack started, newest first, and remove its work folder."""
        self._stop_children()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_children(self) -> None:
        procs.kill_groups(
            [child.pgid for child in self.children], children=[c.proc for c in self.children]
        )
        for child in self.children:
            child.proc.wait()
        self.children.clear()
        self._pubsub = None

    # -- use -------------------------------------------------------------------------------

    def apply_env(self) -> None:
        """Point this process's Google clients at the stack."""
        os.environ.update(self.env)

    @property
    def simulator(self) -> SimulatorControl:
        return SimulatorControl(f"http://127.0.0.1:{self.ports['vertex_control']}")

    def clock(self) -> SimulatedClock:
        """The simulator's clock: with ``sim_clock``, the functions' too."""
        return SimulatedClock(self.simulator.base_url)

    def publish(self, topic: str, body: dict[str, Any] | bytes, **attributes: str) -> str:
        """Publish one message through the Pub/Sub emulator; returns its message id."""
        client, _ = self.pubsub_clients()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        future = client.publish(client.topic_path(self.config.project, topic), data, **attributes)
        return str(future.result(timeout=30))

    def publish_request(self, body: dict[str, Any] | bytes, **attributes: str) -> str:
        return self.publish(self.config.requests_topic, body, **attributes)

    def reset_firestore(self) -> None:
        """Delete every document in the Firestore emulator (test isolation)."""
        url = (
            f"http://127.0.0.1:{self.ports['firestore']}/emulator/v1/projects/"
            f"{self.config.project}/databases/(default)/documents"
        )
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=30).close()

    def function_logs(self, target: str) -> str:
        """Everything a function server printed so far (its structured log lines)."""
        return (self.workdir / f"{target}.log").read_text(errors="replace")

    # -- uploads (the Eventarc storage trigger) --------------------------------------------

    @property
    def upload_uri(self) -> str:
        """Where clients drop request files: ``gs://{bucket}/{upload_prefix}``."""
        return f"gs://{self.config.bucket}/{self.config.upload_prefix}"

    @property
    def upload_function_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[UPLOAD_FUNCTION]}/"

    @property
    def status_page_url(self) -> str:
        """The status page (``/``); ``/jobs/<requestId>`` shows one job."""
        return f"http://127.0.0.1:{self.ports[STATUS_PAGE]}/"

    @property
    def storage_events_path(self) -> Path:
        return self.workdir / "storage-events.jsonl"

    @property
    def checkpoint_uri(self) -> str:
        """Where jobs write outputs and checkpoints: ``gs://{checkpoint_bucket}/``."""
        return f"gs://{self.config.checkpoint_bucket}/"

    def upload(
        self,
        name: str,
        data: bytes | str,
        content_type: str | None = None,
        bucket: str | None = None,
    ) -> str:
        """Write object ``name`` into the request bucket (or ``bucket``), as a client would;
        returns its generation. The storage bridge then delivers the finalize to
        handle_upload."""
        import google.cloud.storage
        from google.auth.credentials import AnonymousCredentials

        client = google.cloud.storage.Client(
            project=self.config.project,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.env["STORAGE_EMULATOR_HOST"]},
        )
        blob = client.bucket(bucket or self.config.bucket).blob(name)
        blob.upload_from_string(data, content_type=content_type)
        return str(blob.generation)

    @property
    def dead_letters_path(self) -> Path:
        return self.workdir / "dead-letters.jsonl"

    def dead_letters(self) -> list[dict[str, Any]]:
        """The messages the push bridge gave up (``max_delivery_attempts``), oldest first,
        each ``{subscription, messageId, data (base64), attributes, publishTime, attempts,
        problem}``."""
        try:
            text = self.dead_letters_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]

    def storage_events(self) -> list[dict[str, Any]]:
        """The finalize events delivered so far (all of them when no function receives them),
        oldest first, each ``{"headers": {...}, "body": {...}}``."""
        try:
            text = self.storage_events_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        # The last piece is "" or a line the bridge is still writing: only whole lines count.
        return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]

    def redeliver(self, event: dict[str, Any]) -> int:
        """POST one event from :meth:`storage_events` to handle_upload again, byte for byte
        (a duplicate, as at-least-once delivery may send); returns the HTTP status."""
        from flexjobs_local.storage_bridge import encode_body

        if UPLOAD_FUNCTION not in self.config.functions:
            raise RuntimeError(f"{UPLOAD_FUNCTION} is not among this stack's functions")
        request = urllib.request.Request(
            self.upload_function_url,
            data=encode_body(event["body"]),
            headers=event["headers"],
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
