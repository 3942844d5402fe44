"""FirestoreDeploymentStore: the DeploymentStore port on Cloud Firestore (``deployments``),
storage only: a conditional create, one-transaction writes, its queries, and the followed list
(``followed/head``, ``followed/shard-N``, kept as the watch list is:
:mod:`shared.domain.serving.followed`). Every write stamps the record (``touchedAt``, its
commit time), so the tick reads only the records written since its list's mark. What the
writes mean lives in :class:`shared.app.repository.deployments.DeploymentRecords`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.adapters.firestore.database import (
    TOUCHED_AT,
    Firestore,
    call_firestore,
    create_document,
    fields_of,
    stamp,
    transact_document,
)
from shared.adapters.firestore.job_store import MARK_MARGIN
from shared.adapters.firestore.queries import Query, pages, partial
from shared.adapters.firestore.watch_store import FirestoreWatchStore
from shared.app.ports import ON_ENDPOINT_LIMIT, DecideDeployment
from shared.domain.model.changes import DeploymentChange, Written
from shared.domain.model.ids import doc_id
from shared.domain.model.records import Stored
from shared.domain.model.states import DeploymentState
from shared.domain.model.watch import Saved, Watch
from shared.domain.serving.followed import FOLLOWED_FIELDS

DEPLOYMENTS = "deployments"
#: The records the tick follows: in a state not ended (a single-field ``in``).
ALIVE = Query(DEPLOYMENTS, (("state", "in"),))
WITH_OUTBOX = Query(DEPLOYMENTS, (("outboxPending", "=="),))
CHANGED = Query(DEPLOYMENTS, ((TOUCHED_AT, ">="),), ((TOUCHED_AT, "ASCENDING"),))
#: The followed list's documents (``followed/head``, ``followed/shard-N``).
FOLLOWED = "followed"
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
        self._followed = FirestoreWatchStore(firestore, FOLLOWED, tally=False)

    def _ref(self, request_id: str) -> Any:
        return self._firestore.db.collection(DEPLOYMENTS).document(doc_id(request_id))

    def get(self, request_id: str) -> dict[str, Any] | None:
        snap = call_firestore("get", lambda: self._ref(request_id).get())
        return fields_of(snap) if snap.exists else None

    def create(self, request_id: str, record: Mapping[str, Any]) -> bool:
        return create_document(self._ref(request_id), {**record, TOUCHED_AT: stamp()}) is not None

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
                fields = {**change.fields, **deletes, TOUCHED_AT: stamp()}
                batch.update(ref, fields, option=unchanged)
            return bool(change.fields or deletes)

        return transact_document(self._firestore.db, ref, decide, write)

    def alive(self, at: Any = None) -> list[Stored]:
        """Every record not UNDEPLOYED nor FAILED (one single-field ``in`` query), as of
        ``at``, as the followed list keeps them (:data:`FOLLOWED_FIELDS`)."""
        query = ALIVE.on(self._firestore.db, ALIVE_STATES).order_by("__name__")
        return partial(pages(query, FOLLOWED_FIELDS, at=at))

    def count_alive(self, at: Any) -> int:
        query = ALIVE.on(self._firestore.db, ALIVE_STATES).count(alias="n")
        result = call_firestore("count", lambda: query.get(read_time=at))
        return int(result[0][0].value)

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        # As the watch list's sync: the range's field orders first, a page resumes after the
        # last one's stamp, and the margin re-reads the second before the mark.
        query = CHANGED.on(self._firestore.db, mark - MARK_MARGIN).order_by("__name__")
        return partial(pages(query, (*FOLLOWED_FIELDS, TOUCHED_AT), most + 1, at))

    def read_followed(self) -> Saved:
        return self._followed.read_watch()

    def save_followed(self, listed: Watch | None, version: Any) -> bool:
        return self._followed.save_watch(listed, None, version)

    def on_endpoint(self, endpoint: str) -> list[dict[str, Any]]:
        """The alive records of the deployments on ``endpoint``, bounded (see the port)."""
        query = ON_ENDPOINT.on(self._firestore.db, endpoint, ALIVE_STATES).limit(ON_ENDPOINT_LIMIT)
        return call_firestore("query", lambda: [fields_of(d) for d in query.stream()])

    def with_outbox(self) -> list[dict[str, Any]]:
        """Every record with notifications not yet published (a single-field equality)."""
        query = WITH_OUTBOX.on(self._firestore.db, True)
        return call_firestore("query", lambda: [fields_of(d) for d in query.stream()])
