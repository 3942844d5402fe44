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
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.domain.decisions.submissions import MAX_NOTIFIED, notification
from shared.domain.model.changes import DeploymentChange
from shared.domain.model.ids import label_value
from shared.domain.model.kinds import DEPLOY_MODEL
from shared.domain.model.states import DeploymentState
from shared.domain.model.values import clip
from shared.domain.request.message import MAX_DISPLAY_NAME, JobRequest
from shared.domain.serving.model import CallKind, Phase, ServingState

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


def observe_operation(
    record: DeploymentRecord, status: OperationStatus, now: datetime
) -> DeploymentChange | None:
    """The fields to write on a deployment record after reading its operation, or None.

    None when nothing changes: the operation is still running, it is not the record's
    operation, or the record already reached a final state.

    Examples:
        >>> from datetime import UTC
        >>> now = datetime(2025, 1, 1, tzinfo=UTC)
        >>> from shared.domain.model.records import DeploymentRecord
        >>> record = DeploymentRecord.decode({"state": "DEPLOYING", "operation": "op/1"})
        >>> observe_operation(record, OperationStatus("op/1", True, "42"), now).fields["state"]
        'DEPLOYED'
        >>> observe_operation(record, OperationStatus("op/1", False), now) is None
        True
    """
    if not status.done or record.operation != status.name or record.state.terminal:
        return None
    if status.error_code:
        reason = clip(status.error_message) or f"DeployModel failed with code {status.error_code}"
        failed = {
            "state": DeploymentState.FAILED.value,
            "reason": reason,
            "errorCode": status.error_code,
            "updatedAt": now,
            "endedAt": now,
        }
        return DeploymentChange(with_notice(record, failed, DeploymentState.FAILED.value, reason))
    deployed = {
        "state": DeploymentState.DEPLOYED.value,
        "deployedModelId": status.deployed_model_id,
        "updatedAt": now,
        "deployedAt": now,
    }
    return DeploymentChange(with_notice(record, deployed, DeploymentState.DEPLOYED.value, None))


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
    phase = state.phase
    call = state.call
    if phase is Phase.FAILED:
        top = DeploymentState.FAILED
    elif phase is Phase.UNDEPLOYED:
        top = DeploymentState.UNDEPLOYED
    elif state.spot.id is not None and phase is not Phase.DEPLOYING:
        top = DeploymentState.DEPLOYED
    elif call is not None and call.kind is CallKind.DEPLOY_SPOT and call.operation:
        top = DeploymentState.DEPLOYING
    else:
        top = DeploymentState.ACCEPTED
    fields["state"] = top.value
    if state.spot.id is not None and record.deployed_model_id != state.spot.id:
        fields["deployedModelId"] = state.spot.id
        fields["deployedAt"] = now
    if call is not None and call.kind is CallKind.DEPLOY_SPOT and call.operation:
        fields["operation"] = call.operation
    if top is DeploymentState.ACCEPTED and state.retry_at is not None:
        fields["reason"] = "quota"
    elif phase is Phase.FAILED:
        last = state.history[-1].cause if state.history else "refused"
        fields["reason"] = clip(last)
    elif phase is Phase.UNDEPLOYED:
        fields["reason"] = "undeployed on request"
    if top.terminal and top is not DeploymentState.DEPLOYED and record.state is not top:
        fields["endedAt"] = now
    for notice, reason in notices:
        fields = with_notice(_with(record, fields), fields, notice, reason)
    return DeploymentChange(fields)


def _with(record: DeploymentRecord, fields: dict[str, Any]) -> DeploymentRecord:
    """``record`` with the outbox ``fields`` holds so far (two notices in one write)."""
    outbox = fields.get("outbox")
    if not isinstance(outbox, list):
        return record
    return replace(record, outbox=tuple(outbox))
