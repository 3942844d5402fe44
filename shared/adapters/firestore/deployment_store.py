"""FirestoreDeploymentStore: the DeploymentStore port on Cloud Firestore (``deployments``),
storage only: a conditional create, one-transaction writes and two queries (what the writes
mean lives in :class:`shared.app.repository.deployments.DeploymentRecords`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.adapters.firestore.database import (
    Firestore,
    call_firestore,
    create_document,
    transact_document,
)
from shared.adapters.firestore.queries import Query
from shared.app.ports import ON_ENDPOINT_LIMIT, DecideDeployment
from shared.domain.model.changes import DeploymentChange, Written
from shared.domain.model.ids import doc_id
from shared.domain.model.records import Stored
from shared.domain.model.states import DeploymentState

DEPLOYMENTS = "deployments"
#: The records the tick follows: in a state not ended (a single-field ``in``).
ALIVE = Query(DEPLOYMENTS, (("state", "in"),))
WITH_OUTBOX = Query(DEPLOYMENTS, (("outboxPending", "=="),))
ON_ENDPOINT = Query(DEPLOYMENTS, (("endpoint", "=="), ("state", "in")))
ALIVE_STATES = [
    DeploymentState.ACCEPTED.value,
    DeploymentState.DEPLOYING.value,
    DeploymentState.DEPLOYED.value,
]


class FirestoreDeploymentStore:
    """Deployment records in Firestore, on a shared :class:`Firestore`."""

    def __init__(self, firestore: Firestore) -> None:
        self._firestore = firestore

    def _ref(self, request_id: str) -> Any:
        return self._firestore.db.collection(DEPLOYMENTS).document(doc_id(request_id))

    def get(self, request_id: str) -> dict[str, Any] | None:
        snap = call_firestore("get", lambda: self._ref(request_id).get())
        return snap.to_dict() if snap.exists else None

    def create(self, request_id: str, record: Mapping[str, Any]) -> bool:
        return create_document(self._ref(request_id), record) is not None

    def transact(
        self,
        request_id: str,
        decide: DecideDeployment,
    ) -> Written[DeploymentChange, Stored] | None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        def write(
            batch: Any, current: dict[str, Any], change: DeploymentChange, unchanged: Any
        ) -> bool:
            deletes = {name: firestore.DELETE_FIELD for name in change.deletes}
            if change.fields or deletes:
                batch.update(ref, {**change.fields, **deletes}, option=unchanged)
            return bool(change.fields or deletes)

        return transact_document(self._firestore.db, ref, decide, write)

    def alive(self) -> list[dict[str, Any]]:
        """Every record not UNDEPLOYED nor FAILED (one single-field ``in`` query)."""
        query = ALIVE.on(self._firestore.db, ALIVE_STATES)
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def on_endpoint(self, endpoint: str) -> list[dict[str, Any]]:
        """The alive records of the deployments on ``endpoint``, bounded (see the port)."""
        query = ON_ENDPOINT.on(self._firestore.db, endpoint, ALIVE_STATES).limit(ON_ENDPOINT_LIMIT)
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def with_outbox(self) -> list[dict[str, Any]]:
        """Every record with notifications not yet published (a single-field equality)."""
        query = WITH_OUTBOX.on(self._firestore.db, True)
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])
