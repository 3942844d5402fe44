"""What each controller's simulation starts from and what may happen in it: the world's
setup, the inputs (requests, cancels, resumes, uploads, crons), the world's own changes, and
how long the quiet ticks run at the end.

A scenario is a small scope (a few requests, one or two endpoints, a queue file of a few
queues), as model checkers keep their scopes small: the defects live in how a few things
interleave, not in how many there are. Each input happens at most once in a run (Pub/Sub may
still deliver it twice); the world's changes may happen again and again.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tests.simulation.vertex import Work
from tests.simulation.world import Event, World

IMAGE = "us-docker.pkg.dev/sim/train:1"
L4 = {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}
A100 = {
    "machineType": "a2-highgpu-1g",
    "acceleratorType": "NVIDIA_TESLA_A100",
    "acceleratorCount": 1,
}
HOME = "us-central1"
EAST = "us-east1"
EUROPE = "europe-west4"

#: The clock's steps, one across each boundary the code waits on, and how often a random run
#: takes each: a moment (a hint window), a minute (the tick), and, passing calmly, the grace
#: period (300 s), the claim TTL and the quota read interval (600 s), the hold and the
#: backoff's cap (1,800 s), the 2-hour operation limit.
CLOCK_STEPS = {5: 3.0, 60: 3.0, 301: 0.5, 601: 0.3, 1801: 0.15, 7201: 0.05}


def training(
    request_id: str,
    strategy: str = "SPOT",
    *,
    machine: dict[str, Any] | None = None,
    replicas: int = 1,
    max_wait: str | None = None,
    **envelope: Any,
) -> dict[str, Any]:
    """A custom job request (checkpoints under its own output directory)."""
    scheduling: dict[str, Any] = {"strategy": strategy}
    if max_wait is not None:
        scheduling["maxWaitDuration"] = max_wait
    return {
        "requestId": request_id,
        "customJob": {
            "displayName": f"sim {request_id}",
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": dict(machine or L4),
                        "replicaCount": replicas,
                        "containerSpec": {"imageUri": IMAGE, "command": ["train"]},
                    }
                ],
                "scheduling": scheduling,
                "baseOutputDirectory": {"outputUriPrefix": f"gs://sim-out/{request_id}/"},
            },
        },
        **envelope,
    }


def deploy_model(
    request_id: str, endpoint: str, *, replicas: int = 2, **envelope: Any
) -> dict[str, Any]:
    """A Spot ``deployModel`` request on ``endpoint`` (no traffic split: it takes none until
    it serves)."""
    region = endpoint.split("/")[3]
    return {
        "requestId": request_id,
        "deployModel": {
            "endpoint": endpoint,
            "deployedModel": {
                "model": f"projects/p/locations/{region}/models/{request_id}",
                "displayName": f"served {request_id}",
                "dedicatedResources": {
                    "machineSpec": dict(L4),
                    "spot": True,
                    "minReplicaCount": replicas,
                    "maxReplicaCount": replicas,
                },
            },
        },
        **envelope,
    }


def endpoint_name(region: str, number: int) -> str:
    return f"projects/p/locations/{region}/endpoints/{number}"


@dataclass
class Scenario:
    """One controller's scope (see the module docstring)."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[World, random.Random], None] = lambda world, rng: None
    #: Minutes of quiet ticks at the end, and past how many of them nothing may have moved.
    quiet_minutes: int = 45
    #: The exhaustive exploration's scope: a setup with few inputs, each change of the world
    #: at most once (None: :attr:`setup`'s, each event once).
    small_setup: Callable[[World, random.Random], None] | None = None

    def small(self) -> Scenario:
        """This scenario as exhaustive exploration takes it: every event at most once."""
        setup = self.small_setup or self.setup

        def once(world: World, rng: random.Random) -> None:
            setup(world, rng)
            for event in world.events:
                event.once = True

        return Scenario(self.name, self.env, once, self.quiet_minutes)


# -- the inputs and the world's changes, as events -----------------------------------------


Body = dict[str, Any] | Callable[[World], dict[str, Any]]


def publish_request(body: Body, request_id: str | None = None, **facts: Any) -> Event:
    """The scenario publishes one request message (once). ``body`` may be a function of the
    world, to be written when it is published (a deadline from the publish time); its facts
    for the checks likewise (a value that is a function of the world is called then)."""
    rid = request_id or str(body["requestId"])  # type: ignore[index]

    def apply(world: World) -> None:
        made = body(world) if callable(body) else body
        known = {k: v(world) if callable(v) else v for k, v in facts.items()}
        world.published[rid] = {"published": world.at, **known}
        world.publish("requests", f"request {rid}", made)

    return Event(f"publish {rid}", apply)


def publish_cancel(request_id: str, after: str | None = None) -> Event:
    """A cancel of ``request_id`` (once; ``after``: only once that event happened)."""

    def apply(world: World) -> None:
        world.cancel_asked.add(request_id)
        world.publish("requests", f"cancel {request_id}", {"cancel": request_id})

    return Event(f"cancel {request_id}", apply, _after(after))


def publish_resume(request_id: str, after: str | None = None) -> Event:
    def apply(world: World) -> None:
        world.publish("requests", f"resume {request_id}", {"resume": request_id})

    return Event(f"resume {request_id}", apply, _after(after))


def _after(label: str | None) -> Callable[[World], bool]:
    if label is None:
        return lambda world: True
    return lambda world: any(e.done and e.label == label for e in world.events)


def clock_steps(steps: dict[int, float] | None = None) -> list[Event]:
    """The clock moving on, across each boundary (whenever chosen): up to a minute as it is
    (a tick is published at the minute), further calmly (:meth:`World.fast_forward`)."""
    chosen = CLOCK_STEPS if steps is None else steps
    return [
        Event(f"clock +{seconds}s", _mover(seconds), once=False, weight=weight)
        for seconds, weight in chosen.items()
    ]


def _mover(seconds: int) -> Callable[[World], None]:
    if seconds <= 60:
        return lambda world: world.advance(seconds)
    return lambda world: world.fast_forward(seconds, check=world.check)


def extra_tick() -> Event:
    """A tick beside the scheduled one: two ticks at once."""
    return Event(
        "tick (another)",
        lambda world: world.publish("ticks", f"tick {world.at:%H:%M:%S}+", {"tick": "extra"}),
        once=False,
    )


def spot_flaps(region: str, machine: str) -> list[Event]:
    return [
        Event(
            f"spot lost {region}/{machine}",
            lambda world: world.vertex.lose_spot(region, machine),
            lambda world: (region, machine) not in world.vertex.spot_out,
            once=False,
        ),
        Event(
            f"spot back {region}/{machine}",
            lambda world: world.vertex.return_spot(region, machine),
            lambda world: (region, machine) in world.vertex.spot_out,
            once=False,
        ),
    ]


def job_faults() -> list[Event]:
    """Vertex's own ends: a running Spot job preempted, a queued job stocked out (the first
    such job, each time chosen)."""

    def first(world: World, how: str) -> str | None:
        for name, run in sorted(world.vertex.runs.items()):
            if run.ended is not None:
                continue
            state = world.vertex.jobs.jobs[name].state
            if how == "preempt" and run.strategy == "SPOT" and state.endswith("_RUNNING"):
                return name
            if how == "stockout" and state.endswith("_QUEUED"):
                return name
        return None

    def preempt(world: World) -> None:
        name = first(world, "preempt")
        if name:
            world.vertex.preempt(name)
            world._publish_world()

    def stockout(world: World) -> None:
        name = first(world, "stockout")
        if name:
            world.vertex.stock_out(name)
            world._publish_world()

    return [
        Event("preempt a Spot job", preempt, lambda w: first(w, "preempt") is not None, False),
        Event(
            "stock out a queued job", stockout, lambda w: first(w, "stockout") is not None, False
        ),
    ]


def lost_hints() -> list[Event]:
    """The log sink's hints are best effort: one waiting to be delivered is lost."""

    def waiting(world: World) -> list[Any]:
        return [m for m in world.messages if m.topic == "events" and not m.deliveries]

    def lose(world: World) -> None:
        found = waiting(world)
        if found:
            found[0].dead = True
            world._retire(found[0])

    return [Event("a hint is lost", lose, lambda w: bool(waiting(w)), once=False, weight=0.5)]


def region_outage(region: str) -> list[Event]:
    """A region that stops answering, and comes back."""

    def down(world: World) -> None:
        world.vertex.down.add(region)
        world.vertex.ever_down.add(region)
        world.vertex.outages.append((region, world.at))

    return [
        Event(f"{region} stops answering", down, lambda w: region not in w.vertex.down, False),
        Event(
            f"{region} answers again",
            lambda world: world.vertex.down.discard(region),
            lambda w: region in w.vertex.down,
            False,
        ),
    ]


def operation_faults() -> list[Event]:
    """An endpoint operation that will end late (by three hours) or with an error."""

    def pending(world: World) -> str | None:
        live = [o for o in world.vertex.operations.values() if o.error is None]
        return min(live, key=lambda o: o.name).name if live else None

    def late(world: World) -> None:
        name = pending(world)
        if name:
            world.vertex.delay_operation(name, timedelta(hours=3))

    def error(world: World) -> None:
        name = pending(world)
        if name:
            world.vertex.fail_operation(name, "simulated: the operation failed (code 13)")

    return [
        Event("an operation runs late", late, lambda w: pending(w) is not None, False),
        Event("an operation fails", error, lambda w: pending(w) is not None, False),
    ]


# -- scenarios ------------------------------------------------------------------------------
#
# Each scenario has a wide setup (random runs: many inputs, every change of the world again and
# again) and a small one (exhaustive exploration: the few inputs where two decisions meet, each
# change of the world at most once, so every interleaving of them fits a bounded depth).


def _small_steps() -> list[Event]:
    """The clock steps of a small scope: past a grace period or a backoff, past a claim's TTL
    or a hold, past the 2-hour operation limit."""
    return clock_steps({301: 1.0, 1801: 1.0, 7201: 0.5})


def jobs_setup(world: World, rng: random.Random) -> None:
    """Three requests (Spot, FLEX_START, on-demand), one duplicated by its publisher, one
    cancelled; Spot capacity that comes and goes; preemptions and stockouts."""
    bodies = [
        training("j1", "SPOT"),
        training("j2", "FLEX_START", max_wait="1800s"),
        training("j3", "STANDARD"),
    ]
    for body in bodies:
        world.vertex.work[body["requestId"]] = Work(
            rng.choice((900.0, 2400.0)), checkpoint_every=600.0
        )
        world.events.append(
            publish_request(body, strategy=body["customJob"]["jobSpec"]["scheduling"]["strategy"])
        )
    world.events.append(publish_cancel(rng.choice(("j1", "j2", "j3"))))
    world.events += clock_steps()
    world.events.append(extra_tick())
    world.events += spot_flaps(HOME, "g2-standard-8")
    world.events += job_faults()
    world.events += lost_hints()


def jobs_small(world: World, rng: random.Random) -> None:
    """One Spot request, its duplicate delivery and its cancel; a tick; Spot lost once; a
    preemption or a stockout; a hint lost."""
    body = training("j1", "SPOT")
    world.vertex.work["j1"] = Work(900.0, checkpoint_every=600.0)
    world.events.append(publish_request(body, strategy="SPOT"))
    world.events.append(publish_cancel("j1", after="publish j1"))
    world.events += _small_steps()
    world.events.append(extra_tick())
    world.events += spot_flaps(HOME, "g2-standard-8")[:1]
    world.events += job_faults()[:2]
    world.events += lost_hints()[:1]


#: The endpoints of the serving scenario: two flexjobs deployments and a model deployed by
#: hand share the first; one deployment has the second to itself; the third is in a region
#: the project does not allow.
SHARED_ENDPOINT = endpoint_name(HOME, 100)
OWN_ENDPOINT = endpoint_name(EAST, 200)
FORBIDDEN_ENDPOINT = endpoint_name(EUROPE, 300)
HAND_MODEL = "500"


def hand_model(world: World, endpoint: str, share: int = 100) -> None:
    """A model someone deployed by hand (on-demand, serving), with ``share`` of the traffic."""
    backend = world.vertex.endpoints
    backend.add_endpoint(endpoint)
    backend.endpoints[endpoint].append(
        {
            "id": HAND_MODEL,
            "model": "projects/p/locations/us-central1/models/hand",
            "displayName": "served by hand",
            "dedicatedResources": {
                "machineSpec": {"machineType": "n1-standard-4"},
                "minReplicaCount": 1,
                "requiredReplicaCount": 1,
                "spot": False,
            },
            "status": {"availableReplicaCount": 1},
        }
    )
    backend.splits[endpoint] = {HAND_MODEL: share}
    backend._changed(endpoint)


def hand_edits(endpoint: str) -> list[Event]:
    """Someone edits the shared endpoint by hand (rarely): the hand model's share moved."""

    def shift(world: World) -> None:
        backend = world.vertex.endpoints
        split = dict(backend.splits.get(endpoint, {}))
        if HAND_MODEL not in split or len(split) < 2:
            return
        other = sorted(k for k in split if k != HAND_MODEL)[0]
        moved = min(10, split[HAND_MODEL])
        split[HAND_MODEL] -= moved
        split[other] += moved
        backend.set_split_by_hand(endpoint, {k: v for k, v in split.items() if v > 0})
        world.hand_edits.setdefault(endpoint, []).append(world.at)

    return [Event(f"hand edit of {endpoint.rsplit('/', 1)[-1]}", shift, once=False, weight=0.05)]


def serving_setup(world: World, rng: random.Random) -> None:
    """Three Spot deployments: two on an endpoint shared with a model deployed by hand, one
    on another with a second that names no split (flexjobs alone there: a cancel of the first
    can leave the endpoint with no traffic, as its model lands or while Spot is gone); a
    fifth whose endpoint is outside the regions the project allows. Spot capacity comes and
    goes, operations end late or fail, cancels and resumes come."""
    hand_model(world, SHARED_ENDPOINT)
    world.vertex.endpoints.add_endpoint(OWN_ENDPOINT)
    world.vertex.endpoints.add_endpoint(FORBIDDEN_ENDPOINT)
    first = deploy_model("d1", SHARED_ENDPOINT)
    first["deployModel"]["trafficSplit"] = {"0": 60, HAND_MODEL: 40}
    # d3 keeps a warm on-demand floor of one of its two replicas (issue 39's knobs).
    own = deploy_model("d3", OWN_ENDPOINT, minOnDemandReplicas=1)
    forbidden = deploy_model("d4", FORBIDDEN_ENDPOINT)
    forbidden["deployModel"]["trafficSplit"] = {"0": 100}
    own["deployModel"]["trafficSplit"] = {"0": 100}
    second = deploy_model("d5", OWN_ENDPOINT, replicas=1)
    for body in (first, deploy_model("d2", SHARED_ENDPOINT), own, second):
        world.events.append(publish_request(body, kind="deployModel"))
    world.events.append(publish_request(forbidden, kind="deployModel"))
    for request_id in ("d1", "d2", "d3"):
        world.events.append(publish_cancel(request_id, after=f"publish {request_id}"))
        world.events[-1].weight = 0.3
    world.events.append(publish_resume("d1", after="publish d1"))
    world.events[-1].weight = 0.2
    world.events += clock_steps()
    world.events.append(extra_tick())
    world.events += spot_flaps(HOME, "g2-standard-8")
    world.events += spot_flaps(EAST, "g2-standard-8")
    world.events += operation_faults()
    world.events += hand_edits(SHARED_ENDPOINT)


def serving_fast_setup(world: World, rng: random.Random) -> None:
    """The serving scope with a DeployModel of 4 minutes, shorter than a claim's TTL and the
    grace period (the wide scope's takes 12: longer than both), so that a fallback serves,
    and a restore runs, before the next grace period would end."""
    serving_setup(world, rng)
    world.vertex.operation_time["DeployModel"] = timedelta(minutes=4)


def serving_quota(region: str) -> list[Event]:
    """The region's Spot serving quota used up (a deployModel is parked), and given back."""
    return [
        Event(
            f"spot serving quota used up in {region}",
            lambda w: w.vertex.serving_quota_out.add(region),
            lambda w: region not in w.vertex.serving_quota_out,
            False,
        ),
        Event(
            f"spot serving quota back in {region}",
            lambda w: w.vertex.serving_quota_out.discard(region),
            lambda w: region in w.vertex.serving_quota_out,
            False,
        ),
    ]


def serving_parked_setup(world: World, rng: random.Random) -> None:
    """The fast serving scope, with the Spot serving quota of each allowed region used up and
    given back (a deployModel is parked, and the tick deploys it again), and the cancels
    three times as likely."""
    serving_fast_setup(world, rng)
    world.events += serving_quota(HOME) + serving_quota(EAST)
    for event in world.events:
        if event.label.startswith("cancel "):
            event.weight = 1.0


def serving_alone_setup(world: World, rng: random.Random) -> None:
    """Two Spot deployments alone on one endpoint, with a 4-minute DeployModel: the first
    takes all its traffic, the second names no split; the first is likely cancelled, often
    while the second deploys or while Spot is gone. So the endpoint is left with no traffic
    as the second's model lands, or while it serves nothing, and it takes the endpoint: with
    two ticks at once, and faults at every call (a traffic move that timed out and happened)."""
    world.vertex.endpoints.add_endpoint(OWN_ENDPOINT)
    world.vertex.operation_time["DeployModel"] = timedelta(minutes=4)
    first = deploy_model("d3", OWN_ENDPOINT, replicas=1)
    first["deployModel"]["trafficSplit"] = {"0": 100}
    for body in (first, deploy_model("d5", OWN_ENDPOINT, replicas=1)):
        world.events.append(publish_request(body, kind="deployModel"))
    world.events.append(publish_cancel("d3", after="publish d3"))
    world.events += clock_steps()
    tick = extra_tick()
    tick.weight = 3.0
    world.events.append(tick)
    world.events += spot_flaps(EAST, "g2-standard-8")


def serving_small(world: World, rng: random.Random) -> None:
    """Two deployments on the endpoint shared with a hand-deployed model; one cancelled; Spot
    lost and returned once; an operation late or failed; a hand edit."""
    hand_model(world, SHARED_ENDPOINT)
    first = deploy_model("d1", SHARED_ENDPOINT, replicas=1)
    first["deployModel"]["trafficSplit"] = {"0": 60, HAND_MODEL: 40}
    world.events.append(publish_request(first, kind="deployModel"))
    world.events.append(
        publish_request(deploy_model("d2", SHARED_ENDPOINT, replicas=1), kind="deployModel")
    )
    world.events.append(publish_cancel("d1", after="publish d1"))
    world.events += _small_steps()
    world.events += spot_flaps(HOME, "g2-standard-8")
    world.events += operation_faults()
    world.events += hand_edits(SHARED_ENDPOINT)[:1]


# -- admission --------------------------------------------------------------------------

A100 = {
    "machineType": "a2-highgpu-1g",
    "acceleratorType": "NVIDIA_TESLA_A100",
    "acceleratorCount": 1,
}
A100_2 = {
    "machineType": "a2-highgpu-2g",
    "acceleratorType": "NVIDIA_TESLA_A100",
    "acceleratorCount": 2,
}
A100_4 = {
    "machineType": "a2-highgpu-4g",
    "acceleratorType": "NVIDIA_TESLA_A100",
    "acceleratorCount": 4,
}

#: Two cohorts of two queues over 16 preemptible A100s in us-central1 (the project's real
#: quota, and the file's): team-a reclaims what its cohort borrowed, team-b borrows up to 4;
#: team-c and team-d share the other cohort, team-c preempting within itself.
ADMISSION_QUEUES = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 16}
queues:
  - name: team-a
    cohort: one
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
    priorities: {high: 100, normal: 0}
    defaultPriority: normal
    preemption: {withinCohort: true, requireCheckpoint: false}
  - name: team-b
    cohort: one
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE,
         nominal: 4, borrowingLimit: 4}
  - name: team-c
    cohort: two
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
    priorities: {high: 100, normal: 0}
    defaultPriority: normal
    preemption: {withinQueue: true, requireCheckpoint: false}
  - name: team-d
    cohort: two
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 4}
"""


def queued(
    request_id: str, queue: str, machine: dict[str, Any], *, priority: str | None = None
) -> dict[str, Any]:
    body = training(request_id, "SPOT", machine=machine, queue=queue)
    if priority is not None:
        body["priority"] = priority
    return body


def admission_setup(world: World, rng: random.Random) -> None:
    """A backlog in team-b (longer than one read of the waiting line holds), the other teams
    asking later; jobs of 1, 2 and 4 GPUs; a high-priority request in team-a that may
    reclaim what team-b borrowed, and one in team-c that may preempt its own queue."""
    from shared.domain.admission.config import Pool, Resource

    world.vertex.quota[Resource(HOME, "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)] = 16
    # The waiting line of one queue at most: 1,000 in production, a few in this scope.
    world.bounds[("shared.app.services.admission", "MAX_WAITING_PER_QUEUE")] = 4
    bodies = [queued(f"b{i}", "team-b", rng.choice((A100, A100_2))) for i in range(1, 7)]
    bodies += [queued(f"a{i}", "team-a", A100_2) for i in (1, 2)]
    bodies.append(queued("a-high", "team-a", A100_4, priority="high"))
    bodies += [queued(f"c{i}", "team-c", A100_2) for i in (1, 2)]
    bodies.append(queued("c-high", "team-c", A100_4, priority="high"))
    bodies.append(queued("d1", "team-d", A100_2))
    for body in bodies:
        rid = body["requestId"]
        world.vertex.work[rid] = Work(rng.choice((1200.0, 3600.0)), checkpoint_every=600.0)
        event = publish_request(body, strategy="SPOT", queue=body["queue"])
        # The backlog first: team-b's requests are published readily, the rest later.
        event.weight = 3.0 if rid.startswith("b") else 0.5
        world.events.append(event)
    world.events.append(publish_cancel(rng.choice([b["requestId"] for b in bodies])))
    world.events[-1].weight = 0.2
    world.events += clock_steps()
    world.events.append(extra_tick())
    world.events += job_faults()


def admission_small(world: World, rng: random.Random) -> None:
    """team-b borrows past its nominal, then team-a asks for its own nominal (reclaim); a
    cancel; a preemption."""
    from shared.domain.admission.config import Pool, Resource

    world.vertex.quota[Resource(HOME, "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)] = 16
    world.bounds[("shared.app.services.admission", "MAX_WAITING_PER_QUEUE")] = 2
    bodies = [queued("b1", "team-b", A100_4), queued("b2", "team-b", A100_4)]
    bodies += [queued("a1", "team-a", A100_4)]
    for body in bodies:
        rid = body["requestId"]
        world.vertex.work[rid] = Work(1800.0, checkpoint_every=600.0)
        world.events.append(publish_request(body, strategy="SPOT", queue=body["queue"]))
    world.events.append(publish_cancel("b1", after="publish b1"))
    world.events += _small_steps()
    world.events.append(extra_tick())
    world.events += job_faults()[:1]


#: The implicit ``default`` queue (a file naming no queue): only the project's quota bounds it,
#: as the Cloud Quotas API reports it.
DEFAULT_QUEUE = """
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 8}
"""


def quota_setup(world: World, rng: random.Random) -> None:
    """The default queue; the project's real quota is 4 L4 GPUs (Spot) and 8 A100s, of which
    the queue file names only the A100s: the L4s' ceiling is what the quota read says."""
    from shared.domain.admission.config import Pool, Resource

    world.vertex.quota[Resource(HOME, "NVIDIA_L4", Pool.PREEMPTIBLE)] = 4
    world.vertex.quota[Resource(HOME, "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)] = 8
    for i in range(1, 5):
        body = training(f"a{i}", "SPOT", machine=A100_2)
        world.vertex.work[f"a{i}"] = Work(1800.0, checkpoint_every=600.0)
        world.events.append(publish_request(body, strategy="SPOT"))
    for i in range(1, 7):
        body = training(f"l{i}", "SPOT", machine=L4)
        world.vertex.work[f"l{i}"] = Work(rng.choice((1800.0, 3600.0)), checkpoint_every=600.0)
        event = publish_request(body, strategy="SPOT")
        event.weight = 0.5
        world.events.append(event)
    world.events += clock_steps()
    world.events.append(extra_tick())
    world.events += job_faults()


def quota_small(world: World, rng: random.Random) -> None:
    """The default queue, the L4s' ceiling known only from the quota read: three 2-GPU
    requests against a real quota of 4."""
    from shared.domain.admission.config import Pool, Resource

    world.vertex.quota[Resource(HOME, "NVIDIA_L4", Pool.PREEMPTIBLE)] = 4
    world.vertex.quota[Resource(HOME, "NVIDIA_TESLA_A100", Pool.PREEMPTIBLE)] = 8
    two_l4 = {**L4, "machineType": "g2-standard-24", "acceleratorCount": 2}
    for i in range(1, 4):
        world.vertex.work[f"l{i}"] = Work(1800.0, checkpoint_every=600.0)
        world.events.append(
            publish_request(training(f"l{i}", "SPOT", machine=two_l4), strategy="SPOT")
        )
    world.events += _small_steps()
    world.events.append(extra_tick())


# -- AUTO --------------------------------------------------------------------------------

#: A customer-managed key of us-east1 (a regional resource), which the field policy allows.
KEY = f"projects/p/locations/{EAST}/keyRings/r/cryptoKeys/k"


def _rfc3339(at: Any) -> str:
    return str(at.isoformat().replace("+00:00", "Z"))


def auto_setup(world: World, rng: random.Random) -> None:
    """AUTO requests with deadlines from tight to loose, allowed three regions (one pinned,
    one with a 100 GB checkpoint); Spot capacity flapping per region, regions that stop
    answering, a region that refuses the accelerator; one request with a key of another
    region and no location."""
    works = [(3600.0, 1.5), (5400.0, 2.0), (7200.0, 1.3)]
    for i, (seconds, factor) in enumerate(works, start=1):
        rid = f"auto{i}"
        gb = rng.choice((0, 100))
        overhead = 300.0
        world.vertex.work[rid] = Work(
            seconds, checkpoint_every=900.0, restart_overhead=overhead, checkpoint_gb=gb or 50.0
        )
        slack = timedelta(seconds=seconds * factor + 1800)

        def body(
            world: World,
            rid: str = rid,
            seconds: float = seconds,
            gb: int = gb,
            slack: timedelta = slack,
            overhead: float = overhead,
        ) -> dict[str, Any]:
            return training(
                rid,
                "AUTO",
                location=HOME,
                regions=[EAST, EUROPE],
                deadline=_rfc3339(world.at + slack),
                estimatedRunSeconds=int(seconds),
                checkpointIntervalSeconds=900,
                restartOverheadSeconds=int(overhead),
                **({"checkpointSizeGb": gb} if gb else {}),
            )

        world.events.append(
            publish_request(
                body,
                rid,
                strategy="AUTO",
                deadline=lambda w, slack=slack: w.at + slack,
                location=HOME,
                regions=[EAST, EUROPE],
            )
        )

    def keyed(world: World) -> dict[str, Any]:
        made = training(
            "auto-key",
            "AUTO",
            regions=[EAST],
            deadline=_rfc3339(world.at + timedelta(hours=6)),
            estimatedRunSeconds=3600,
        )
        made["customJob"]["encryptionSpec"] = {"kmsKeyName": KEY}
        return made

    world.vertex.work["auto-key"] = Work(3600.0, checkpoint_every=900.0)
    world.events.append(
        publish_request(
            keyed,
            "auto-key",
            strategy="AUTO",
            deadline=lambda w: w.at + timedelta(hours=6),
            regions=[EAST],
        )
    )
    world.events[-1].weight = 0.3
    for region in (HOME, EAST, EUROPE):
        world.events += spot_flaps(region, "g2-standard-8")
        world.events += [
            Event(
                f"flex capacity gone in {region}",
                lambda w, r=region: w.vertex.flex_out.add(r),
                lambda w, r=region: r not in w.vertex.flex_out,
                False,
                weight=0.3,
            ),
            Event(
                f"flex capacity back in {region}",
                lambda w, r=region: w.vertex.flex_out.discard(r),
                lambda w, r=region: r in w.vertex.flex_out,
                False,
                weight=0.3,
            ),
        ]
    world.events += region_outage(EAST)
    world.events += region_outage(EUROPE)
    world.events.append(
        Event(
            f"{EUROPE} refuses L4",
            lambda w: w.vertex.refusing.add((EUROPE, "NVIDIA_L4")),
            weight=0.2,
        )
    )
    world.events += clock_steps()
    world.events += job_faults()


# -- uploads and crons -------------------------------------------------------------------


def uploads_setup(world: World, rng: random.Random) -> None:
    """A request file of three lines (one bad) in the request bucket, redelivered; a cron
    whose slots forbid overlap, and one whose slots replace the running one."""
    lines = [
        json.dumps(training("u1", "SPOT")),
        json.dumps(training("u2", "FLEX_START", max_wait="1800s")),
        json.dumps({"requestId": "u3", "customJob": {"displayName": "bad"}}),
    ]
    for rid in ("u1", "u2"):
        world.vertex.work[rid] = Work(1800.0, checkpoint_every=600.0)
    data = ("\n".join(lines) + "\n").encode()

    def upload(world: World) -> None:
        for rid in ("u1", "u2"):
            world.published[rid] = {"published": world.at, "strategy": "SPOT"}
        world.upload("flexjobs-uploads", "requests/batch.jsonl", data)

    world.events.append(Event("upload requests/batch.jsonl", upload))
    for name, concurrency in (("nightly", "forbid"), ("hourly", "replace")):
        body = training(f"{name}-{{slot}}", "SPOT")
        body["schedule"] = {"slotSeconds": 900, "concurrency": concurrency}
        world.series_concurrency[f"{name}-{{slot}}"] = concurrency

        def fire(world: World, body: dict[str, Any] = body, name: str = name) -> None:
            at = world.at.isoformat().replace("+00:00", "Z")
            slot = world.at.replace(minute=world.at.minute // 15 * 15, second=0, microsecond=0)
            rid = f"{name}-{slot:%Y%m%dT%H%M%SZ}"
            world.vertex.work.setdefault(rid, Work(2400.0, checkpoint_every=600.0))
            world.published.setdefault(rid, {"published": world.at, "strategy": "SPOT"})
            world.publish("requests", f"cron {name} {at}", body, {"scheduleTime": at})

        world.events.append(Event(f"cron {name} fires", fire, once=False, weight=0.4))
    world.events += clock_steps()
    world.events.append(extra_tick())
    world.events += spot_flaps(HOME, "g2-standard-8")
    world.events += job_faults()


# -- clients ------------------------------------------------------------------------------


def clients_setup(world: World, rng: random.Random) -> None:
    """Four SDK jobs submitted through the client library, with knobs drawn per job."""
    from tests.simulation.clients import sdk_request

    for i in range(1, 5):
        rid = f"sdk{i}"
        world.vertex.work[rid] = Work(1200.0, checkpoint_every=600.0)
        world.events.append(sdk_request(rid, rng))
    world.events += clock_steps()
    world.events += job_faults()


SCENARIOS: dict[str, Scenario] = {
    "jobs": Scenario("jobs", setup=jobs_setup, quiet_minutes=90, small_setup=jobs_small),
    "serving": Scenario(
        "serving",
        env={"FLEXJOBS_ALLOWED_REGIONS": f"{HOME},{EAST}"},
        setup=serving_setup,
        small_setup=serving_small,
        # Past a DeployModel's 2-hour limit: a cancel waits for one whose answer was lost.
        quiet_minutes=130,
    ),
    "serving-fast": Scenario(
        "serving-fast",
        env={"FLEXJOBS_ALLOWED_REGIONS": f"{HOME},{EAST}"},
        setup=serving_fast_setup,
        quiet_minutes=130,
    ),
    "serving-alone": Scenario(
        "serving-alone",
        env={"FLEXJOBS_ALLOWED_REGIONS": f"{HOME},{EAST}"},
        setup=serving_alone_setup,
        quiet_minutes=130,
    ),
    "serving-parked": Scenario(
        "serving-parked",
        env={"FLEXJOBS_ALLOWED_REGIONS": f"{HOME},{EAST}"},
        setup=serving_parked_setup,
        quiet_minutes=130,
    ),
    "admission": Scenario(
        "admission",
        env={"FLEXJOBS_QUEUES": ADMISSION_QUEUES},
        setup=admission_setup,
        small_setup=admission_small,
        quiet_minutes=120,
    ),
    "quota": Scenario(
        "quota",
        env={"FLEXJOBS_QUEUES": DEFAULT_QUEUE},
        setup=quota_setup,
        quiet_minutes=90,
        small_setup=quota_small,
    ),
    "auto": Scenario(
        "auto",
        env={
            "FLEXJOBS_ALLOWED_REGIONS": f"{HOME},{EAST},{EUROPE}",
            "FLEXJOBS_FIELD_POLICY": json.dumps({"encryptionSpec": [KEY]}),
        },
        setup=auto_setup,
        quiet_minutes=300,
    ),
    "uploads": Scenario("uploads", setup=uploads_setup, quiet_minutes=90),
    "clients": Scenario(
        "clients",
        env={"FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS": "trainer@p.iam.gserviceaccount.com"},
        setup=clients_setup,
        quiet_minutes=60,
    ),
}


def body_json(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True)
