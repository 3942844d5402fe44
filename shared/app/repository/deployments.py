"""The deployment repository: ``deployments/{id}`` records read and written through the store,
decoded into :class:`~shared.domain.model.records.DeploymentRecord` for every decision."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared.app.ports import DeploymentStore
from shared.app.repository.claims import claim_record
from shared.domain.decisions.deploy_model import (
    RESUME_REQUESTED,
    UNDEPLOY_REQUESTED,
    OperationStatus,
    claim_released,
    deploy_failed,
    deploy_parked,
    deploy_recorded,
    deployment_settled,
    new_deployment,
    observe_operation,
    resume_asked,
    undeploy_asked,
    undeployed_before_deploying,
    with_notice,
)
from shared.domain.decisions.submissions import MAX_NOTIFIED, Claimed
from shared.domain.model.changes import DeploymentChange
from shared.domain.model.records import DeploymentRecord, Stored
from shared.domain.model.states import DeploymentState
from shared.domain.request.message import JobRequest
from shared.domain.serving.model import (
    ActionKind,
    ObservedEndpoint,
    Phase,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.rule import begin_undeploy, call_finished, call_started, resume, start
from shared.domain.serving.rule import decide as rule_decide

#: The actions whose state is written before their call: a state change alone (RECORD,
#: PAUSE), or a long-running call's claim (HEDGE, GROW, and RESTORE's UndeployModel). A
#: traffic move (SHIFT, RESTORE's split) is synchronous: its state is written after it.
WRITTEN_FIRST = (ActionKind.RECORD, ActionKind.PAUSE, ActionKind.HEDGE, ActionKind.GROW)


class DeploymentRecords:
    """The deployment records: every write, over a :class:`~shared.app.ports.DeploymentStore`."""

    def __init__(self, store: DeploymentStore) -> None:
        self.store = store

    def get(self, request_id: str) -> DeploymentRecord | None:
        raw = self.store.get(request_id)
        return None if raw is None else DeploymentRecord.decode(raw)

    def deploying(self) -> list[DeploymentRecord]:
        return [DeploymentRecord.decode(raw) for raw in self.store.deploying()]

    def deployed(self) -> list[DeploymentRecord]:
        return [DeploymentRecord.decode(raw) for raw in self.store.deployed()]

    def parked_due(self, now: datetime) -> list[DeploymentRecord]:
        return [DeploymentRecord.decode(raw) for raw in self.store.parked_due(now)]

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claimed:
        """Create ``deployments/{id}`` in ACCEPTED with a claim, or report the existing one.

        Raises:
            SubmissionInProgress: another live claim holds the request.
        """
        rid = request.request_id

        def write(
            fields_of: Callable[[dict[str, Any]], dict[str, Any] | None], known: Stored | None
        ) -> tuple[bool, Stored | None]:
            # Deployments are few: their writes read the record and carry no version.
            return self.store.transact(rid, lambda raw: _as_write(fields_of(raw))) is not None, None

        return claim_record(
            new_deployment(request, now),
            read=lambda: _unversioned(self.store.get(rid)),
            create=lambda record: Stored(record, None) if self.store.create(rid, record) else None,
            write=write,
            settled=lambda raw: deployment_settled(DeploymentRecord.decode(raw)),
            now=now,
            ttl_seconds=ttl_seconds,
        )

    def apply(
        self, request_id: str, decide: Callable[[DeploymentRecord], DeploymentChange | None]
    ) -> DeploymentChange | None:
        """Apply ``decide`` to the record, decoded, in one transaction."""
        return self.store.transact(request_id, lambda raw: decide(DeploymentRecord.decode(raw)))

    def _finish(self, request_id: str, fields: dict[str, Any]) -> None:
        self.apply(request_id, lambda current: deploy_recorded(current, fields))

    def record_operation(self, request_id: str, operation: str, now: datetime) -> None:
        """The DeployModel operation started: DEPLOYING, with its name."""
        fields = {"state": DeploymentState.DEPLOYING.value, "operation": operation}
        self._finish(request_id, {**fields, "updatedAt": now})

    def record_adopted(self, request_id: str, deployed_model_id: str, now: datetime) -> None:
        """The request's model is on the endpoint already: DEPLOYED, with its id."""
        fields = {
            "state": DeploymentState.DEPLOYED.value,
            "deployedModelId": deployed_model_id,
            "deployedAt": now,
        }
        self._finish(request_id, {**fields, "updatedAt": now})

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        """Vertex refused the deployment for good: FAILED with the reason (never over an end)."""
        self.apply(request_id, lambda current: deploy_failed(current, reason, now))

    def release(self, request_id: str, token: str, now: datetime) -> None:
        """Drop this delivery's claim, if it still holds it."""
        self.apply(request_id, lambda current: claim_released(current, token, now))

    def park(self, request_id: str, now: datetime, delay_seconds: float, detail: str) -> None:
        """Park a deployment refused for quota (see
        :func:`~shared.domain.decisions.deploy_model.deploy_parked`)."""
        self.apply(request_id, lambda current: deploy_parked(current, now, delay_seconds, detail))

    def apply_operation(
        self, request_id: str, status: OperationStatus, now: datetime
    ) -> str | None:
        """Move the record to what its operation says; the new state, or None."""
        change = self.apply(request_id, lambda current: observe_operation(current, status, now))
        return None if change is None else str(change.fields["state"])

    def record_serving(
        self,
        request_id: str,
        observed: ObservedEndpoint,
        now: datetime,
        settings: ServingSettings,
    ) -> tuple[ServingState | None, ServingAction] | None:
        """Decide the record's serving from one read of its endpoint, in one transaction;
        write the new state (and the notification it owes) when the action is written first
        (:data:`WRITTEN_FIRST`: a state change, or a long-running call's claim).

        The rule runs on the record as the transaction reads it, so two ticks at once decide
        on each other's writes: the second sees the first's state (a claim included) and
        decides NOTHING (a conflicting commit retries the transaction on the fresh record).
        A record that is no longer DEPLOYED, or names no deployed model, is left alone.
        Returns the state decided from and the action (None when nothing was decided).
        """
        decided: list[tuple[ServingState | None, ServingAction]] = []

        def decide(raw: dict[str, Any]) -> DeploymentChange | None:
            decided.clear()
            record = DeploymentRecord.decode(raw)
            if record.state is not DeploymentState.DEPLOYED or not record.deployed_model_id:
                return None
            state = _serving(raw)
            told = _told(raw, state, observed, now)
            if state is None and told is None:
                begun = start(record.deployed_model_id, observed, now)
                action = ServingAction(ActionKind.RECORD, begun, "following")
            else:
                given = told or state
                assert given is not None
                action = rule_decide(observed, given, now, settings)
                if told is not None and action.kind is ActionKind.NOTHING:
                    action = replace(action, kind=ActionKind.RECORD)
            decided.append((told or state, action))
            first = action.kind in WRITTEN_FIRST or action.undeploy is not None
            if not first:
                if told is None:
                    return None
                # What the owner asked is written now, so the move decided from it is
                # recorded over it (record_moved) and the request is not taken up twice.
                change = _serving_change(record, told, now, None, None)
                return replace(change, deletes=(*change.deletes, *TOLD))
            change = _serving_change(record, action.state, now, action.notice, action.reason)
            if told is not None:
                change = replace(change, deletes=(*change.deletes, *TOLD))
            if action.state.phase is Phase.UNDEPLOYED:
                change.fields.update(state=DeploymentState.UNDEPLOYED.value, endedAt=now)
            return change

        self.store.transact(request_id, decide)
        return decided[-1] if decided else None

    def ask_undeploy(self, request_id: str, now: datetime) -> DeploymentChange | None:
        """A cancel: the flag the tick takes the deployment down by (None: nothing to do)."""
        return self.apply(request_id, lambda current: undeploy_asked(current, now))

    def undeployed_before_deploying(self, request_id: str, now: datetime) -> bool:
        """A cancel of a deployment that never started deploying: UNDEPLOYED."""
        change = self.apply(request_id, lambda current: undeployed_before_deploying(current, now))
        return change is not None

    def ask_resume(self, request_id: str, now: datetime) -> DeploymentChange | None:
        """A resume: the flag the tick follows a paused deployment again by."""
        return self.apply(request_id, lambda current: resume_asked(current, now))

    def update_serving(
        self,
        request_id: str,
        change: Callable[[ServingState], ServingState | None],
        now: datetime,
        notice: str | None = None,
        reason: str | None = None,
    ) -> ServingState | None:
        """Apply ``change`` to the record's serving state in one transaction (None from it:
        nothing to write); the state written, or None."""
        written: list[ServingState] = []

        def decide(raw: dict[str, Any]) -> DeploymentChange | None:
            written.clear()
            state = _serving(raw)
            after = None if state is None else change(state)
            if after is None or after == state:
                return None
            written.append(after)
            return _serving_change(DeploymentRecord.decode(raw), after, now, notice, reason)

        self.store.transact(request_id, decide)
        return written[-1] if written else None

    def record_moved(
        self, request_id: str, before: ServingState, after: ServingState, now: datetime
    ) -> ServingState | None:
        """After a traffic move that Vertex took: write ``after``, if the record still holds
        the state it was decided from (another tick's newer write wins)."""
        return self.update_serving(
            request_id, lambda current: after if _same(current, before) else None, now
        )

    def record_started(
        self, request_id: str, at: datetime, operation: str, now: datetime
    ) -> ServingState | None:
        """The long-running call claimed at ``at`` was answered with ``operation``."""
        return self.update_serving(
            request_id, lambda current: call_started(current, at, operation), now
        )

    def record_finished(
        self, request_id: str, status: OperationStatus, now: datetime
    ) -> ServingState | None:
        """The operation of the call in flight ended (``status``): the state after it."""

        def change(current: ServingState) -> ServingState | None:
            if current.operation != status.name or not status.done:
                return None
            error = status.error_message or (
                f"code {status.error_code}" if status.error_code else None
            )
            return call_finished(current, now, error, status.deployed_model_id)

        return self.update_serving(request_id, change, now)

    def record_ended(
        self,
        request_id: str,
        at: datetime,
        now: datetime,
        *,
        error: str | None = None,
        deployed_model_id: str | None = None,
    ) -> ServingState | None:
        """The long-running call claimed at ``at`` ended before its operation was recorded:
        refused (``error``: nothing started), or found done (a fallback already on the
        endpoint under its name: ``deployed_model_id``)."""

        def change(current: ServingState) -> ServingState | None:
            if current.operation_at != at or current.operation is not None:
                return None
            return call_finished(current, now, error, deployed_model_id)

        return self.update_serving(request_id, change, now)

    def record_released(
        self, request_id: str, claimed: ServingState, before: ServingState, now: datetime
    ) -> ServingState | None:
        """The call claimed in ``claimed`` surely never reached Vertex: the record goes back
        to ``before`` (if it still holds the claim), so the next tick decides it again."""
        return self.update_serving(
            request_id, lambda current: before if _same(current, claimed) else None, now
        )

    def with_outbox(self) -> list[DeploymentRecord]:
        """Every record whose outbox holds notifications not yet published."""
        return [DeploymentRecord.decode(raw) for raw in self.store.with_outbox()]

    def drop_from_outbox(self, request_id: str, sent: list[dict[str, Any]]) -> None:
        """Move notifications once published from the outbox to ``notified`` (the latest
        :data:`MAX_NOTIFIED`)."""

        def decide(raw: dict[str, Any]) -> DeploymentChange | None:
            current = DeploymentRecord.decode(raw)
            left = [m for m in current.outbox if m not in sent]
            done = [m for m in current.outbox if m in sent]
            if not done:
                return None
            notified = [*current.notified, *done][-MAX_NOTIFIED:]
            fields = {"outbox": left, "outboxPending": bool(left), "notified": notified}
            return DeploymentChange(fields)

        self.store.transact(request_id, decide)


#: What the owner told a deployment (a cancel: take it down; a resume: follow it again after a
#: hand edit), flags on the record that the next tick acts on from its fresh read.
TOLD = (UNDEPLOY_REQUESTED, RESUME_REQUESTED)


def _told(
    raw: dict[str, Any], state: ServingState | None, observed: ObservedEndpoint, now: datetime
) -> ServingState | None:
    """The state the owner's request makes of ``state`` (None: nothing was asked). A cancel
    wins over a resume; a resume of a deployment that is not paused changes nothing."""
    if not any(raw.get(flag) for flag in TOLD):
        return None
    spot_id = str(raw.get("deployedModelId") or "")
    current = state or start(spot_id, observed, now)
    if raw.get(UNDEPLOY_REQUESTED):
        return begin_undeploy(current, now)
    if current.phase is Phase.PAUSED_BY_HAND:
        return resume(current, observed, now)
    return current


def _same(stored: ServingState, decided: ServingState) -> bool:
    """``stored`` is the state ``decided`` as written (compared in the stored form: the store
    rounds the accrued seconds, so a state decided in memory differs in its last digits)."""
    return stored.to_dict() == decided.to_dict()


def _serving(raw: dict[str, Any]) -> ServingState | None:
    stored = raw.get("serving")
    return ServingState.decode(stored) if isinstance(stored, dict) else None


def _serving_change(
    record: DeploymentRecord,
    state: ServingState,
    now: datetime,
    notice: str | None,
    reason: str | None,
) -> DeploymentChange:
    fields: dict[str, Any] = {"serving": state.to_dict(), "updatedAt": now}
    if notice:
        fields = with_notice(record, fields, notice, reason)
    return DeploymentChange(fields)


def _unversioned(raw: dict[str, Any] | None) -> Stored | None:
    return None if raw is None else Stored(raw, None)


def _as_write(fields: dict[str, Any] | None) -> DeploymentChange | None:
    return None if fields is None else DeploymentChange(fields)
