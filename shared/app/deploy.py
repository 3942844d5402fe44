"""Deployment services: deploy a model on Spot VMs exactly once, and follow the operation.

:func:`submit_deployment` is what intake runs for a ``deployModel`` request (the request is
already validated). It mirrors the jobs' exactly-once steps:

1. **Claim** ``deployments/{id}`` by ``create()`` (a duplicate delivery is acknowledged; a live
   claim held by another delivery raises so Pub/Sub redelivers later).
2. **Look up before deploying**: a deployed model on the endpoint whose display name carries the
   request's tag was deployed by a delivery that died before recording it; it is adopted.
3. **Deploy** (never retried in-process) and record the operation: DEPLOYING.

These steps run in :func:`shared.app.steps.exactly_once.create_once`, like every other creation.
:func:`refresh_deployments` is for the scheduler tick: it reads the operation of every
DEPLOYING record and moves the record to DEPLOYED or FAILED, and deploys parked ones again.
"""

from __future__ import annotations

import math
from collections import defaultdict

from shared.app.context import Deployments
from shared.app.ports import Claimed
from shared.app.steps.exactly_once import Creation, Outcome, create_once
from shared.app.steps.sweep import Sweep
from shared.domain.model.records import DeploymentRecord
from shared.domain.request.message import JobRequest
from shared.domain.serving.model import ActionKind, ObservedEndpoint, ServingSettings
from shared.kernel.errors import BackendRejected, QuotaExhausted
from shared.kernel.logs import get_logger, request_context

log = get_logger("deployments")


def submit_deployment(request: JobRequest, ports: Deployments) -> Outcome:
    """Start the deployment of a validated ``deployModel`` request exactly once.

    The steps and their failures are :func:`shared.app.steps.exactly_once.create_once`'s; the key
    is the tag on the deployed model's display name, looked up on the endpoint.

    Raises:
        TransientError: a fault that may pass, or a live claim held elsewhere: redeliver.
    """
    request_id = request.request_id
    endpoint = str(request.spec["endpoint"])
    store, backend, clock = ports.store, ports.backend, ports.clock

    def claim() -> Claimed | None:
        taken = store.claim(request, clock(), ports.settings.claim_ttl_seconds)
        if taken.token is None:
            record = DeploymentRecord.decode(taken.record or {})
            fields = {"state": record.state.value, "operation": record.operation}
            log.info("duplicate delivery: already deploying", extra={"fields": fields})
            return None
        # Never fresh, so always looked up: a model may sit on the endpoint under its tag with
        # no record (deployed by hand, or its record deleted), and deployments are few.
        return Claimed(token=taken.token)

    def find() -> tuple[bool, str] | None:
        existing = backend.find(endpoint, request_id)
        return None if existing is None else (True, existing)

    def create() -> tuple[bool, str]:
        return False, backend.deploy(request)

    def record(token: str, made: tuple[bool, str], adopted: bool) -> Outcome:
        _, value = made
        if adopted:
            store.record_adopted(request_id, value, clock())
            log.info("deployment adopted", extra={"fields": {"deployedModelId": value}})
            return Outcome.ADOPTED
        store.record_operation(request_id, value, clock())
        log.info("deployment started", extra={"fields": {"operation": value, "spot": True}})
        return Outcome.SUBMITTED

    def release(token: str) -> None:
        store.release(request_id, token, clock())

    def refused(token: str, exc: BackendRejected) -> Outcome:
        # The endpoint does not exist, or Vertex refused the model: never going to work.
        store.record_failure(request_id, str(exc), clock())
        return Outcome.FAILED

    def parked(token: str, exc: QuotaExhausted) -> Outcome:
        current = store.get(request_id)
        delay = ports.retry.backoff.seconds((current.quota_retries if current else 0) + 1)
        store.park(request_id, clock(), delay, str(exc))
        return Outcome.PARKED

    with request_context(request_id):
        return create_once(Creation(claim, find, create, record, release, refused, parked))


def refresh_deployments(ports: Deployments, sweep: Sweep | None = None) -> int:
    """The tick's share: follow every DEPLOYING operation, deploy every parked request again.

    Returns how many records changed. Each record is isolated (see :class:`Sweep`): a failed
    read of one operation is logged and left for the next tick (a control-plane error never
    changes a record), so one bad record cannot stall the others.
    """
    sweep = sweep or Sweep("deployments")
    changed = 0
    for record in ports.store.deploying():
        changed += sweep.each(record.request_id, "follow deployment", _follow, ports, record) or 0
    for record in ports.store.parked_due(ports.clock()):
        outcome = sweep.each(record.request_id, "deploy parked", _redeploy, ports, record)
        changed += outcome in (Outcome.SUBMITTED, Outcome.ADOPTED, Outcome.FAILED)
    changed += follow_serving(ports, sweep)
    return changed


#: Hedging is off: the rule follows and records serving, and never reaches HEDGE, because its
#: grace period never ends. No fallback exists without a HEDGE, so SHIFT, GROW and RESTORE
#: (which need one) cannot come either. Actuating hedges is issue 24's next step.
FOLLOW_ONLY = ServingSettings(grace_seconds=math.inf)


def follow_serving(ports: Deployments, sweep: Sweep) -> int:
    """Follow every DEPLOYED (Spot) deployment's serving: one ``GetEndpoint`` per endpoint,
    however many deployments share it, then the rule for each deployment on that read.

    Returns how many records were written. Each endpoint's read is isolated, and so is each
    deployment's write: a failed read is logged and changes nothing (the next tick reads
    again), and one bad record does not stop the others.
    """
    by_endpoint: dict[str, list[DeploymentRecord]] = defaultdict(list)
    for record in ports.store.deployed():
        endpoint = record.request.get("endpoint")
        if isinstance(endpoint, str) and endpoint and record.deployed_model_id:
            by_endpoint[endpoint].append(record)
    written = 0
    for endpoint, records in sorted(by_endpoint.items()):
        observed = sweep.each(None, "read endpoint", ports.backend.read, endpoint)
        if observed is None:
            continue
        for record in records:
            written += (
                sweep.each(record.request_id, "follow serving", _serve, ports, record, observed)
                or 0
            )
    return written


def _serve(ports: Deployments, record: DeploymentRecord, observed: ObservedEndpoint) -> int:
    action = ports.store.record_serving(record.request_id, observed, ports.clock(), FOLLOW_ONLY)
    if action is None or action.kind is ActionKind.NOTHING:
        return 0
    fields = {"deployedModelId": record.deployed_model_id, "action": action.kind.value}
    fields["phase"] = action.state.phase.value
    if action.kind not in (ActionKind.RECORD, ActionKind.PAUSE):
        # Unreachable with FOLLOW_ONLY; said out loud, never acted on, if the settings change.
        log.warning(
            f"hedging is off: {action.kind} not sent ({action.reason})", extra={"fields": fields}
        )
        return 0
    log.info(f"serving recorded: {action.reason}", extra={"fields": fields})
    return 1


def _redeploy(ports: Deployments, record: DeploymentRecord) -> Outcome:
    request = JobRequest(record.request_id, str(record.kind), record.request)
    return submit_deployment(request, ports)


def _follow(ports: Deployments, record: DeploymentRecord) -> int:
    operation = record.operation
    if not operation:
        return 0  # DEPLOYING always has its operation; a hand-edited record waits
    status = ports.backend.operation(operation)
    state = ports.store.apply_operation(record.request_id, status, ports.clock())
    if state is None:
        return 0
    fields = {"operation": operation, "deployedModelId": status.deployed_model_id}
    log.info(f"deployment is {state}", extra={"fields": fields})
    return 1
