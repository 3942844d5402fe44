"""A checkpoint and the object listings it is found in: plain values, with no rule of
which checkpoint is complete (that is :mod:`shared.domain.policy.checkpoints`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its URI (directories end with ``/``), step and commit time.

    Examples:
        >>> from datetime import UTC
        >>> cp = Checkpoint("gs://bkt/ck/step-200/", 200, datetime(2025, 1, 2, tzinfo=UTC))
        >>> cp.to_dict()
        {'uri': 'gs://bkt/ck/step-200/', 'step': 200, 'at': '2025-01-02T00:00:00+00:00'}
    """

    uri: str
    step: int | None
    at: datetime

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form; ``at`` is ISO 8601 so events and records read the same."""
        return {"uri": self.uri, "step": self.step, "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> Checkpoint:
        """Inverse of :meth:`to_dict` (``at`` may also be a ``datetime``, as Firestore gives)."""
        at = raw["at"]
        when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
        step = raw.get("step")
        return cls(str(raw["uri"]), int(step) if isinstance(step, int) else None, when)


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its full name in the bucket, update time and size in bytes."""

    name: str
    updated: datetime
    size: int


@dataclass(frozen=True)
class Listing:
    """What one delimiter listing (``delimiter="/"``) shows of a directory.

    Attributes:
        objects: the objects directly in the directory.
        subdirectories: its subdirectories, as full prefixes ending with ``/``.
        truncated: True when a bound on work cut the listing short.
    """

    objects: tuple[ObjectInfo, ...] = ()
    subdirectories: tuple[str, ...] = ()
    truncated: bool = False
