"""The public Spot traces of "Can't Be Late" (NSDI 2024), loaded and replayed cyclically.

A trace file is ``{"metadata": {"gap_seconds": G}, "data": [...]}``: one value every G
seconds, the nodes held (``preemption/``) or obtainable (``availability/``). A
:class:`Replay` answers the two questions the replay asks of one: when capacity for ``need``
nodes is next there, and when capacity held from a moment is next taken away (for a gang,
when *any* of its nodes is).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: The traces live beside the clone (``../shared/traces``); FLEXJOBS_TRACES or --traces moves
#: them. The serving benchmark replays the same folder.
DEFAULT_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "spot-traces"

#: ``us-east-1f_v100_1.json`` -> zone ``us-east-1f``, region ``us-east-1``;
#: ``us-central1-a_c3-88.json`` -> ``us-central1-a``, ``us-central1``.
_ZONE = re.compile(r"^(?P<zone>(?P<region>[a-z]+-[a-z]+-?\d+)(?:-?[a-z]))_")


@dataclass(frozen=True)
class Trace:
    """One trace file: a value every ``gap`` seconds (nodes held, or nodes obtainable)."""

    name: str
    gap: float
    values: tuple[int, ...]

    @classmethod
    def load(cls, path: Path, root: Path) -> Trace:
        document = json.loads(path.read_text(encoding="utf-8"))
        gap = float(document["metadata"]["gap_seconds"])
        return cls(path.relative_to(root).as_posix(), gap, tuple(int(v) for v in document["data"]))

    @property
    def cloud(self) -> str:
        """``aws`` or ``gcp``: the collection folder names it (``gcp-04-30-2023``)."""
        return "gcp" if "/gcp-" in f"/{self.name}" else "aws"

    @property
    def region(self) -> str:
        """The trace's own region, from its file name (``us-east-1``, ``us-central1``)."""
        match = _ZONE.match(self.name.rsplit("/", 1)[-1])
        if match is None:
            raise ValueError(f"no zone in the trace name {self.name!r}")
        return match["region"]

    @property
    def location(self) -> str:
        """The region as the product names locations (a Vertex AI region name): GCP's as is,
        AWS's under an ``aws-`` prefix without the hyphen before the digit, so the two
        clouds' names never meet (``us-east-1`` -> ``aws-us-east1``).

        Examples:
            >>> Trace("preemption/1-node/aws-04-22-2023/us-east-1c_v100_1.json", 32.0, ()).location
            'aws-us-east1'
        """
        if self.cloud == "gcp":
            return self.region
        head, _, digits = self.region.rpartition("-")
        return f"aws-{head}{digits}"


def load_all(root: Path) -> list[Trace]:
    """Every trace under ``root``, sorted by name (so a seed draws the same jobs anywhere)."""
    found = sorted(root.rglob("*.json"))
    if not found:
        raise SystemExit(f"no traces under {root}; pass --traces or set FLEXJOBS_TRACES")
    return [Trace.load(p, root) for p in found]


def _distances(ok: Sequence[bool], want: bool) -> list[float]:
    """Ticks from each tick to the next (cyclically, itself included) where ``ok`` is
    ``want``; inf when there is none."""
    n = len(ok)
    out = [math.inf] * n
    nearest = math.inf
    for j in range(2 * n - 1, -1, -1):
        if ok[j % n] == want:
            nearest = j
        if j < n:
            out[j] = nearest - j
    return out


class Replay:
    """A trace replayed cyclically from a tick offset: capacity is there at time ``t`` when
    the tick covering ``t`` holds at least ``need`` nodes.

    Examples:
        >>> r = Replay(Trace("t", 600.0, (0, 1, 1, 0)), need=1, offset=0)
        >>> r.available_at(0.0), r.lost_at(600.0), r.available(700.0)
        (600.0, 1800.0, True)
    """

    def __init__(self, trace: Trace, need: int, offset: int) -> None:
        ok = [v >= need for v in trace.values]
        self.trace, self.need, self.offset, self.gap = trace, need, offset, trace.gap
        self._n = len(ok)
        self._to_ok = _distances(ok, True)
        self._to_gone = _distances(ok, False)

    def _tick(self, t: float) -> tuple[int, int]:
        k = int(t // self.gap)
        return k, (self.offset + k) % self._n

    def available_at(self, t: float) -> float:
        """The first time at or after ``t`` with capacity (inf: never)."""
        k, i = self._tick(t)
        ahead = self._to_ok[i]
        return t if ahead == 0 else (k + ahead) * self.gap

    def lost_at(self, t: float) -> float:
        """When capacity held from ``t`` (there at ``t``) is taken away: the next drop below
        ``need`` (for a gang, the first of its nodes reclaimed); inf when it never drops."""
        k, i = self._tick(t)
        return (k + self._to_gone[i]) * self.gap

    def available(self, t: float) -> bool:
        return self.available_at(t) == t
