"""Unit tests write job records as Firestore stores them (plain documents); the decisions read
them decoded, as :class:`shared.app.repository.jobs.JobRecords` hands them over. :func:`decoded`
lets a test call a decision with a document."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from shared.domain.model.records import JobRecord


def decoded(decision: Callable[..., Any]) -> Callable[..., Any]:
    """``decision``, taking its first argument (the record) as a stored document."""

    @functools.wraps(decision)
    def call(record: Any, *args: Any, **kwargs: Any) -> Any:
        typed = JobRecord.decode(record) if isinstance(record, Mapping) else record
        return decision(typed, *args, **kwargs)

    return call
