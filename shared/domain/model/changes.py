"""Pending writes: what a decision asks the store to write back to a record.

:class:`Change` is a job record's, :class:`Write` a deployment record's; both are plain
fields and deletes, applied in the store's transaction on a fresh read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
if TYPE_CHECKING:
    pass
from shared.domain.model.states import JobState


@dataclass(frozen=True)
class Change:
    """One write to a job record: fields to set on it, fields to delete from it, and fields
    merged into one of its attempt documents (``attempt_no``; the record's current attempt
    when None). ``state`` is the record's state after the write."""

    state: JobState
    record: dict[str, Any]
    attempt: dict[str, Any] = field(default_factory=dict)
    deletes: tuple[str, ...] = ()
    attempt_no: int | None = None

    def applied_to(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """The record document as this change leaves it (its top-level fields set or
        deleted, as Firestore's update does), for the next write to decide on without a
        read."""
        after = dict(document)
        after.update(self.record)
        for name in self.deletes:
            after.pop(name, None)
        return after


@dataclass(frozen=True)
class Write:
    """One write to a deployment record: fields to set, fields to delete."""

    fields: dict[str, Any]
    deletes: tuple[str, ...] = ()
