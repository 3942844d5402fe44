"""The deployment repository: ``deployments/{id}`` records read and written through the store,
decoded into :class:`~shared.domain.model.records.DeploymentRecord` for every decision."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from shared.app.ports import DeploymentStore
from shared.app.repository.claims import claim_record
from shared.domain.decisions.deploy_model import (
    OperationStatus,
    claim_released,
    deploy_failed,
    deploy_parked,
    deploy_recorded,
    deployment_settled,
    new_deployment,
    observe_operation,
)
from shared.domain.decisions.submissions import (
    Claimed,
)
from shared.domain.model.changes import DeploymentChange
from shared.domain.model.records import DeploymentRecord, Stored
from shared.domain.model.states import DeploymentState
from shared.domain.request.message import JobRequest
from shared.domain.serving.model import (
    ActionKind,
    ObservedEndpoint,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.rule import decide as rule_decide
from shared.domain.serving.rule import start


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
    ) -> ServingAction | None:
        """Decide the record's serving from one read of its endpoint, in one transaction, and
        write the new state when the rule's action is a state change only (RECORD, PAUSE).

        The rule runs on the record as the transaction reads it, so two ticks at once decide
        on each other's writes: the second sees the first's state and decides NOTHING (a
        conflicting commit retries the transaction on the fresh record). A record that is no
        longer DEPLOYED, or names no deployed model, is left alone. Returns the action (None
        when nothing was decided); an action that names a call is not written here.
        """
        decided: list[ServingAction] = []

        def decide(raw: dict[str, Any]) -> DeploymentChange | None:
            decided.clear()
            record = DeploymentRecord.decode(raw)
            if record.state is not DeploymentState.DEPLOYED or not record.deployed_model_id:
                return None
            stored = raw.get("serving")
            state = ServingState.decode(stored) if isinstance(stored, dict) else None
            if state is None:
                begun = start(record.deployed_model_id, observed, now)
                action = ServingAction(ActionKind.RECORD, begun, "following")
            else:
                action = rule_decide(observed, state, now, settings)
            decided.append(action)
            if action.kind not in (ActionKind.RECORD, ActionKind.PAUSE):
                return None
            return DeploymentChange({"serving": action.state.to_dict(), "updatedAt": now})

        self.store.transact(request_id, decide)
        return decided[-1] if decided else None


def _unversioned(raw: dict[str, Any] | None) -> Stored | None:
    return None if raw is None else Stored(raw, None)


def _as_write(fields: dict[str, Any] | None) -> DeploymentChange | None:
    return None if fields is None else DeploymentChange(fields)
