"""Spot deployments (``deployModel`` requests): the idempotency key, and how an observed
DeployModel operation moves a record (its states are in :mod:`shared.domain.model.states`).

A record moves ACCEPTED → DEPLOYING → DEPLOYED or FAILED and never back, so a replayed or stale
observation cannot undo a newer one.

**The idempotency key.** Vertex AI has no idempotency key for ``EndpointService.DeployModel``,
and a ``DeployedModel`` carries no labels. Its ``displayName`` is the one free-form field that
Vertex keeps as given and returns on ``GetEndpoint``, so flexjobs appends a tag derived from
the requestId to it (see :func:`tagged_display_name`) and, before deploying, looks for a
deployed model on the endpoint whose display name carries the tag. ``DeployedModel.id`` (1 to
10 digits, chosen by the caller) was the alternative; it was not taken because a request may
set it itself, ten digits leave room for collisions, and what Vertex answers to a second
deployment with the same id is not documented. The operations of an endpoint cannot serve
either: ``DeployModelOperationMetadata`` holds only generic metadata and the deployment stage,
nothing that names the request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.domain.decisions.submissions import MAX_NOTIFIED, notification
from shared.domain.model.changes import DeploymentChange
from shared.domain.model.ids import label_value
from shared.domain.model.kinds import DEPLOY_MODEL
from shared.domain.model.states import DeploymentState
from shared.domain.model.values import clip, parse_rfc3339
from shared.domain.policy.serving_knobs import KNOB_FIELDS, MAX_EXTRA_SPOT, OBJECTIVE_FIELD
from shared.domain.request.message import MAX_DISPLAY_NAME, JobRequest
from shared.domain.request.serving_options import required_replicas, whole_count
from shared.domain.serving.model import (
    CallKind,
    InFlight,
    Intent,
    Phase,
    ServingState,
    objective_from_dict,
)
from shared.domain.serving.objective import (
    AvailabilityObjective,
    Choice,
    PolicyTable,
    ServingPolicy,
    choose,
    default_policy,
)
from shared.domain.serving.rule import DEPLOYED as DEPLOYED_NOTICE
from shared.domain.serving.rule import new_state, told

if TYPE_CHECKING:
    from shared.domain.model.records import DeploymentRecord

DEFAULT_DISPLAY_NAME = "flexjobs-deployment"


def with_notice(
    record: DeploymentRecord, fields: dict[str, Any], state: str, reason: str | None
) -> dict[str, Any]:
    """``fields`` with the notification ``state`` queued in the record's outbox, written in
    the same change, so it is published once the change is and never lost if publishing
    fails (the tick publishes every pending outbox).

    A deployment's message is the jobs' (``requestId``, ``state``, ``attempt``, ``reason``),
    with ``kind: "deployModel"``, ``attempt`` 0 (a deployment has no attempts) and ``at``, the
    change's ``updatedAt``. Its
    outbox keeps the newest :data:`MAX_NOTIFIED`: a zone that flaps for days while Pub/Sub is
    down must not grow the record without bound.

    Examples:
        >>> from shared.domain.model.records import DeploymentRecord
        >>> record = DeploymentRecord.decode({"requestId": "s-1", "state": "DEPLOYED"})
        >>> [message] = with_notice(record, {}, "HEDGED", "2 on-demand replicas")["outbox"]
        >>> message["state"], message["attempt"], message["kind"], message["reason"]
        ('HEDGED', 0, 'deployModel', '2 on-demand replicas')
    """
    message = {**notification(record.request_id, state, 0, clip(reason)), "kind": DEPLOY_MODEL.name}
    at = fields.get("updatedAt")
    if isinstance(at, datetime):
        # When it was owed: two notifications alike (a second RESTORED) stay two messages, so
        # forgetting the one published never forgets the other.
        message["at"] = at.isoformat()
    outbox = [*record.outbox, message][-MAX_NOTIFIED:]
    return {**fields, "outbox": outbox, "outboxPending": True}


def deployment_tag(request_id: str) -> str:
    """The tag that marks a deployed model as this request's (its idempotency key).

    Examples:
        >>> deployment_tag("seed-4")
        '[flexjobs seed-4]'
    """
    return f"[flexjobs {label_value(request_id)}]"


def tagged_display_name(display_name: str | None, request_id: str) -> str:
    """The deployed model's display name: the requested one, then the request's tag.

    The requested name is shortened when needed so the whole fits Vertex's 128 characters; the
    tag is never cut, because the lookup before deploying matches it at the end of the name.

    Examples:
        >>> tagged_display_name("served", "seed-4")
        'served [flexjobs seed-4]'
        >>> tagged_display_name(None, "seed-4")
        'flexjobs-deployment [flexjobs seed-4]'
    """
    tag = deployment_tag(request_id)
    room = MAX_DISPLAY_NAME - len(tag) - 1
    base = (display_name or DEFAULT_DISPLAY_NAME)[:room].rstrip()
    return f"{base} {tag}" if base else tag


def carries_tag(display_name: str, request_id: str) -> bool:
    """True when a deployed model's display name marks it as ``request_id``'s deployment."""
    return display_name.endswith(deployment_tag(request_id))


@dataclass(frozen=True)
class OperationStatus:
    """What flexjobs reads back about one DeployModel operation.

    ``deployed_model_id`` is set once the operation succeeded; ``error_code`` and
    ``error_message`` once it failed.
    """

    name: str
    done: bool
    deployed_model_id: str | None = None
    error_code: int | None = None
    error_message: str | None = None


def new_deployment(request: JobRequest, state: ServingState, now: datetime) -> dict[str, Any]:
    """The record of a ``deployModel`` request accepted (state ACCEPTED): its whole serving
    state (the machine's, :mod:`shared.domain.serving.rule`) starts deploying."""
    spec = request.spec
    deployed = spec.get("deployedModel") or {}
    resources = deployed.get("dedicatedResources") or {}
    return {
        "requestId": request.request_id,
        "kind": DEPLOY_MODEL.name,
        "state": DeploymentState.ACCEPTED.value,
        "endpoint": spec.get("endpoint"),
        "model": deployed.get("model"),
        "displayName": request.display_name,
        "spot": resources.get("spot") is True,
        "operation": None,
        "deployedModelId": None,
        # JSON text, like the jobs' request: Firestore cannot hold arrays of arrays.
        "request": json.dumps(spec, sort_keys=True),
        "options": json.dumps(request.options, sort_keys=True),
        "serving": state.to_dict(),
        "createdAt": now,
        "updatedAt": now,
    }


def projected(
    record: DeploymentRecord,
    state: ServingState,
    now: datetime,
    notices: tuple[tuple[str, str | None], ...] = (),
) -> DeploymentChange:
    """The write of ``state`` on ``record``, with what the contract's record fields say of it
    (``state``, ``deployedModelId``, ``operation``, ``reason``, ``deployedAt``, ``endedAt``),
    and the notifications it owes (state, reason) queued in its outbox, in the same write."""
    fields: dict[str, Any] = {"serving": state.to_dict(), "updatedAt": now}
    deletes = tuple(f for f in (UNDEPLOY_REQUESTED, RESUME_REQUESTED) if getattr(record, _FLAGS[f]))
    phase = state.phase
    if phase is Phase.FAILED:
        top = DeploymentState.FAILED
    elif phase is Phase.UNDEPLOYED:
        top = DeploymentState.UNDEPLOYED
    elif (
        state.main_id is not None and phase is not Phase.DEPLOYING
    ) or record.state is DeploymentState.DEPLOYED:
        # Deployed (a state never moves back: taken down, it stays DEPLOYED until it ends).
        top = DeploymentState.DEPLOYED
    elif _spot_operation(state) or record.state is DeploymentState.DEPLOYING:
        # Its DeployModel reached Vertex (in flight, or set aside by a cancel to land first);
        # a state never moves back.
        top = DeploymentState.DEPLOYING
    else:
        top = DeploymentState.ACCEPTED
    fields["state"] = top.value
    if state.main_id is not None and record.deployed_model_id != state.main_id:
        fields["deployedModelId"] = state.main_id
        fields["deployedAt"] = now
    operation = _spot_operation(state)
    if operation and record.operation != operation:
        fields["operation"] = operation
    parked = top is DeploymentState.ACCEPTED and state.retry_at is not None
    if parked or record.state is DeploymentState.ACCEPTED:
        # The contract's parked deployment: when the tick deploys it again, and how often
        # Vertex refused it for quota (one more each time a new refusal parks it).
        fields["nextAttemptAt"] = state.retry_at if parked else None
        if parked and parse_rfc3339(record.serving.get("retryAt")) != state.retry_at:
            fields["quotaRetries"] = record.quota_retries + 1
    if parked:
        fields["reason"] = "quota"
    elif phase is Phase.DEPLOYING and record.state is DeploymentState.ACCEPTED:
        fields["reason"] = None  # no longer parked
    elif phase is Phase.FAILED:
        last = state.history[-1].cause if state.history else "refused"
        fields["reason"] = clip(last)
    elif phase is Phase.UNDEPLOYED:
        fields["reason"] = "undeployed on request"
    if top.terminal and top is not DeploymentState.DEPLOYED and record.state is not top:
        fields["endedAt"] = now
    for notice, reason in _owed(record, notices):
        fields = with_notice(_with(record, fields), fields, notice, reason)
    return DeploymentChange(fields, deletes=deletes)


def _owed(
    record: DeploymentRecord, notices: tuple[tuple[str, str | None], ...]
) -> list[tuple[str, str | None]]:
    """The notifications a write owes: DEPLOYED once (a record deployed before the machine,
    read by it as deploying, was notified DEPLOYED then)."""
    deployed = record.state is DeploymentState.DEPLOYED
    return [(n, r) for n, r in notices if not (n == DEPLOYED_NOTICE and deployed)]


def _spot_operation(state: ServingState) -> str | None:
    """The Spot model's DeployModel operation, while it is in flight or landing."""
    main = CallKind.DEPLOY_SPOT if state.spot_replicas else CallKind.DEPLOY_FLOOR
    for call in (state.call, state.landing):
        if call is not None and call.kind is main and call.operation:
            return call.operation
    return None


#: The flags a record written before the machine kept its owner's asks in (read as intents,
#: and deleted by the first write of the machine), and the record's fields for them.
UNDEPLOY_REQUESTED = "undeployRequested"
RESUME_REQUESTED = "resumeRequested"
_FLAGS = {UNDEPLOY_REQUESTED: "undeploy_requested", RESUME_REQUESTED: "resume_requested"}


@dataclass(frozen=True)
class ServingPlan:
    """How a deployment keeps serving, decided once when it is accepted: its required
    replicas, its knobs, the objective it is measured against, and why these knobs."""

    required: int
    policy: ServingPolicy
    objective: AvailabilityObjective | None
    why: str


def serving_plan(
    spec: Mapping[str, Any], options: Mapping[str, Any], table: PolicyTable | None = None
) -> ServingPlan:
    """A valid request's serving plan: the knobs it names (``minOnDemandReplicas``,
    ``extraSpotReplicas``, ``hedge``); with an ``availabilityObjective`` and none of them, the
    cheapest measured policy that meets it (objective mode, :func:`choose` on ``table``; no
    table: always on-demand); with neither, Spot with the reactive on-demand hedge.

    Examples:
        >>> spec = {"deployedModel": {"dedicatedResources": {"minReplicaCount": 4}}}
        >>> serving_plan(spec, {"minOnDemandReplicas": 1}).policy
        ServingPolicy(min_on_demand=1, extra_spot=0, hedge=True)
        >>> plan = serving_plan(spec, {"availabilityObjective": {"atLeastOneReplica": 0.99}})
        >>> plan.policy.min_on_demand, plan.why
        (4, 'chosen for the objective: no measured table: always on-demand')
    """
    required = required_replicas(spec)
    objective = objective_from_dict(options.get(OBJECTIVE_FIELD))
    if any(name in options for name in KNOB_FIELDS):
        knobs = ServingPolicy(
            min_on_demand=min(whole_count(options.get("minOnDemandReplicas")), required),
            extra_spot=min(whole_count(options.get("extraSpotReplicas")), MAX_EXTRA_SPOT),
            hedge=options.get("hedge") is not False,
        )
        return ServingPlan(required, knobs, objective, "named by the request")
    if objective is None:
        return ServingPlan(
            required, ServingPolicy(), None, "the default: Spot, hedged on demand when short"
        )
    if table is None:
        choice = Choice(default_policy(required), None, "no measured table: always on-demand")
    else:
        choice = choose(objective, required, table)
    why = f"chosen for the objective: {choice.reason}"
    return ServingPlan(required, choice.policy, objective, why)


def policy_of(spec: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[int, ServingPolicy]:
    """A record's required replicas and knobs, read again from its request (a record written
    before the machine: its plan was never stored)."""
    plan = serving_plan(spec, options)
    return plan.required, plan.policy


def state_of(record: DeploymentRecord, now: datetime) -> ServingState | None:
    """The machine's state a record holds. A record written before the machine (its
    ``serving`` absent until it was followed, its owner's asks in the flags
    ``undeployRequested`` and ``resumeRequested``) reads as the machine would have written
    it: deploying (its DeployModel's operation, if recorded, in flight), or followed, with
    the flags as intents. None for a record that reads as neither (hand-edited out of shape):
    nothing decides on it."""
    spec = record.request
    display = (spec.get("deployedModel") or {}).get("displayName") if spec else None
    name = tagged_display_name(display if isinstance(display, str) else None, record.request_id)
    raw = record.serving
    state = ServingState.decode(raw, spot_name=name) if raw else None
    if state is None:
        if record.state in (DeploymentState.FAILED, DeploymentState.UNDEPLOYED) or not spec:
            return None
        state = new_state(name, *policy_of(spec, record.options), now)
        if record.deployed_model_id:
            state = replace(state, spot=replace(state.spot, id=record.deployed_model_id))
        elif record.operation:
            call = InFlight(CallKind.DEPLOY_SPOT, name, now, state.spot_replicas)
            state = replace(state, call=replace(call, operation=record.operation))
    if record.undeploy_requested and state.intent is not Intent.UNDEPLOY:
        state = told(state, Intent.UNDEPLOY, now) or state
    elif record.resume_requested and state.intent is Intent.SERVE:
        state = told(state, Intent.RESUME, now) or state
    return state


def _with(record: DeploymentRecord, fields: dict[str, Any]) -> DeploymentRecord:
    """``record`` with the outbox ``fields`` holds so far (two notices in one write)."""
    outbox = fields.get("outbox")
    if not isinstance(outbox, list):
        return record
    return replace(record, outbox=tuple(outbox))
