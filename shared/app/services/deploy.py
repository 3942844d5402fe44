"""Deployment services: a Spot deployment's state machine driven by its deliveries and the tick.

A deployment is one record whose ``serving`` value is its whole state
(:mod:`shared.domain.serving.rule`). Every step is the same three moves:

1. **Read** the endpoint (``GetEndpoint``), and the operation of the call in flight when it
   has one (``GetOperation``, read first, so the endpoint read is at least as new as it).
2. **Decide** in one transaction on the record as stored (:meth:`DeploymentRecords.step`):
   the rule's next state is written, a long-running call claimed in it before it is sent, so
   two deliveries at once decide on each other's writes and never send a call twice.
3. **Act**: the one call the decision names. Its outcome is written back as an input
   (answered, refused, lost, released); a traffic move (synchronous) is written once Vertex
   took it.

:func:`submit_deployment` is what intake runs for a ``deployModel`` request (create the record,
then one step), :func:`cancel_deployment` and :func:`resume_deployment` record the owner's
intent (then one step), and :func:`refresh_deployments` is the tick's: one step of every
deployment it follows, one ``GetEndpoint`` per endpoint however many share it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.app.commands import Outcome
from shared.app.context import Deployments
from shared.app.repository.deployments import Stepped, serving_state
from shared.app.steps.followed import followed_deployments, save_followed
from shared.app.steps.sweep import Sweep
from shared.domain.decisions.deploy_model import (
    OperationStatus,
    serving_plan,
    tagged_display_name,
)
from shared.domain.model.records import DeploymentRecord
from shared.domain.policy.serving_knobs import OBJECTIVE_FIELD
from shared.domain.request.message import JobRequest
from shared.domain.serving import rule
from shared.domain.serving.model import (
    ActionKind,
    CallKind,
    Intent,
    ObservedEndpoint,
    Phase,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.objective import PolicyTable
from shared.domain.serving.rule import OperationOutcome, asks_running_deploys
from shared.kernel.config import Settings
from shared.kernel.errors import (
    BackendRejected,
    EndpointGone,
    OutcomeUnknown,
    QuotaExhausted,
)
from shared.kernel.logs import get_logger, request_context

log = get_logger("deployments")


def serving_settings(settings: Settings) -> ServingSettings:
    """The machine's grace and hold periods, as configured (FLEXJOBS_SERVING_*_SECONDS)."""
    return ServingSettings(
        settings.serving_grace_seconds, settings.serving_hold_seconds, settings.max_replicas
    )


def accept_deployment(request: JobRequest, ports: Deployments) -> bool:
    """Record a validated ``deployModel`` request exactly once: its record, created only if
    none exists, holds its machine's first state (intent serve, nothing deployed). False for
    a duplicate delivery (the record exists: the tick follows it).

    Raises:
        TransientError: the record could not be written: redeliver.
    """
    now = ports.clock()
    name = tagged_display_name(
        (request.spec.get("deployedModel") or {}).get("displayName"), request.request_id
    )
    plan = serving_plan(request.spec, request.options, _table(ports, request.options))
    split = request.spec.get("trafficSplit")
    share = split.get("0") if isinstance(split, dict) else None
    state = rule.new_state(
        name,
        plan.required,
        plan.policy,
        now,
        objective=plan.objective,
        why=plan.why,
        share=share if isinstance(share, int) and not isinstance(share, bool) else 0,
    )
    log.info(
        f"serving plan: {plan.policy.label(plan.required)} ({plan.why})",
        extra={"fields": {"requestId": request.request_id}},
    )
    return ports.records.create(request, state, now)


def _table(ports: Deployments, options: dict[str, object]) -> PolicyTable | None:
    """The measured policy table, read only when objective mode needs it."""
    if OBJECTIVE_FIELD not in options or ports.policy_table is None:
        return None
    return ports.policy_table()


def start_deployment(request_id: str, ports: Deployments) -> Outcome:
    """The first step of a deployment just accepted: its Spot model's DeployModel, claimed,
    then sent.

    Raises:
        TransientError: the endpoint could not be read, or the record written (the machine,
            recorded, is followed by the tick whatever this delivery does).
    """
    with request_context(request_id):
        log.info("deployment accepted", extra={"fields": {"spot": True}})
        return _outcome(advance(ports, request_id))


def _outcome(stepped: Stepped | None) -> Outcome:
    """What became of a request's first step: its Spot model's DeployModel sent (or in
    doubt), parked for quota, or refused for good."""
    if stepped is None:
        return Outcome.SUBMITTED
    state = stepped.action.state
    if state.phase is Phase.FAILED:
        return Outcome.FAILED
    if state.retry_at is not None and state.call is None:
        return Outcome.PARKED
    return Outcome.SUBMITTED


def cancel_deployment(request_id: str, ports: Deployments) -> Outcome:
    """A cancel of a deployment: its intent becomes undeploy (durable: no failed call, no
    phase takes it back), then one step takes it down (the tick goes on from there): its
    traffic to the endpoint's other models that serve, then its models one at a time, the
    Spot model last; UNDEPLOYED with its notification once none is on the endpoint. A call in
    flight (its DeployModel) is waited for first, so nothing it makes is left behind."""
    with request_context(request_id):
        if ports.records.tell(request_id, Intent.UNDEPLOY, ports.clock()) is None:
            log.info("cancel ignored: the deployment has ended, or was asked already")
            return Outcome.DUPLICATE
        log.info("undeploy requested")
        # The intent is recorded: a step that fails now is the tick's to take again.
        Sweep("cancel").each(request_id, "undeploy step", advance, ports, request_id)
        return Outcome.CANCELLED


def resume_deployment(request_id: str, ports: Deployments) -> Outcome:
    """``{"resume": id}``: follow a deployment paused by a hand edit again, from its endpoint
    as it is at the next step. A deployment that has ended is left as it is."""
    with request_context(request_id):
        if ports.records.tell(request_id, Intent.RESUME, ports.clock()) is None:
            log.info("resume ignored: the deployment is not followed")
            return Outcome.DUPLICATE
        log.info("resume requested")
        Sweep("resume").each(request_id, "resume step", advance, ports, request_id)
        return Outcome.SUBMITTED


def advance(
    ports: Deployments,
    request_id: str,
    seen: Seen | None = None,
    *,
    leaving: frozenset[str] | None = None,
) -> Stepped | None:
    """One step of one deployment: its call's operation read, then its endpoint (unless
    ``seen`` holds both: the tick reads each endpoint once for all its deployments), the
    decision, the call it names. ``leaving``: the models other deployments of the endpoint
    are taking away (None: read from their records here). Returns the step decided (None: no
    record).

    Raises:
        TransientError: a read or a write failed (the state is as it was: a control-plane
            error never moves a deployment).
    """
    record = ports.records.get(request_id)
    now = ports.clock()
    state = serving_state(record, now) if record is not None else None
    if record is None or state is None or state.phase.ended:
        return None
    endpoint = str(record.request.get("endpoint") or "")
    if seen is None:
        operation = _operation(ports, state)
        running = _running_deploys(ports, endpoint) if asks_running_deploys(state, now) else None
        observed, at = _read_endpoint_now(ports, endpoint)
        seen = Seen(_with_running(observed, running), at, {request_id: operation})
    if leaving is None:
        # Read after the endpoint: an undeploy a neighbour claimed before that read is known.
        neighbours = [r for r in ports.records.on_endpoint(endpoint) if r.request_id != request_id]
        leaving = _leaving(neighbours, ports.clock())
    stepped = ports.records.step(
        request_id,
        seen.observed,
        ports.clock(),
        serving_settings(ports.settings),
        operation=seen.operations.get(request_id),
        leaving=leaving,
        read_at=seen.at,
    )
    if stepped is None:
        return None
    _act(ports, stepped, seen.observed)
    flush_deployment_outbox(ports, request_id)
    return stepped


@dataclass(frozen=True)
class Seen:
    """One read of an endpoint, when it was taken, and the operations of its deployments'
    calls in flight read just before it (so the endpoint read is at least as new)."""

    observed: ObservedEndpoint
    at: datetime
    operations: dict[str, OperationOutcome | None]


def _read_endpoint_now(ports: Deployments, endpoint: str) -> tuple[ObservedEndpoint, datetime]:
    at = ports.clock()
    return read_endpoint(ports, endpoint), at


def read_endpoint(ports: Deployments, endpoint: str) -> ObservedEndpoint:
    """One ``GetEndpoint``; an endpoint that no longer exists reads as an empty one (every
    model of it is gone with it)."""
    try:
        return ports.backend.read(endpoint)
    except EndpointGone:
        return ObservedEndpoint(endpoint, (), {})


def _running_deploys(ports: Deployments, endpoint: str) -> tuple[datetime, ...] | None:
    """The endpoint's DeployModel operations still running, listed before the endpoint is
    read (so a DeployModel not listed as running, and not on the read, never lands)."""
    return ports.backend.running_deploys(endpoint)


def _with_running(
    observed: ObservedEndpoint, running: tuple[datetime, ...] | None
) -> ObservedEndpoint:
    return observed if running is None else replace(observed, deploying=running)


def _operation(ports: Deployments, state: ServingState) -> OperationOutcome | None:
    """The operation of the call in flight, or of a DeployModel a cancel set aside."""
    name = _operation_name(state)
    return outcome_of(ports.backend.operation(name)) if name else None


def _operation_name(state: ServingState) -> str | None:
    call = state.call or state.landing
    return call.operation if call is not None else None


def outcome_of(status: OperationStatus) -> OperationOutcome:
    error = status.error_message or (f"code {status.error_code}" if status.error_code else None)
    return OperationOutcome(status.name, status.done, status.deployed_model_id, error)


def _act(ports: Deployments, stepped: Stepped, observed: ObservedEndpoint) -> None:
    """The one call a step names, and its outcome written back."""
    action, record = stepped.action, stepped.record
    rid = record.request_id
    fields = {"transition": action.transition, "phase": action.state.phase.value}
    if action.kind is ActionKind.TRAFFIC:
        assert action.split is not None
        made_at = ports.backend.set_traffic(observed.name, action.split, observed.etag)
        # Vertex took it: a record that moved on meanwhile keeps its newer state.
        ports.records.moved(rid, stepped, ports.clock(), made_at)
        log.info(f"traffic moved: {action.reason}", extra={"fields": fields})
        return
    if action.kind is not ActionKind.CALL:
        if action.kind is ActionKind.RECORD:
            log.info(f"deployment recorded: {action.reason}", extra={"fields": fields})
        return
    call = action.call
    assert call is not None
    fields["call"] = call.kind.value
    try:
        operation = _send(ports, record, observed, action)
    except (BackendRejected, QuotaExhausted) as exc:
        retry_at = None
        if isinstance(exc, QuotaExhausted):
            retry_at = ports.clock() + timedelta(seconds=ports.retry.backoff.seconds(1))
        ports.records.refused(rid, call, str(exc), ports.clock(), retry_at=retry_at)
        log.warning(f"{call.kind.value} refused: {exc}", extra={"fields": fields})
        return
    except OutcomeUnknown:
        # It may have happened: the claim stays, and every read looks for its effect.
        ports.records.lost(rid, call, ports.clock())
        log.warning(f"{call.kind.value} outcome unknown; its claim is kept")
        return
    except Exception:
        # It never reached Vertex: the claim goes, and the next step decides again.
        ports.records.released(rid, call, ports.clock())
        raise
    ports.records.answered(rid, call, operation, ports.clock())
    log.info(
        f"{call.kind.value} sent: {action.reason}",
        extra={"fields": {**fields, "operation": operation}},
    )


def _send(
    ports: Deployments, record: DeploymentRecord, observed: ObservedEndpoint, action: ServingAction
) -> str:
    """Send the long-running call ``action`` claimed; its operation's name."""
    call = action.call
    assert call is not None
    endpoint = observed.name
    if call.kind is CallKind.DEPLOY_SPOT:
        request = JobRequest(record.request_id, str(record.kind), record.request)
        return ports.backend.deploy(request, call.target, call.replicas)
    if call.kind in (CallKind.DEPLOY_FLOOR, CallKind.DEPLOY_FALLBACK):
        template = record.request.get("deployedModel")
        return ports.backend.deploy_on_demand(
            endpoint, call.target, call.replicas, template if isinstance(template, dict) else {}
        )
    if call.kind is CallKind.MUTATE:
        return ports.backend.resize(endpoint, call.target, call.replicas)
    return ports.backend.undeploy(endpoint, call.target)


def refresh_deployments(ports: Deployments, sweep: Sweep | None = None) -> int:
    """The tick's share: one step of every deployment it follows (not UNDEPLOYED nor FAILED),
    one ``GetEndpoint`` per endpoint however many deployments share it, then every pending
    outbox. Returns how many records were written.

    The deployments come from the followed list (:mod:`shared.app.steps.followed`): each is
    decided first on its listed state and the endpoint's read, a pure decision, and one that
    would do nothing costs no read of its record. Any other is stepped as a delivery steps it
    (its record read, its decision taken again in one transaction), so a listed state a
    write made stale meanwhile delays a step by a tick, never makes one.

    Each endpoint's read and each deployment's step is isolated: a failure is logged and
    changes nothing (the next tick reads again), and one bad record does not stop the others.
    """
    sweep = sweep or Sweep("deployments")
    written = 0
    now = ports.clock()
    seen_list = followed_deployments(ports.records.deployment_store, now)
    by_endpoint: dict[str, list[DeploymentRecord]] = defaultdict(list)
    for record in seen_list.records:
        endpoint = record.request.get("endpoint")
        if isinstance(endpoint, str) and endpoint:
            by_endpoint[endpoint].append(record)
    settings = serving_settings(ports.settings)
    stepped_count = 0
    for endpoint, group in sorted(by_endpoint.items()):
        operations: dict[str, OperationOutcome | None] = {}
        asks = False
        for record in group:
            state = serving_state(record, now)
            if state is not None and _operation_name(state):
                rid = record.request_id
                operations[rid] = sweep.each(rid, "read operation", _operation, ports, state)
            asks = asks or (state is not None and asks_running_deploys(state, now))
        running = (
            sweep.each(None, "list running deploys", _running_deploys, ports, endpoint)
            if asks
            else None
        )
        read = sweep.each(None, "read endpoint", _read_endpoint_now, ports, endpoint)
        if read is None:
            continue
        seen = Seen(_with_running(read[0], running), read[1], operations)
        leaving = _leaving(group, now)
        moved = False
        for record in group:
            rid = record.request_id
            if moved:
                # A deployment stepped before this one changed the endpoint (traffic moved, a
                # model undeployed or deployed): this one steps on a fresh read of it, and of
                # its neighbours' records, never on the read that change was decided from.
                stepped = sweep.each(rid, "follow deployment", advance, ports, rid)
            else:
                others = leaving - _models_of(record, now)
                if _quiet(record, seen, others, ports.clock(), settings):
                    continue
                # Stepped on the endpoint's read, its own record and its neighbours' read
                # fresh (leaving=None): what their listed states say only chose it.
                stepped = sweep.each(rid, "follow deployment", advance, ports, rid, seen)
            stepped_count += 1
            acted = stepped is not None and stepped.action.kind in _CHANGES_THE_ENDPOINT
            moved = moved or acted
            written += stepped is not None and stepped.action.kind is not ActionKind.NOTHING
    for outboxed in ports.records.with_outbox():
        sweep.each(outboxed.request_id, "deployment outbox", _flush, ports, outboxed)
    # Saved once the records were used: a tick that dies before this saves nothing, and the
    # next one syncs from the same mark.
    sweep.each(None, "save followed list", save_followed, ports.records.deployment_store, seen_list)
    log.info(
        "deployments followed",
        extra={
            "fields": {
                "followed": seen_list.how,
                "deployments": len(seen_list.records),
                "recordsRead": seen_list.reads,
                "stepped": stepped_count,
            }
        },
    )
    return written


def _quiet(
    record: DeploymentRecord,
    seen: Seen,
    leaving: frozenset[str],
    now: datetime,
    settings: ServingSettings,
) -> bool:
    """Whether the deployment's listed state, decided on this read of its endpoint, does
    nothing (then its record is not read: the decision on the record as stored would be the
    same, unless a write since the list's read changed it, which the next tick reads)."""
    state = serving_state(record, now)
    if state is None:
        return True  # a record that reads as no state: nothing decides on it (as a step)
    action = rule.decide(
        state,
        seen.observed,
        now,
        settings,
        operation=seen.operations.get(record.request_id),
        leaving=leaving,
        read_at=seen.at,
    )
    return action.kind is ActionKind.NOTHING


#: The actions after which a read of the endpoint no longer says how it is.
_CHANGES_THE_ENDPOINT = frozenset({ActionKind.TRAFFIC, ActionKind.CALL})


def _models_of(record: DeploymentRecord, now: datetime) -> frozenset[str]:
    state = serving_state(record, now)
    return frozenset(state.our_ids) if state is not None else frozenset()


def _leaving(group: list[DeploymentRecord], now: datetime) -> frozenset[str]:
    """The models the deployments of one endpoint are taking away: every model of one whose
    owner asked it to go, and the one each undeploy in flight is about."""
    out: set[str] = set()
    for record in group:
        state = serving_state(record, now)
        if state is None:
            continue
        if state.intent is Intent.UNDEPLOY:
            out.update(state.our_ids)
        for call in (state.call, state.given_up):
            if call is not None and call.kind is CallKind.UNDEPLOY:
                out.add(call.target)
    return frozenset(out)


def flush_deployment_outbox(ports: Deployments, request_id: str) -> int:
    """Publish a deployment's pending notifications, then forget them (moved to
    ``notified``); returns how many were published. A failed publish raises and keeps the
    rest in the outbox: the tick publishes every pending outbox again."""
    return _flush(ports, ports.records.get(request_id))


def _flush(ports: Deployments, record: DeploymentRecord | None) -> int:
    pending = list(record.outbox) if record is not None else []
    for message in pending:
        ports.notifier.notify(message)
    if record is not None and pending:
        ports.records.drop_from_outbox(record.request_id, pending)
    return len(pending)
