"""Changes, and what writing one did.

A *change* is a pending write: what a decision asks the store to write back to a record.
:class:`Change` is a job record's, :class:`DeploymentChange` a deployment record's; both are
plain fields and deletes, applied in the store's transaction on a fresh read. :class:`Written`
is what one such write did, at every level (the store's document, the repository's record)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
class DeploymentChange:
    """One write to a deployment record: fields to set, fields to delete."""

    fields: dict[str, Any]
    deletes: tuple[str, ...] = ()

    def applied_to(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """The record document as this change leaves it (see :meth:`Change.applied_to`)."""
        after = dict(document)
        after.update(self.fields)
        for name in self.deletes:
            after.pop(name, None)
        return after


#: Either kind of change (what the Firestore adapters' one conditional write takes).
AnyChange = TypeVar("AnyChange", Change, DeploymentChange)
#: The record after a write: the store's document (with its version), or the repository's
#: typed record.
R = TypeVar("R")


@dataclass(frozen=True)
class Written(Generic[AnyChange, R]):
    """What one conditional write did: the change written (None: nothing was written) and the
    record as it now stands, for the next write to decide on without a read; and the result
    of the decision that made it, when it gave one (:class:`Decided`)."""

    change: AnyChange | None
    record: R
    result: Any = None


C = TypeVar("C")
T = TypeVar("T")


@dataclass(frozen=True)
class Decided(Generic[C, T]):
    """A decision that also says what it decided: the change to write (None: nothing) and a
    result the store hands back with the record it leaves (:attr:`Written.result`), so no
    caller passes a result out of a decision through a closure. A decision may run more than
    once (a conditional write that lost a race decides again on a fresh read): the result
    handed back is the last run's, the one whose change was written."""

    change: C | None
    result: T
