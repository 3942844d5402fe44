"""Requests built by clients: the official Vertex SDK builds a job, the flexjobs client library
publishes it, and the SDK itself says what it would have sent.

The oracle is the SDK's own ``submit()`` (a custom job) or ``run()`` (a tuning job), called on
a copy of the same job with the same knobs and the same ``aiplatform.init``, whose API client
is replaced by one that keeps the resource it is handed and stops: nothing reaches a network,
and the body is exactly the one the SDK would send to ``create_custom_job``. What flexjobs
then creates in Vertex must carry what that body carries (the service account, the network,
the scheduling), and a request whose SDK body flexjobs would accept must never be refused.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
from collections.abc import Iterator, Mapping
from typing import Any

from tests.simulation.world import Event, World

IMAGE = "us-docker.pkg.dev/sim/train:1"
SERVICE_ACCOUNT = "trainer@p.iam.gserviceaccount.com"
NETWORK = "projects/123/global/networks/training"
POOLS = [
    {
        "machine_spec": {
            "machine_type": "g2-standard-8",
            "accelerator_type": "NVIDIA_L4",
            "accelerator_count": 1,
        },
        "replica_count": 1,
        "container_spec": {"image_uri": IMAGE, "command": ["train"]},
    }
]
#: The knobs a client passes, drawn per request: the SDK's ``submit()``/``run()`` arguments.
TIMEOUTS = (None, 3600, 86_400, 1_000_000, 2_592_000)
STRATEGIES = (None, "SPOT", "FLEX_START", "STANDARD")
WAITS = (None, 0, 1800)


class _Captured(Exception):
    """Raised by the capturing client once it holds the SDK's resource."""


class _CapturingClient:
    """Stands in for the SDK's GAPIC client: keeps what ``create_*`` gets, then stops."""

    def __init__(self) -> None:
        self.resources: list[Any] = []

    def __getattr__(self, method: str) -> Any:
        if not method.startswith("create_"):
            raise AttributeError(method)

        def create(**kwargs: Any) -> Any:
            resource = next(v for k, v in kwargs.items() if k not in ("parent", "timeout"))
            self.resources.append(resource)
            raise _Captured(method)

        return create


@contextlib.contextmanager
def sdk_init(**config: Any) -> Iterator[None]:
    """``aiplatform.init(**config)`` for the block, then the SDK's configuration as it was."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform import initializer

    kept = copy.copy(initializer.global_config.__dict__)
    aiplatform.init(credentials=AnonymousCredentials(), **config)
    try:
        yield
    finally:
        initializer.global_config.__dict__.clear()
        initializer.global_config.__dict__.update(kept)


def _rest(resource: Any) -> dict[str, Any]:
    text = type(resource).to_json(
        resource, use_integers_for_enums=False, always_print_fields_with_no_presence=False
    )
    found: dict[str, Any] = json.loads(text)
    return found


def build(kind: str, name: str) -> Any:
    """An SDK job as a user builds it (``submit()`` never called)."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    job = aiplatform.CustomJob(display_name=name, worker_pool_specs=POOLS)
    if kind == "custom":
        return job
    return aiplatform.HyperparameterTuningJob(
        display_name=name,
        custom_job=job,
        metric_spec={"loss": "minimize"},
        parameter_spec={"lr": hpt.DoubleParameterSpec(min=0.0001, max=0.1, scale="log")},
        max_trial_count=2,
        parallel_trial_count=1,
    )


def sdk_body(job: Any, kind: str, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The REST body the SDK's own ``submit()`` (custom) or ``run()`` (tuning) sends for
    ``job`` (a job of its own: the SDK's objects do not copy) with ``knobs``."""
    from google.cloud import aiplatform

    own = job
    client = _CapturingClient()
    own.api_client = client
    strategy = knobs.get("scheduling_strategy")
    args = {
        "timeout": knobs.get("timeout"),
        "max_wait_duration": knobs.get("max_wait_duration"),
        "scheduling_strategy": (
            getattr(aiplatform.compat.types.custom_job.Scheduling.Strategy, strategy)
            if strategy
            else None
        ),
    }
    with contextlib.suppress(_Captured):
        if kind == "custom":
            own.submit(**args)
        else:
            own.run(sync=True, **args)
    (resource,) = client.resources
    return _rest(resource)


#: What flexjobs must keep of the SDK's body, by where the kind keeps its job spec.
KEPT = ("serviceAccount", "network", "scheduling.timeout", "scheduling.maxWaitDuration")


def expected(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The paths of ``body`` (the SDK's) that the created job must carry as they are: those
    the SDK sets (where it sends nothing, flexjobs' documented defaults apply)."""
    spec_key = "jobSpec" if kind == "custom" else "trialJobSpec"
    spec = body.get(spec_key) or {}
    out: dict[str, Any] = {}
    for path in KEPT:
        node: Any = spec
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out[f"{spec_key}.{path}"] = node
    return out


class WorldPublisher:
    """The client library's Publisher port, publishing into the world's requests topic."""

    def __init__(self, world: World) -> None:
        self.world = world

    def publish(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> str:
        body = json.loads(data)
        name = f"request {body.get('requestId')}"
        return str(self.world.publish("requests", name, data, attributes).key)


def sdk_request(request_id: str, rng: random.Random) -> Event:
    """A client submits an SDK job through ``flexjobs.submit`` (once): a custom job or a
    tuning job, under ``aiplatform.init`` with a service account and a network, with knobs
    drawn at random."""
    kind = rng.choice(("custom", "tuning"))
    knobs = {
        "timeout": rng.choice(TIMEOUTS),
        "scheduling_strategy": rng.choice(STRATEGIES),
        "max_wait_duration": rng.choice(WAITS),
    }
    network = rng.choice((None, NETWORK))

    def apply(world: World) -> None:
        import flexjobs
        from shared.kernel.errors import InvalidRequest

        config: dict[str, Any] = {
            "project": "p",
            "location": "us-central1",
            "staging_bucket": "gs://sim-staging",
        }
        config["service_account"] = SERVICE_ACCOUNT
        if network:
            config["network"] = network
        with sdk_init(**config):
            theirs = sdk_body(build(kind, f"sdk {request_id}"), kind, knobs)
            job = build(kind, f"sdk {request_id}")
            client = flexjobs.Client(
                project="p",
                settings=world.settings,
                publisher=WorldPublisher(world),
                clock=world.now,
            )
            envelope = "customJob" if kind == "custom" else "hyperparameterTuningJob"
            valid = not client.validate({"requestId": request_id, envelope: theirs})
            world.published[request_id] = {"published": world.at, "strategy": "SDK"}
            if valid:
                world.expected_bodies[request_id] = expected(kind, theirs)
            given = {k: v for k, v in knobs.items() if v is not None}
            try:
                client.submit(job, request_id=request_id, **given)
            except InvalidRequest as err:
                world.client_refused[request_id] = [e.message for e in err.errors]

    return Event(f"sdk submits {request_id} ({kind}, {knobs}, network={bool(network)})", apply)
