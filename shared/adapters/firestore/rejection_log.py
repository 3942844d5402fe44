"""FirestoreRejectionLog: refused requests on Cloud Firestore (``rejections/{id}``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.adapters.firestore.database import Firestore, call_firestore
from shared.domain.model.ids import doc_id

REJECTIONS = "rejections"


class FirestoreRejectionLog:
    """Refused requests in Firestore ``rejections/{id}``, on a shared :class:`Firestore`."""

    def __init__(self, firestore: Firestore) -> None:
        self._firestore = firestore

    def _ref(self, rejection_id: str) -> Any:
        return self._firestore.db.collection(REJECTIONS).document(doc_id(rejection_id))

    def get(self, rejection_id: str) -> dict[str, Any] | None:
        snap = call_firestore("get rejection", self._ref(rejection_id).get)
        return snap.to_dict() if snap.exists else None

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        ref = self._ref(rejection_id)
        call_firestore("set rejection", lambda: ref.set(dict(document)))
