"""The read side's port: paged, filtered listings of job and deployment records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from shared.domain.model.tally import Tally
from shared.status.listing import Listing, Page


class JobViews(Protocol):
    """What the status page reads (Firestore ``jobs``, their ``attempts`` and
    ``deployments``): read-only, every read bounded (a page, a limit or a count) and of the
    fields the page shows (:mod:`shared.status.listing` names them).

    Every method raises StoreUnavailable when Firestore fails, whatever the fault.
    """

    def jobs(self, listing: Listing) -> Page:
        """A page of job records (``LIST_FIELDS``), newest first by ``createdAt`` then
        document id, in ``listing.states`` (any when empty), created at or after
        ``listing.since``, after ``listing.after``; at most ``listing.size`` rows."""
        ...

    def job(self, request_id: str) -> dict[str, Any] | None:
        """One job record (``JOB_FIELDS``), or None."""
        ...

    def attempts(self, request_id: str, numbers: Sequence[int]) -> list[dict[str, Any]]:
        """A job's attempt documents (``ATTEMPT_FIELDS``) of ``numbers`` that exist, in
        attempt order (``numbers``: :func:`~shared.status.listing.attempt_numbers`)."""
        ...

    def count(self, state: str) -> int:
        """How many job records are in ``state`` (an aggregation: no document is read)."""
        ...

    def ended_since(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        """Job records (``TOTAL_FIELDS``) that ended at or after ``since``, newest end first,
        at most ``limit``."""
        ...

    def rows(self, request_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The job records (``LIST_FIELDS``) of ``request_ids`` that exist, in that order (one
        batch get by key: no query)."""
        ...

    def tally(self) -> Tally | None:
        """What the tick last tallied (``watch/tally``), or None (no tick since, or one that
        cannot be read)."""
        ...

    def deployments(self, listing: Listing) -> Page:
        """A page of deployment records (``DEPLOYMENT_LIST_FIELDS``), newest first like
        :meth:`jobs` (``listing.states`` and ``since`` are not used)."""
        ...

    def deployment(self, request_id: str) -> dict[str, Any] | None:
        """One deployment record (``DEPLOYMENT_FIELDS``), or None."""
        ...

    def admission_summary(self) -> dict[str, Any] | None:
        """What the tick last wrote of admission (``admission/summary``), or None (admission
        off, or no tick since it was turned on)."""
        ...
