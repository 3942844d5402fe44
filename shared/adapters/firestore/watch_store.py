"""FirestoreWatchStore: the tick's watch list on Cloud Firestore (:mod:`shared.domain.model.watch`):
``watch/head``, ``watch/shard-N`` (the list, compressed) and ``watch/tally`` (what the status
page reads), read in one batch get and saved in one batch.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc

from shared.adapters.firestore.database import Firestore, call_firestore
from shared.domain.model import tally as tallies
from shared.domain.model import watch as watches
from shared.domain.model.tally import Tally
from shared.domain.model.watch import Saved, Watch

WATCH = "watch"
HEAD = "head"
TALLY = "tally"


def _to_microseconds(at: datetime) -> datetime:
    """``at`` truncated to the microsecond (a read time may carry nanoseconds; a read *at* a
    time must not), as a plain datetime in UTC."""
    t = at.astimezone(UTC)
    return datetime(t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond, UTC)


class FirestoreWatchStore:
    """The watch list and its tally in Firestore, on a shared :class:`Firestore`.

    With ``collection`` and ``tally=False``, another list of partial records kept the same
    way, with no tally: the admission line (``line/head``, ``line/shard-N``,
    :mod:`shared.domain.admission.line`)."""

    def __init__(
        self, firestore: Firestore, collection: str = WATCH, *, tally: bool = True
    ) -> None:
        self._firestore = firestore
        self._collection = collection
        self._tally = tally

    def _ref(self, name: str) -> Any:
        return self._firestore.db.collection(self._collection).document(name)

    def read_watch(self) -> Saved:
        refs = [self._ref(HEAD), *([self._ref(TALLY)] if self._tally else [])]
        refs += [self._ref(f"shard-{i}") for i in range(watches.MAX_SHARDS)]

        def read() -> dict[str, Any]:
            # One batch get: every document as of one read time, the mark's.
            return {s.id: s for s in self._firestore.db.get_all(refs)}

        found = call_firestore(f"get {self._collection}", read)
        head = found.get(HEAD)
        # Every later read of the sync is as of this one (to the microsecond, as read times
        # must be): what they find is one consistent state of the records.
        at = _to_microseconds(min(s.read_time for s in found.values()))
        if head is None or not head.exists:
            return Saved(None, None, None, None, at)
        raw = head.to_dict() or {}
        overflowed = raw.get("overflowedAt")
        if isinstance(overflowed, datetime):
            return Saved(None, None, overflowed, head.update_time, at)
        count = raw.get("shards")
        shards = []
        for i in range(count if isinstance(count, int) else 0):
            shard = found.get(f"shard-{i}")
            data = (
                (shard.to_dict() or {}).get("data") if shard is not None and shard.exists else None
            )
            if not isinstance(data, bytes):
                return Saved(None, None, None, head.update_time, at)
            shards.append(data)
        tally = found.get(TALLY)
        return Saved(
            watches.decode(shards),
            tallies.decode(tally.to_dict() if tally is not None and tally.exists else None),
            None,
            head.update_time,
            at,
        )

    def save_watch(
        self, watch: Watch | None, tally: Tally | None, version: Any, *, list_too: bool = True
    ) -> bool:
        from google.cloud import firestore

        db = self._firestore.db
        shards = watches.encode(watch) if watch is not None else []
        head: dict[str, Any] = {"format": watches.FORMAT, "savedAt": firestore.SERVER_TIMESTAMP}
        if list_too:
            head["shards"] = len(shards)
            head["overflowedAt"] = firestore.SERVER_TIMESTAMP if watch is None else None
        batch = db.batch()
        head_ref = self._ref(HEAD)
        if version is None:
            batch.create(head_ref, head)
        else:
            batch.update(head_ref, head, option=db.write_option(last_update_time=version))
        for i in range(watches.MAX_SHARDS if list_too else 0):
            ref = self._ref(f"shard-{i}")
            if i < len(shards):
                batch.set(ref, {"data": shards[i]})
            else:
                batch.delete(ref)
        if tally is not None:
            batch.set(self._ref(TALLY), tallies.encode(tally))
        elif self._tally:
            batch.delete(self._ref(TALLY))
        try:
            call_firestore(f"save {self._collection}", batch.commit)
        except (gexc.FailedPrecondition, gexc.Conflict, gexc.NotFound):
            return False  # another tick saved (or created) it since this one read it
        return True
