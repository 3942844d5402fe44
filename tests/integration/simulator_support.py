"""What the simulator's own tests share: its names, and the fixtures they all use.

Each test module starts its own simulator in a module-scoped ``sim`` fixture (with the options
it needs); ``control`` and ``jobs`` here use whichever ``sim`` the module defines.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

from flexjobs_local.simulator import SimulatorControl, SimulatorHandle

PROJECT = "sim-test"
LOCATION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
A100 = "NVIDIA_TESLA_A100"


@pytest.fixture
def control(sim: SimulatorHandle) -> SimulatorControl:
    """The module's simulator, reset for this test."""
    ctl = SimulatorControl(sim.control_url)
    ctl.reset()
    return ctl


@pytest.fixture(scope="module")
def jobs(sim: SimulatorHandle) -> Iterator[aiplatform_v1.JobServiceClient]:
    """An unmodified JobServiceClient on the module's simulator, over plaintext gRPC."""
    channel = grpc.insecure_channel(sim.grpc_endpoint)
    yield aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
    channel.close()
