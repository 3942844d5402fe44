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

from collections import defaultdict

from shared.app.context import Deployments
from shared.app.ports import Claimed
from shared.app.steps.exactly_once import Creation, Outcome, create_once
from shared.app.steps.sweep import Sweep
from shared.domain.model.records import DeploymentRecord
from shared.domain.model.states import DeploymentState
from shared.domain.request.message import JobRequest
from shared.domain.serving.model import (
    ActionKind,
    ObservedEndpoint,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.kernel.config import Settings
from shared.kernel.errors import (
    BackendRejected,
    OutcomeUnknown,
    QuotaExhausted,
    SubmissionInProgress,
)
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


def cancel_deployment(request_id: str, ports: Deployments) -> Outcome:
    """A cancel of a deployment: take it down cleanly. The cancel only asks (a flag on the
    record); the tick does it from its fresh reads, one step at a time: the deployment's
    traffic to the endpoint's other models, the fallback undeployed, then the Spot model,
    then UNDEPLOYED with its notification (:func:`shared.domain.serving.rule.begin_undeploy`).

    A deployment that never started deploying is UNDEPLOYED at once, unless a model under its
    tag is on the endpoint (a delivery died after its DeployModel): that one is adopted, then
    taken down like any other.

    Raises:
        SubmissionInProgress: a live claim holds it (a DeployModel may be under way): the
            cancel is redelivered once that delivery recorded what it did.
    """
    store, now = ports.store, ports.clock()
    with request_context(request_id):
        record = store.get(request_id)
        if record is None:
            return Outcome.DUPLICATE
        if record.state is DeploymentState.ACCEPTED:
            if record.claim is not None and record.claim.live(now):
                raise SubmissionInProgress("a deployment is in flight; the cancel follows it")
            endpoint = str(record.request.get("endpoint") or "")
            found = ports.backend.find(endpoint, request_id) if endpoint else None
            if found is not None:
                store.record_adopted(request_id, found, now)
            elif store.undeployed_before_deploying(request_id, now):
                log.info("deployment cancelled before it was deployed")
                flush_deployment_outbox(ports, request_id)
                return Outcome.CANCELLED
        if store.ask_undeploy(request_id, now) is None:
            log.info(f"cancel ignored: the deployment is {record.state.value}")
            return Outcome.DUPLICATE
        log.info("undeploy requested: the tick takes the deployment down")
        return Outcome.CANCELLED


def resume_deployment(request_id: str, ports: Deployments) -> Outcome:
    """``{"resume": id}``: follow a deployment paused by a hand edit again; the tick takes
    the endpoint as it is then as the baseline (:func:`shared.domain.serving.rule.resume`).
    A deployment that is not DEPLOYED, or not paused, is left as it is."""
    with request_context(request_id):
        if ports.store.ask_resume(request_id, ports.clock()) is None:
            log.info("resume ignored: the deployment is not deployed")
            return Outcome.DUPLICATE
        log.info("resume requested: the tick follows the deployment again")
        return Outcome.SUBMITTED


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
    for record in ports.store.with_outbox():
        sweep.each(record.request_id, "deployment outbox", _flush, ports, record)
    return changed


def serving_settings(settings: Settings) -> ServingSettings:
    """The rule's grace and hold periods, as configured (FLEXJOBS_SERVING_*_SECONDS)."""
    return ServingSettings(
        settings.serving_grace_seconds, settings.serving_hold_seconds, settings.max_replicas
    )


def follow_serving(ports: Deployments, sweep: Sweep) -> int:
    """Follow every DEPLOYED (Spot) deployment's serving, and act on it: one ``GetEndpoint``
    per endpoint, however many deployments share it, then the rule for each deployment on
    that read, and the one call its action names.

    Calls in flight whose operation is known are read first (one ``GetOperation`` each), so
    the endpoint read that follows is at least as new as what they say. Returns how many
    records were written. Each operation's read, each endpoint's read and each deployment's
    step is isolated: a failure is logged and changes nothing (the next tick reads again),
    and one bad record does not stop the others.
    """
    records = ports.store.deployed()
    written = 0
    for record in records:
        state = _state_of(record)
        if state is not None and state.operation:
            step = "follow serving call"
            written += sweep.each(record.request_id, step, _follow_call, ports, record) or 0
    by_endpoint: dict[str, list[DeploymentRecord]] = defaultdict(list)
    for record in records:
        endpoint = record.request.get("endpoint")
        if isinstance(endpoint, str) and endpoint and record.deployed_model_id:
            by_endpoint[endpoint].append(record)
    settings = serving_settings(ports.settings)
    for endpoint, group in sorted(by_endpoint.items()):
        observed = sweep.each(None, "read endpoint", ports.backend.read, endpoint)
        if observed is None:
            continue
        for record in group:
            step = "follow serving"
            written += (
                sweep.each(record.request_id, step, _serve, ports, record, observed, settings) or 0
            )
    return written


def _state_of(record: DeploymentRecord) -> ServingState | None:
    return ServingState.decode(record.serving) if record.serving else None


def _follow_call(ports: Deployments, record: DeploymentRecord) -> int:
    state = _state_of(record)
    if state is None or not state.operation:
        return 0
    status = ports.backend.operation(state.operation)
    if not status.done:
        return 0
    after = ports.store.record_finished(record.request_id, status, ports.clock())
    if after is None:
        return 0
    fields = {"operation": state.operation, "call": state.operation_call}
    fields["error"] = status.error_message or None
    log.info(f"{state.operation_call} done", extra={"fields": fields})
    return 1


def _serve(
    ports: Deployments,
    record: DeploymentRecord,
    observed: ObservedEndpoint,
    settings: ServingSettings,
) -> int:
    rid = record.request_id
    decided = ports.store.record_serving(rid, observed, ports.clock(), settings)
    if decided is None or decided[1].kind is ActionKind.NOTHING:
        return 0
    before, action = decided
    fields = {"deployedModelId": record.deployed_model_id, "action": action.kind.value}
    fields["phase"] = action.state.phase.value
    if action.kind in (ActionKind.RECORD, ActionKind.PAUSE):
        log.info(f"serving recorded: {action.reason}", extra={"fields": fields})
    elif action.split is not None and before is not None:
        _move_traffic(ports, rid, observed, before, action)
        log.info(f"traffic moved: {action.reason}", extra={"fields": fields})
    elif action.kind is ActionKind.HEDGE and before is not None:
        _hedge(ports, record, observed, before, action)
    else:
        _long_call(ports, rid, observed.name, before, action)
        log.info(f"serving call sent: {action.reason}", extra={"fields": fields})
    flush_deployment_outbox(ports, rid)
    return 1


def _move_traffic(
    ports: Deployments,
    request_id: str,
    observed: ObservedEndpoint,
    before: ServingState,
    action: ServingAction,
) -> None:
    """A SHIFT, or RESTORE's first step: ``UpdateEndpoint`` of the split with the read's etag,
    then the state. A refused or failed update raises, and nothing was written: the next
    tick decides again from a fresh read."""
    assert action.split is not None
    ports.backend.set_traffic(observed.name, action.split, observed.etag)
    # Vertex took it: a record that moved on meanwhile (another tick) keeps its newer state,
    # and the rule takes a split it wrote but did not record for its own (never a hand edit).
    ports.store.record_moved(request_id, before, action.state, ports.clock())


def _hedge(
    ports: Deployments,
    record: DeploymentRecord,
    observed: ObservedEndpoint,
    before: ServingState,
    action: ServingAction,
) -> Outcome:
    """Deploy the on-demand fallback exactly once, through the one exactly-once routine.

    Its claim is the state the rule decided (``pending`` DeployModel, written by
    :meth:`record_serving` in the transaction that decided it, so a second tick sees it and
    decides nothing); its key is the fallback's display name (the deployment's tag, then
    :data:`~shared.domain.serving.rule.FALLBACK_SUFFIX`), looked up on the read in hand.
    """
    rid, endpoint, store, claimed = record.request_id, observed.name, ports.store, action.state
    fallback = action.deploy
    at = claimed.operation_at
    assert fallback is not None and at is not None

    def claim() -> Claimed:
        return Claimed(token=at.isoformat())

    def find() -> str | None:
        found = next((m for m in observed.models if m.display_name == fallback.display_name), None)
        return None if found is None or found.spot else found.id

    def create() -> str:
        template = record.request.get("deployedModel")
        return ports.backend.deploy_fallback(
            endpoint, fallback, template if isinstance(template, dict) else None
        )

    def recorded(token: str, made: str, adopted: bool) -> Outcome:
        now = ports.clock()
        if adopted:
            store.record_ended(rid, at, now, deployed_model_id=made)
            return Outcome.ADOPTED
        store.record_started(rid, at, made, now)
        fields = {"operation": made, "replicas": fallback.replicas, "spot": False}
        log.info(f"hedge sent: {action.reason}", extra={"fields": fields})
        return Outcome.SUBMITTED

    def release(token: str) -> None:
        store.record_released(rid, claimed, before, ports.clock())

    def refused(token: str, exc: BackendRejected) -> Outcome:
        store.record_ended(rid, at, ports.clock(), error=str(exc))
        return Outcome.FAILED

    def parked(token: str, exc: QuotaExhausted) -> Outcome:
        # On-demand quota is used up: the hedge failed; a new grace period runs before the
        # next, so a refused hedge is not resent every minute.
        store.record_ended(rid, at, ports.clock(), error=str(exc))
        return Outcome.PARKED

    return create_once(Creation(claim, find, create, recorded, release, refused, parked))


def _long_call(
    ports: Deployments,
    request_id: str,
    endpoint: str,
    before: ServingState | None,
    action: ServingAction,
) -> None:
    """GROW's MutateDeployedModel or RESTORE's UndeployModel, claimed in the state already
    written: Vertex's answer names the operation the next ticks follow.

    Refused (for good, or for quota): nothing started, the claim is dropped and the next
    read decides again. Outcome unknown (a timeout): the claim is kept, so the call is not
    sent twice, until the read shows its effect or the rule gives it up. Any other fault:
    the call never reached Vertex, and the record goes back to the state before the claim.
    """
    claimed = action.state
    at = claimed.operation_at
    assert at is not None and before is not None
    deployed = claimed.fallback_id or ""
    try:
        if action.undeploy:
            operation = ports.backend.undeploy(endpoint, action.undeploy)
        else:
            operation = ports.backend.resize(endpoint, deployed, action.resize or 0)
    except (BackendRejected, QuotaExhausted) as exc:
        # Recorded on the state (its history says why), and tried again from the next read.
        ports.store.record_ended(request_id, at, ports.clock(), error=str(exc))
        log.error(f"serving call refused: {exc}", extra={"fields": {"action": action.kind}})
        return
    except OutcomeUnknown:
        raise
    except Exception:
        ports.store.record_released(request_id, claimed, before, ports.clock())
        raise
    ports.store.record_started(request_id, at, operation, ports.clock())


def flush_deployment_outbox(ports: Deployments, request_id: str) -> int:
    """Publish a deployment's pending notifications, then forget them (moved to
    ``notified``); returns how many were published. A failed publish raises and keeps the
    rest in the outbox: the tick publishes every pending outbox again."""
    return _flush(ports, ports.store.get(request_id))


def _flush(ports: Deployments, record: DeploymentRecord | None) -> int:
    pending = list(record.outbox) if record is not None else []
    for message in pending:
        ports.notifier.notify(message)
    if record is not None and pending:
        ports.store.drop_from_outbox(record.request_id, pending)
    return len(pending)


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
    flush_deployment_outbox(ports, record.request_id)
    return 1
