"""The deployment repository: ``deployments/{id}`` records read and written through the store,
decoded into :class:`~shared.domain.model.records.DeploymentRecord`, every write one decision of
the serving machine (:mod:`shared.domain.serving.rule`) applied in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.app.ports import DeploymentStore
from shared.domain.decisions.deploy_model import new_deployment, projected, state_of
from shared.domain.decisions.submissions import MAX_NOTIFIED
from shared.domain.model.changes import Decided, DeploymentChange
from shared.domain.model.records import DeploymentRecord
from shared.domain.request.message import JobRequest
from shared.domain.serving import rule
from shared.domain.serving.model import (
    ActionKind,
    InFlight,
    Intent,
    ObservedEndpoint,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.rule import OperationOutcome

#: A decision on the record as stored: the state after it and the notifications it owes
#: (None: nothing to write).
Machine = Callable[[ServingState], tuple[ServingState, tuple[str, ...]] | None]


@dataclass(frozen=True)
class Stepped:
    """A decision taken on a fresh record: the action, and the state it was decided from
    (a traffic move is written after its call, only if the record still holds that state)."""

    action: ServingAction
    before: ServingState
    record: DeploymentRecord


class DeploymentRecords:
    """The deployment records: every write, over a :class:`~shared.app.ports.DeploymentStore`."""

    def __init__(self, deployment_store: DeploymentStore) -> None:
        self.deployment_store = deployment_store

    def get(self, request_id: str) -> DeploymentRecord | None:
        raw = self.deployment_store.get(request_id)
        return None if raw is None else DeploymentRecord.decode(raw)

    def on_endpoint(self, endpoint: str) -> list[DeploymentRecord]:
        """Every deployment on ``endpoint``."""
        return [DeploymentRecord.decode(raw) for raw in self.deployment_store.on_endpoint(endpoint)]

    def with_outbox(self) -> list[DeploymentRecord]:
        """Every record whose outbox holds notifications not yet published."""
        return [DeploymentRecord.decode(raw) for raw in self.deployment_store.with_outbox()]

    def create(self, request: JobRequest, state: ServingState, now: datetime) -> bool:
        """Create ``deployments/{id}`` with its machine's first state; False when it exists."""
        return self.deployment_store.create(request.request_id, new_deployment(request, state, now))

    def _write(
        self, request_id: str, now: datetime, machine: Machine
    ) -> tuple[ServingState, tuple[str, ...]] | None:
        """Apply ``machine`` to the record's state in one transaction; what it wrote."""

        def decide(
            raw: dict[str, Any],
        ) -> Decided[DeploymentChange, tuple[ServingState, tuple[str, ...]]] | None:
            record = DeploymentRecord.decode(raw)
            state = serving_state(record, now)
            if state is None:
                return None
            after = machine(state)
            if after is None or (after[0] == state and not after[1]):
                return None
            return Decided(
                projected(record, after[0], now, tuple((n, None) for n in after[1])), after
            )

        done = self.deployment_store.transact(request_id, decide)
        return None if done is None else done.result

    def tell(self, request_id: str, intent: Intent, now: datetime) -> ServingState | None:
        """Write the owner's intent (a cancel, a resume); the state after it, or None when it
        changes nothing (no record, ended, or asked already)."""

        def machine(state: ServingState) -> tuple[ServingState, tuple[str, ...]] | None:
            after = rule.told(state, intent, now)
            return None if after is None else (after, ())

        done = self._write(request_id, now, machine)
        return None if done is None else done[0]

    def step(
        self,
        request_id: str,
        observed: ObservedEndpoint,
        now: datetime,
        settings: ServingSettings,
        *,
        operation: OperationOutcome | None = None,
        leaving: frozenset[str] = frozenset(),
        read_at: datetime | None = None,
    ) -> Stepped | None:
        """Decide the deployment's next step on ``observed`` (a fresh read of its endpoint),
        in one transaction on the record as stored, so two deliveries at once decide on each
        other's writes: a call is claimed in the state written here, before it is sent, and
        the second decides on that claim. A traffic move is not written here (it is, after
        its call: :meth:`moved`). None when there is no record or no state."""

        def decide(raw: dict[str, Any]) -> Decided[DeploymentChange, Stepped] | None:
            record = DeploymentRecord.decode(raw)
            state = serving_state(record, now)
            if state is None:
                return None
            action = rule.decide(
                state,
                observed,
                now,
                settings,
                operation=operation,
                leaving=leaving,
                read_at=read_at,
            )
            stepped = Stepped(action, state, record)
            if action.kind in (ActionKind.NOTHING, ActionKind.TRAFFIC):
                return Decided(None, stepped)
            notices = tuple((n, action.reason) for n in action.notices)
            return Decided(projected(record, action.state, now, notices), stepped)

        done = self.deployment_store.transact(request_id, decide)
        return None if done is None else done.result

    def moved(
        self, request_id: str, stepped: Stepped, now: datetime, made_at: datetime | None
    ) -> bool:
        """After a traffic move Vertex took (its answer came at ``now``; the endpoint's version
        it made is of ``made_at``): write the state decided with it, if the record still holds
        the state it was decided from (another delivery's newer write wins)."""
        before, after = stepped.before, stepped.action

        def machine(state: ServingState) -> tuple[ServingState, tuple[str, ...]] | None:
            if state.to_dict() != before.to_dict():
                return None
            return rule.traffic_moved(after.state, made_at, now), after.notices

        return self._write(request_id, now, machine) is not None

    def answered(self, request_id: str, claim: InFlight, operation: str, now: datetime) -> None:
        """Vertex answered the call ``claim`` (as claimed) with ``operation``."""
        self._write(request_id, now, lambda state: rule.answered(state, claim, operation))

    def lost(self, request_id: str, claim: InFlight, now: datetime) -> None:
        """The call ``claim`` timed out: it may have happened."""

        def machine(state: ServingState) -> tuple[ServingState, tuple[str, ...]] | None:
            after = rule.lost(state, claim)
            return None if after is None else (after, ())

        self._write(request_id, now, machine)

    def released(self, request_id: str, claim: InFlight, now: datetime) -> None:
        """The call ``claim`` never reached Vertex: its claim goes."""

        def machine(state: ServingState) -> tuple[ServingState, tuple[str, ...]] | None:
            after = rule.released(state, claim)
            return None if after is None else (after, ())

        self._write(request_id, now, machine)

    def refused(
        self,
        request_id: str,
        claim: InFlight,
        error: str,
        now: datetime,
        *,
        retry_at: datetime | None,
    ) -> None:
        """Vertex refused the call ``claim``: for good, or for quota (``retry_at``)."""
        self._write(
            request_id,
            now,
            lambda state: rule.refused(state, claim, error, now, retry_at=retry_at),
        )

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

        self.deployment_store.transact(request_id, decide)


def serving_state(record: DeploymentRecord, now: datetime) -> ServingState | None:
    """The machine's state a record holds (:func:`state_of`; None: none that reads, a record
    hand-edited out of shape: nothing decides on it)."""
    return state_of(record, now)
