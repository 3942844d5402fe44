"""Vertex AI simulator: a gRPC server speaking ``google.cloud.aiplatform.v1`` plus a control API.

Start one in-process with :func:`serve`, or as a process with
``python -m flexjobs_local.simulator --grpc-port N --control-port M``.

Examples:
    >>> import grpc
    >>> from google.cloud import aiplatform_v1
    >>> from google.cloud.aiplatform_v1.services.job_service.transports import (
    ...     JobServiceGrpcTransport)
    >>> sim = serve(time_factor=600)
    >>> client = aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(
    ...     channel=grpc.insecure_channel(sim.grpc_endpoint)))
    >>> SimulatorControl(sim.control_url).set_capacity("us-central1", "NVIDIA_TESLA_A100", 8)
    {...}
    >>> sim.stop()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import grpc

from flexjobs_local.simulator.client import SimulatorControl, SimulatorControlError
from flexjobs_local.simulator.control import ControlApp, ControlServer
from flexjobs_local.simulator.effects import SideEffects
from flexjobs_local.simulator.engine import Engine
from flexjobs_local.simulator.grpc_server import build_server
from flexjobs_local.simulator.logs import JobLogs

TICK_SECONDS = 0.05
"""Wall time between background advances of the simulation."""


@dataclass
class SimulatorHandle:
    """A running simulator. ``stop()`` (or leaving the ``with`` block) shuts it down."""

    grpc_endpoint: str
    control_url: str
    engine: Engine
    effects: SideEffects
    _grpc_server: grpc.Server
    _control: ControlServer
    _stop: threading.Event = field(default_factory=threading.Event)
    _ticker: threading.Thread | None = None

    def stop(self, grace: float = 1.0) -> None:
        """Stop ticking, stop both servers and drain queued side effects (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5)
        self._control.stop()
        self._grpc_server.stop(grace).wait(grace + 5)
        self.effects.stop()

    def __enter__(self) -> SimulatorHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(
    grpc_port: int = 0,
    control_port: int = 0,
    *,
    host: str = "127.0.0.1",
    time_factor: float = 60.0,
    project: str = "flexjobs-local",
    default_capacity: int = 16,
    default_run_seconds: float = 300.0,
    seed: int | None = None,
    events_topic: str | None = None,
    hint_copies: int = 3,
    pubsub_host: str | None = None,
    storage: bool = False,
    storage_host: str | None = None,
    queue_seconds: float = 5.0,
    cancel_seconds: float = 2.0,
    lro_seconds: float = 5.0,
    checkpoint_every: int | None = None,
    max_workers: int = 8,
) -> SimulatorHandle:
    """Start the simulator in this process (port 0 picks a free port) and return its handle.

    Args:
        time_factor: simulated seconds per wall second (0 freezes the clock).
        project: project for the hint topic and the storage client (jobs use their parent's).
        default_capacity: GPUs per (location, accelerator type) unless set explicitly.
        default_run_seconds: simulated run time of a job that does not say otherwise.
        seed: makes ids, preemptions and half-written checkpoints reproducible.
        events_topic: Pub/Sub topic id (or full path) for state hints; None: hints off.
        hint_copies: messages per state change.
        pubsub_host: Pub/Sub emulator host:port; None: PUBSUB_EMULATOR_HOST decides.
        storage: write simulated checkpoints to Cloud Storage.
        storage_host: storage emulator URL; None: STORAGE_EMULATOR_HOST decides.
        queue_seconds / cancel_seconds / lro_seconds: simulated delays of QUEUED→PENDING,
            CANCELLING→CANCELLED and long-running operations.
        checkpoint_every: simulated seconds between checkpoints (default run time / 10).
    """
    engine = Engine(
        time_factor=time_factor,
        default_capacity=default_capacity,
        default_run_seconds=default_run_seconds,
        queue_seconds=queue_seconds,
        cancel_seconds=cancel_seconds,
        lro_seconds=lro_seconds,
        checkpoint_every=checkpoint_every,
        checkpointing=storage,
        seed=seed,
    )
    effects = SideEffects(
        engine,
        project=project,
        events_topic=events_topic,
        hint_copies=hint_copies,
        pubsub_host=pubsub_host,
        storage=storage,
        storage_host=storage_host,
    )
    server, port = build_server(engine, grpc_port, host, max_workers)
    # Listening from before the first job, so every job's entries are kept.
    logs = JobLogs(engine, project)
    control = ControlServer(ControlApp(engine, effects, logs), control_port, host)
    server.start()
    control.start()
    handle = SimulatorHandle(
        grpc_endpoint=f"{host}:{port}",
        control_url=f"http://{host}:{control.port}",
        engine=engine,
        effects=effects,
        _grpc_server=server,
        _control=control,
    )
    handle._ticker = threading.Thread(
        target=_tick_forever, args=(engine, handle._stop), name="sim-ticker", daemon=True
    )
    handle._ticker.start()
    return handle


def _tick_forever(engine: Engine, stop: threading.Event) -> None:
    while not stop.wait(TICK_SECONDS):
        engine.tick()


__all__ = ["SimulatorControl", "SimulatorControlError", "SimulatorHandle", "serve"]
