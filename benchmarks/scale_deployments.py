"""Spot deployments at scale (issue 41): ``./dev bench scale`` section 6.

On the embedded stack's Firestore emulator and Vertex AI simulator (over gRPC), with the tick
run in a fresh process on the production wiring (``benchmarks.scale.run_tick``: every
Firestore read and write counted on the wire, Vertex calls from the simulator's call log):

- N Spot deployments on N/5 endpoints (1,000 on 200; ``--ci`` 100 on 20), each one replica of
  ``tests/events/deploy_request.json`` (g2-standard-8, one NVIDIA_L4, Spot), the first of each
  endpoint with all its traffic, the others none (as the functional tests share an endpoint);
- seeded as the product would have written them, step by step with its domain functions
  (:func:`seed`): the record ``accept_deployment`` creates (``serving_plan``,
  ``rule.new_state``, ``new_deployment``), the first step's claim of its DeployModel
  (``rule.decide`` on a read of the endpoint, ``projected``), the DeployModel itself through
  the product's ``VertexDeploymentBackend.deploy`` (so the simulator holds the models the
  records name), its answer (``rule.answered``), then, once every operation is done, the
  step the tick takes on one ``GetEndpoint`` per endpoint and each call's ``GetOperation``
  (``rule.decide`` to SERVING, DEPLOYED owed), and the outbox flushed as ``drop_from_outbox``
  leaves it. The endpoints are created through the v1 EndpointService client, as a user does;
- one tick to settle whatever the seeding left (its records changed are printed: a steady
  tick after it should change none), a steady tick (plain, then again under tracemalloc),
  and a tick after 1% of the endpoints (2 of 200) lost Spot: every node of each of their
  models reclaimed by the simulator's control surface, its clock frozen first so no restart
  try brings a node back before the tick reads it.

Each figure is printed beside its target, PASS or FAIL computed from it.
"""

from __future__ import annotations

import copy
import os
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flexjobs_local.stack import LocalStack

PER_ENDPOINT = 5
#: Issue 41's targets for a steady tick at 1,000 deployments (printed for every size).
READS_TARGET = 100
WALL_SECONDS = 60.0
SPOT_LOSS_SHARE = 0.01


def deploy_body(request_id: str, endpoint: str, first: bool) -> dict[str, Any]:
    """A Spot ``deployModel`` request on ``endpoint``: the first of an endpoint takes all its
    traffic, a later one none (its split empty)."""
    from tests.events import load

    body: dict[str, Any] = copy.deepcopy(load("deploy_request"))
    body["requestId"] = request_id
    spec = body["deployModel"]
    spec["endpoint"] = endpoint
    spec["deployedModel"]["model"] = endpoint.rsplit("/endpoints/", 1)[0] + "/models/456"
    spec["trafficSplit"] = {"0": 100} if first else {}
    return body


def endpoint_name(project: str, location: str, i: int) -> str:
    return f"projects/{project}/locations/{location}/endpoints/{7000 + i}"


def spot_loss_endpoints(endpoints: list[str], share: float = SPOT_LOSS_SHARE) -> list[str]:
    """The endpoints that lose Spot: ``share`` of them (at least one), spread over the list.

    >>> spot_loss_endpoints([f"e{i}" for i in range(200)])
    ['e0', 'e100']
    >>> spot_loss_endpoints(["e0", "e1", "e2"])
    ['e0']
    """
    k = max(1, round(len(endpoints) * share))
    step = len(endpoints) // k
    return [endpoints[i * step] for i in range(k)]


def create_endpoints(stack: LocalStack, count: int) -> list[str]:
    """``count`` endpoints, made through the v1 EndpointService client (as a user makes the
    endpoint a ``deployModel`` request names); waits until the simulator holds them all."""
    from shared.adapters.vertex.jobs import ENDPOINT_SERVICE, build_gapic_client
    from shared.kernel.config import Settings

    settings = Settings.from_env()
    client = build_gapic_client(settings, ENDPOINT_SERVICE, settings.location)
    parent = f"projects/{settings.project}/locations/{settings.location}"
    names = [endpoint_name(settings.project, settings.location, i) for i in range(count)]

    def create(name: str) -> None:
        client.create_endpoint(
            parent=parent,
            endpoint={"display_name": f"bench-{name.rsplit('/', 1)[1]}"},
            endpoint_id=name.rsplit("/", 1)[1],
            timeout=30,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, names))
    wanted = set(names)
    deadline = time.monotonic() + 120
    while not wanted <= {e["name"] for e in stack.simulator.endpoints()}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the simulator holds not all {count} endpoints after 120 s")
        time.sleep(0.2)
    return names


@dataclass
class Seeded:
    """One deployment as seeded: its request, its record (as stored), its operation."""

    request: Any  # JobRequest
    record: dict[str, Any]
    operation: str = ""


def _state(record: dict[str, Any], now: datetime) -> Any:
    """The machine's state a record holds, read as the repository reads it."""
    from shared.domain.decisions.deploy_model import state_of
    from shared.domain.model.records import DeploymentRecord

    state = state_of(DeploymentRecord.decode(record), now)
    assert state is not None, record
    return state


def _write(
    record: dict[str, Any], state: Any, now: datetime, notices: Iterable[tuple[str, Any]] = ()
) -> dict[str, Any]:
    """``record`` after the repository's write of ``state`` (``projected``'s change)."""
    from shared.domain.decisions.deploy_model import projected
    from shared.domain.model.records import DeploymentRecord

    change = projected(DeploymentRecord.decode(record), state, now, tuple(notices))
    after = {**record, **change.fields}
    for name in change.deletes:
        after.pop(name, None)
    return after


def _notices(action: Any) -> list[tuple[str, Any]]:
    """The notifications a step owes, with its reason (as ``DeploymentRecords.step`` writes
    them)."""
    return [(n, action.reason) for n in action.notices]


def _flushed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` once its outbox is published: ``drop_from_outbox``'s fields."""
    from shared.domain.decisions.submissions import MAX_NOTIFIED

    outbox = list(record.get("outbox") or [])
    if not outbox:
        return record
    notified = [*(record.get("notified") or []), *outbox][-MAX_NOTIFIED:]
    return {**record, "outbox": [], "outboxPending": False, "notified": notified}


def seed(stack: LocalStack, endpoints: list[str], per_endpoint: int) -> dict[str, Any]:
    """``per_endpoint`` Spot deployments on each endpoint, DEPLOYED and serving: the
    simulator holds their models (deployed by the product's backend) and Firestore their
    records, each what the product's steps would have written. Returns the figures of the
    seeding (the phases and the actions the last step took)."""
    from google.cloud import firestore

    from shared.adapters.vertex.endpoints import VertexDeploymentBackend
    from shared.app.services.deploy import outcome_of, serving_settings
    from shared.domain.decisions.deploy_model import (
        new_deployment,
        serving_plan,
        tagged_display_name,
    )
    from shared.domain.model.ids import doc_id
    from shared.domain.request.message import parse_request
    from shared.domain.serving import rule
    from shared.domain.serving.model import ActionKind, CallKind
    from shared.kernel.config import Settings

    settings = Settings.from_env()
    knobs = serving_settings(settings)
    backend = VertexDeploymentBackend(settings)
    by_endpoint: dict[str, list[Seeded]] = {}
    for e, endpoint in enumerate(endpoints):
        group = []
        for k in range(per_endpoint):
            rid = f"dep-{e:04d}-{k}"
            request = parse_request(deploy_body(rid, endpoint, k == 0), {}, f"m-{rid}")
            # accept_deployment: the record with the machine's first state.
            now = datetime.now(UTC)
            spec = request.spec
            plan = serving_plan(spec, request.options)
            name = tagged_display_name(spec["deployedModel"].get("displayName"), rid)
            share = (spec.get("trafficSplit") or {}).get("0", 0)
            state = rule.new_state(name, plan.required, plan.policy, now,
                                   objective=plan.objective, why=plan.why, share=share)  # fmt: skip
            group.append(Seeded(request, new_deployment(request, state, now)))
        by_endpoint[endpoint] = group

    def start(endpoint: str) -> None:
        """The first step of each deployment of ``endpoint`` (as the requests arrive at
        once): its DeployModel claimed on a read of the endpoint, sent, its answer written."""
        observed = backend.read(endpoint)
        for one in by_endpoint[endpoint]:
            now = datetime.now(UTC)
            action = rule.decide(_state(one.record, now), observed, now, knobs, read_at=now)
            call = action.call
            assert action.kind is ActionKind.CALL and call is not None, action
            assert call.kind is CallKind.DEPLOY_SPOT, call
            one.record = _write(one.record, action.state, now, _notices(action))
            one.operation = backend.deploy(one.request, call.target, call.replicas)
            now = datetime.now(UTC)
            answered = rule.answered(_state(one.record, now), call, one.operation)
            assert answered is not None, one.record
            one.record = _write(one.record, answered[0], now, [(n, None) for n in answered[1]])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(start, endpoints))
    operations = {one.operation for group in by_endpoint.values() for one in group}
    deadline = time.monotonic() + 300
    while True:
        done = {o["name"] for o in stack.simulator.operations() if o.get("done")}
        if operations <= done:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(operations - done)} DeployModel operations not done")
        time.sleep(0.5)

    actions: Counter[str] = Counter()

    def deployed(endpoint: str) -> None:
        """The tick's step: each operation read, then the endpoint once, each deployment
        decided on them (DEPLOYED owed), its outbox then flushed."""
        outcomes = {one.operation: outcome_of(backend.operation(one.operation))
                    for one in by_endpoint[endpoint]}  # fmt: skip
        at = datetime.now(UTC)
        observed = backend.read(endpoint)
        for one in by_endpoint[endpoint]:
            now = datetime.now(UTC)
            action = rule.decide(_state(one.record, now), observed, now, knobs,
                                 operation=outcomes[one.operation], read_at=at)  # fmt: skip
            actions[f"{action.kind.value} {action.transition}"] += 1
            # A step that calls Vertex or moves traffic is no steady deployment: stop here.
            assert action.kind in (ActionKind.RECORD, ActionKind.NOTHING), action
            if action.kind is ActionKind.RECORD:
                one.record = _write(one.record, action.state, now, _notices(action))
            one.record = _flushed(one.record)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(deployed, endpoints))

    db = firestore.Client(project=settings.project)
    batch, pending = db.batch(), 0
    states: Counter[str] = Counter()
    for group in by_endpoint.values():
        for one in group:
            record = one.record
            states[f"{record['state']}/{record['serving']['phase']}"] += 1
            ref = db.collection("deployments").document(doc_id(one.request.request_id))
            batch.set(ref, record)
            pending += 1
            if pending >= 400:
                batch.commit()
                batch, pending = db.batch(), 0
    batch.commit()
    models = {
        (one.request.request_id, one.record.get("deployedModelId"))
        for group in by_endpoint.values()
        for one in group
    }
    return {"states": dict(states), "actions": dict(actions), "models": len(models)}


def models_on(stack: LocalStack, endpoints: list[str]) -> dict[str, list[tuple[str, int]]]:
    """Each endpoint's Spot models and their running nodes, as the simulator serves them."""
    wanted = set(endpoints)
    out: dict[str, list[tuple[str, int]]] = {e: [] for e in endpoints}
    for model in stack.simulator.serving().get("deployedModels") or []:
        if model.get("endpoint") in wanted:
            out[model["endpoint"]].append((str(model["deployedModelId"]), int(model["available"])))
    return out


def lose_spot(stack: LocalStack, endpoints: list[str]) -> int:
    """Every running node of every Spot model on ``endpoints`` reclaimed now; returns how
    many nodes. The simulator's clock is frozen first: at the stack's time factor a restart
    try comes a wall second later and would find capacity, so the tick would see no loss."""
    stack.simulator.set_time_factor(0)
    nodes = 0
    for endpoint, models in models_on(stack, endpoints).items():
        for model_id, running in models:
            if running:
                stack.simulator.reclaim_nodes(endpoint, model_id, running)
                nodes += running
    return nodes


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def vertex_others(vertex: dict[str, int]) -> dict[str, int]:
    """The Vertex calls of a tick besides its GetEndpoint reads.

    >>> vertex_others({"GetEndpoint": 200, "ListCustomJobs": 1, "DeployModel": 2})
    {'DeployModel': 2, 'ListCustomJobs': 1}
    """
    return {m: c for m, c in sorted(vertex.items()) if m != "GetEndpoint"}


def print_tick(label: str, plain: dict[str, Any], traced: dict[str, Any] | None = None) -> None:
    from benchmarks.scale import fmt

    memory = (
        f"peak RSS {plain['rss_peak_mib']:.1f} MiB (before the tick {plain['rss_before_mib']:.1f})"
    )
    if traced and traced.get("traced_peak_mib") is not None:
        memory += f", tracemalloc peak {traced['traced_peak_mib']:.1f} MiB"
    print(f"  {label}: wall {plain['wall']:.1f} s, cpu {plain['cpu']:.1f} s, {memory}")
    print(f"    reads {plain['reads']} (documents returned {plain['documents']}), writes "
          f"{plain['writes']}, records changed {plain['changed']}; Firestore RPCs "
          f"{fmt(plain['rpcs'])}")  # fmt: skip
    vertex = plain["vertex"]
    print(f"    Vertex: GetEndpoint {vertex.get('GetEndpoint', 0)}; besides: "
          f"{fmt(vertex_others(vertex))}")  # fmt: skip


def steady_checks(plain: dict[str, Any], endpoints: int) -> list[bool]:
    """The steady tick's figures against issue 41's targets, printed."""
    gets = plain["vertex"].get("GetEndpoint", 0)
    checks = []
    for what, ok, text in (
        ("GetEndpoint calls", gets == endpoints, f"{gets} = {endpoints} (one per endpoint)"),
        ("Firestore reads", plain["reads"] <= READS_TARGET, f"{plain['reads']} <= {READS_TARGET}"),
        ("wall", plain["wall"] < WALL_SECONDS, f"{plain['wall']:.1f} s < {WALL_SECONDS:.0f}"),
    ):
        checks.append(ok)
        print(f"    target {what}: {text}: {verdict(ok)}")
    return checks


def measure(endpoints: int, per_endpoint: int = PER_ENDPOINT) -> list[bool]:
    from benchmarks.scale import quiet_stack

    count = endpoints * per_endpoint
    # Admission off, as production runs without a queue file (section 5 leaves its own set).
    queues = os.environ.pop("FLEXJOBS_QUEUES", None)
    try:
        return _measure(endpoints, per_endpoint, count, quiet_stack())
    finally:
        if queues is not None:
            os.environ["FLEXJOBS_QUEUES"] = queues


def _measure(endpoints: int, per_endpoint: int, count: int, config: Any) -> list[bool]:
    with LocalStack(config) as stack:
        stack.apply_env()
        t0 = time.perf_counter()
        names = create_endpoints(stack, endpoints)
        made = time.perf_counter() - t0
        seeded = seed(stack, names, per_endpoint)
        took = time.perf_counter() - t0
        served = [m for ms in models_on(stack, names).values() for m in ms]
        print(f"  seeded {count} Spot deployments on {endpoints} endpoints in {took:.0f} s "
              f"(endpoints {made:.0f} s): records {seeded['states']}; the last seeding step: "
              f"{seeded['actions']}; the simulator serves {len(served)} Spot models, "
              f"{sum(n for _, n in served)} nodes up", flush=True)  # fmt: skip
        return run_ticks(stack, names)


def run_ticks(stack: LocalStack, names: list[str]) -> list[bool]:
    """The settling tick, a steady tick (plain and traced) and the Spot-loss tick, printed;
    the steady tick's checks."""
    from benchmarks.scale import run_tick, summary

    settle = run_tick(stack, traced=False)
    print(f"  settling tick (whatever the seeding left): {summary(settle)}; records changed "
          f"{settle['changed']}", flush=True)  # fmt: skip
    steady = run_tick(stack, traced=False)
    traced = run_tick(stack, traced=True)
    print_tick("steady tick", steady, traced)
    checks = steady_checks(steady, len(names))
    if steady["changed"]:
        print(f"    the steady tick still changed {steady['changed']} records (expected 0)")
    lost = spot_loss_endpoints(names)
    nodes = lose_spot(stack, lost)
    spot = run_tick(stack, traced=False)
    print_tick(f"{len(lost)} endpoints ({SPOT_LOSS_SHARE:.0%}) lost Spot, {nodes} nodes", spot)
    return checks
