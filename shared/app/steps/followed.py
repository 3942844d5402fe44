"""The deployments the tick follows, from the followed list
(:mod:`shared.domain.serving.followed`), every read as of the list's own.

One routine, :func:`followed_deployments`, reads them the cheapest way the stored list allows,
as :func:`~shared.app.steps.watch.watched` does the active jobs:

- **a list that reads**: synced with the records written since its mark, then checked
  against a count of the records that have not ended; a quiet deployment costs no read of its
  record, and a list that drifted is read again whole (and the tick says so);
- **no list yet, one that cannot be read, or one built over an hour ago**: built from one
  whole read of the records that have not ended;
- **a list that did not fit its bound**: every record is read each tick, as before there was
  a list, and a build is tried again after :data:`~shared.app.steps.watch.RETRY_BUILD`.

The tick saves what it returns after using it (:func:`save_followed`), only if no other tick
saved meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.app.ports import DeploymentStore
from shared.app.steps.watch import RETRY_BUILD
from shared.domain.model.records import DeploymentRecord, Stored
from shared.domain.model.watch import Watch, key_of
from shared.domain.serving.followed import (
    MAX_FOLLOWED_CHANGED,
    built_followed,
    rebuild_due,
    records_of,
    synced_followed,
)
from shared.kernel.errors import WatchTooLarge
from shared.kernel.logs import get_logger

log = get_logger("deployments")


@dataclass(frozen=True)
class Followed:
    """The deployments the tick follows, and what :func:`save_followed` writes after it.

    ``how``: ``synced``, ``built`` or ``whole`` (the list did not fit: every record read).
    ``reads``: the records this read (a listed one is none), for the tick's log line.
    """

    records: list[DeploymentRecord]
    how: str
    reads: int
    listed: Watch | None
    version: Any
    #: False when the sync changed nothing: nothing is saved.
    dirty: bool = True


def _keyed(found: Sequence[Stored]) -> list[tuple[str, Stored]]:
    return [(key, stored) for stored in found if (key := key_of(stored)) is not None]


def followed_deployments(store: DeploymentStore, now: datetime) -> Followed:
    """Every deployment that has not ended, partial (what its machine's state needs): the
    list from ``store``, the records read as of its read.

    Raises:
        StoreUnavailable: Firestore could not be read.
    """
    saved = store.read_followed()
    listed = saved.watch
    if listed is None:
        overflowed = saved.overflowed_at
        if overflowed is not None and now - overflowed < RETRY_BUILD:
            found = store.alive()
            records = [DeploymentRecord.decode(s.raw) for s in found]
            return Followed(records, "whole", len(found), None, None)
        return _build(store, saved.at, saved.version, now)
    if rebuild_due(listed, saved.at, now):
        return _build(store, saved.at, saved.version, now)
    changed = store.changed_since(listed.mark, saved.at, MAX_FOLLOWED_CHANGED)
    if len(changed) > MAX_FOLLOWED_CHANGED:
        log.warning(
            "more deployments changed since the followed list's mark than a sync holds: "
            "built again",
            extra={"fields": {"changed": len(changed)}},
        )
        return _build(store, saved.at, saved.version, now)
    synced = synced_followed(listed, _keyed(changed), saved.at, now)
    reads = len(changed)
    counted = store.count_alive(saved.at)
    if counted != len(synced.active):
        # Drifted (a record deleted or written by hand, a write without its stamp): built
        # again from the records as of the same time.
        log.warning(
            "followed list drifted from the records: read again",
            extra={"fields": {"listed": len(synced.active), "counted": counted}},
        )
        rebuilt = _build(store, saved.at, saved.version, now)
        return Followed(
            rebuilt.records, "built", reads + rebuilt.reads, rebuilt.listed, rebuilt.version
        )
    return Followed(records_of(synced), "synced", reads, synced, saved.version, bool(changed))


def _build(store: DeploymentStore, at: Any, version: Any, now: datetime) -> Followed:
    found = store.alive(at)
    listed = built_followed(_keyed(found), at, now)
    return Followed(records_of(listed), "built", len(found), listed, version)


def save_followed(store: DeploymentStore, seen: Followed) -> bool:
    """Save the list ``seen`` brought, only if it changed and no other tick saved since ``seen``
    read it; a list past its bound is saved as overflowed (the next ticks read every record,
    and try a build again after :data:`RETRY_BUILD`). True when saved.

    Raises:
        StoreUnavailable: Firestore could not be written.
    """
    if seen.listed is None or not seen.dirty:
        return False
    try:
        done = store.save_followed(seen.listed, seen.version)
    except WatchTooLarge as exc:
        log.warning(f"{exc}: the tick reads every deployment until the list fits again")
        return store.save_followed(None, seen.version)
    if not done:
        log.info("another tick saved the followed list meanwhile: this one's is dropped")
    return done
