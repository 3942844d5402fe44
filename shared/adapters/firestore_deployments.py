"""FirestoreDeploymentStore: the DeploymentStore port on Cloud Firestore (``deployments``).

Exactly once, like the jobs: the claim is ``create()`` of ``deployments/{id}`` (a conditional
put), and a transaction decides between "already deployed or deploying", "held by a live
claim" and "claim expired, take it over" (:func:`shared.adapters.firestore.claim_document`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.adapters.firestore import call_firestore, claim_document, release_claim
from shared.domain.deployments import (
    DeploymentState,
    OperationStatus,
    deploy_failed,
    deploy_parked,
    deployment_settled,
    new_deployment,
    observe_operation,
)
from shared.domain.ids import doc_id
from shared.domain.request import JobRequest
from shared.ports import Claim

if TYPE_CHECKING:
    from shared.adapters.firestore import FirestoreJobStore

DEPLOYMENTS = "deployments"
# A parked deployment that was deployed after all is no longer waiting.
_UNPARK = {"nextAttemptAt": None, "reason": None}


class FirestoreDeploymentStore:
    """Deployment records in Firestore, on the job store's (lazily built) client."""

    def __init__(self, jobs: FirestoreJobStore) -> None:
        self._jobs = jobs

    def _ref(self, request_id: str) -> Any:
        return self._jobs.db.collection(DEPLOYMENTS).document(doc_id(request_id))

    def get(self, request_id: str) -> dict[str, Any] | None:
        """The record as stored, or None."""
        snap = call_firestore("get", lambda: self._ref(request_id).get())
        return snap.to_dict() if snap.exists else None

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        """Create ``deployments/{id}`` in ACCEPTED, or report the existing record."""
        record = new_deployment(request, now)
        return claim_document(
            self._jobs.db,
            self._ref(request.request_id),
            record,
            now=now,
            ttl_seconds=ttl_seconds,
            settled=deployment_settled,
        )

    def _finish_claim(self, token: str, request_id: str, fields: dict[str, Any]) -> None:
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def write(txn: Any) -> None:
            current = ref.get(transaction=txn).to_dict() or {}
            if deployment_settled(current):
                return  # a redelivery that found the same deployment recorded it first
            txn.update(ref, {**fields, "claim": firestore.DELETE_FIELD})

        call_firestore("record transaction", lambda: write(self._jobs.db.transaction()))

    def record_operation(self, token: str, request_id: str, operation: str, now: datetime) -> None:
        """The DeployModel operation started: DEPLOYING, with its name."""
        fields = {"state": DeploymentState.DEPLOYING.value, "operation": operation}
        self._finish_claim(token, request_id, {**fields, **_UNPARK, "updatedAt": now})

    def record_adopted(
        self, token: str, request_id: str, deployed_model_id: str, now: datetime
    ) -> None:
        """The request's model is on the endpoint already: DEPLOYED, with its id."""
        fields = {
            "state": DeploymentState.DEPLOYED.value,
            "deployedModelId": deployed_model_id,
            "deployedAt": now,
        }
        self._finish_claim(token, request_id, {**fields, **_UNPARK, "updatedAt": now})

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        """Vertex refused the deployment for good: FAILED with the reason (once)."""
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def write(txn: Any) -> None:
            fields = deploy_failed(ref.get(transaction=txn).to_dict() or {}, reason, now)
            if fields is not None:
                txn.update(ref, fields)

        call_firestore("failure transaction", lambda: write(self._jobs.db.transaction()))

    def release(self, request_id: str, token: str, now: datetime) -> None:
        """Drop this delivery's claim, if it still holds it."""
        release_claim(self._jobs.db, self._ref(request_id), token, now)

    def deploying(self) -> list[dict[str, Any]]:
        """Every record whose DeployModel operation has not been seen done."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self._jobs.db.collection(DEPLOYMENTS).where(
            filter=FieldFilter("state", "==", DeploymentState.DEPLOYING.value)
        )
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def park(self, request_id: str, now: datetime, delay_seconds: float, detail: str) -> None:
        """Park a deployment refused for quota, in one transaction."""
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def write(txn: Any) -> None:
            current = ref.get(transaction=txn).to_dict() or {}
            fields = deploy_parked(current, now, delay_seconds, detail)
            if fields is not None:
                txn.update(ref, fields)

        call_firestore("park transaction", lambda: write(self._jobs.db.transaction()))

    def parked_due(self, now: datetime) -> list[dict[str, Any]]:
        """Every parked record whose next deployment is due (one single-field range query)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self._jobs.db.collection(DEPLOYMENTS).where(
            filter=FieldFilter("nextAttemptAt", "<=", now)
        )
        return call_firestore("query", lambda: [d.to_dict() for d in query.stream()])

    def apply_operation(
        self, request_id: str, status: OperationStatus, now: datetime
    ) -> str | None:
        """Move the record to what its operation says, in one transaction; the new state."""
        from google.cloud import firestore

        ref = self._ref(request_id)

        @firestore.transactional
        def apply(txn: Any) -> str | None:
            current = ref.get(transaction=txn).to_dict() or {}
            change = observe_operation(current, status, now)
            if change is None:
                return None
            txn.update(ref, change)
            return str(change["state"])

        changed: str | None = call_firestore(
            "operation transaction", lambda: apply(self._jobs.db.transaction())
        )
        return changed
