"""The region fields of an AUTO request: where its attempts may run besides ``location``.

- ``regions``: other Vertex AI regions AUTO may move the job to, at an attempt boundary,
  when capacity there is cheaper by more than the move costs
  (:mod:`shared.domain.capacity.regions`). At most :data:`MAX_REGIONS` regions in all with
  ``location``; each a region name (:func:`shared.kernel.regions.is_region`), none twice.
- ``checkpointSizeGb`` (optional, with ``regions``): the checkpoint's size, what a move reads
  across regions. Absent: the rule's cautious default.
- ``pinnedRegion`` (optional): ``true`` pins the job, and its data, to ``location``: no region
  rule moves it, so it takes no ``regions``.

Like the deadline fields they are flexjobs' own envelope fields, refused without AUTO (nothing
else would honour them), and checked on plain values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.domain.model.values import show
from shared.kernel.errors import FieldError
from shared.kernel.regions import REGION_HINT, REGION_PATTERN, is_region

REGION_FIELDS: Final = ("regions", "checkpointSizeGb", "pinnedRegion")

#: At most this many regions in all, ``location`` included: each is a decision per attempt, a
#: listing per tick while the job is watched, and a place a stray may be left.
MAX_REGIONS: Final = 8
#: 100 TB: far above any checkpoint, and keeps the cost arithmetic plain.
MAX_CHECKPOINT_GB: Final = 100_000


@dataclass(frozen=True)
class RegionOptions:
    """The region fields of stored options, typed (see the module docstring).

    Examples:
        >>> RegionOptions.read({"regions": ["us-east1"], "checkpointSizeGb": 12.5})
        RegionOptions(regions=('us-east1',), checkpoint_gb=12.5, pinned=False)
        >>> RegionOptions.read({"regions": ["not a region"]}).regions
        ()
    """

    regions: tuple[str, ...] = ()
    checkpoint_gb: float = 0.0
    pinned: bool = False

    @classmethod
    def read(cls, options: Mapping[str, object]) -> RegionOptions:
        """Options were validated at intake; what cannot be read here (a hand-edited record)
        reads as absent: no other region, the default size."""
        raw = options.get("regions")
        listed = raw if isinstance(raw, list) else []
        regions = tuple(dict.fromkeys(r for r in listed[:MAX_REGIONS] if is_region(r)))
        size = options.get("checkpointSizeGb")
        return cls(
            regions=regions,
            checkpoint_gb=_size(size) or 0.0,
            pinned=options.get("pinnedRegion") is True,
        )

    def allowed(self, location: str) -> tuple[str, ...]:
        """``location`` first, then the others the request allows (none when pinned)."""
        if self.pinned:
            return (location,)
        return tuple(dict.fromkeys((location, *self.regions)))[:MAX_REGIONS]


def _size(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0 < number <= MAX_CHECKPOINT_GB else None


def check_region_options(
    options: Mapping[str, object], *, auto: bool, strategy_path: str, location: str | None
) -> list[FieldError]:
    """Every problem with a training request's region fields; empty means valid.

    Examples:
        >>> def check(options, auto=True, location="us-central1"):
        ...     errors = check_region_options(options, auto=auto, location=location,
        ...         strategy_path="customJob.jobSpec.scheduling.strategy")
        ...     return [e.path for e in errors]
        >>> check({"regions": ["us-east1", "europe-west4"], "checkpointSizeGb": 40})
        []
        >>> check({"regions": ["us-east1", "us-east1", "US-WEST1"]})
        ['regions[1]', 'regions[2]']
        >>> check({"regions": ["us-east1"]}, auto=False)
        ['regions']
        >>> check({"regions": ["us-east1"], "pinnedRegion": True})
        ['pinnedRegion']
        >>> check({"regions": ["us-central1"]})
        ['regions']
    """
    present = [key for key in REGION_FIELDS if options.get(key) is not None]
    if not auto:
        return [
            FieldError(
                key,
                f"applies only when {strategy_path} is AUTO (nothing else moves a job between "
                "regions); remove it or set the strategy to AUTO",
            )
            for key in present
        ]
    errors = _check_regions(options.get("regions"), location)
    size = options.get("checkpointSizeGb")
    if size is not None and _size(size) is None:
        errors.append(
            FieldError(
                "checkpointSizeGb",
                f"must be a number above 0 and at most {MAX_CHECKPOINT_GB} (GB), not {show(size)}",
            )
        )
    if size is not None and not options.get("regions"):
        errors.append(
            FieldError("checkpointSizeGb", "applies only with regions (what a move would read)")
        )
    pinned = options.get("pinnedRegion")
    if pinned is not None and not isinstance(pinned, bool):
        errors.append(FieldError("pinnedRegion", f"must be true or false, not {show(pinned)}"))
    if pinned is True and options.get("regions"):
        errors.append(
            FieldError(
                "pinnedRegion",
                "pins the job to its location, so it cannot be combined with regions; "
                "remove one of them",
            )
        )
    return errors


def _check_regions(raw: object, location: str | None) -> list[FieldError]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        return [FieldError("regions", f"must be a non-empty list of region names, not {show(raw)}")]
    errors: list[FieldError] = []
    others = [r for r in raw if r != location]
    if len(raw) > MAX_REGIONS or len(others) > MAX_REGIONS - 1:
        errors.append(
            FieldError("regions", f"allows at most {MAX_REGIONS} regions, location included")
        )
    seen: set[str] = set()
    for i, region in enumerate(raw[:MAX_REGIONS]):
        if not is_region(region):
            errors.append(FieldError(f"regions[{i}]", f"must be {REGION_HINT}, not {show(region)}"))
        elif region in seen:
            errors.append(FieldError(f"regions[{i}]", f"names {region} twice; list each once"))
        else:
            seen.add(region)
    if location is not None and seen and not seen - {location}:
        # Nothing to move to: accepted, it would read as a choice of regions that AUTO never has.
        errors.append(
            FieldError(
                "regions",
                f"names only the request's location ({location}); list another region AUTO may "
                "move the job to, or remove regions",
            )
        )
    return errors


#: A resource name that lives in one region: ``projects/p/locations/R/...`` (a KMS key, an
#: experiment, a TensorBoard), ``projects/p/regions/R/...`` (a PSC network attachment), or
#: ``projects/p/zones/R-z/...`` (a reservation). Vertex runs a job only with resources of its
#: own region, so such a body can run nowhere else.
_IN_REGION: Final = re.compile(
    rf"(?:^|/)(?:locations|regions)/({REGION_PATTERN})(?:/|$)|(?:^|/)zones/({REGION_PATTERN})-[a-z](?:/|$)"
)
#: Fields bound to the request's region that name none: a persistent resource is regional.
_BOUND_BY_NAME: Final = ("persistentResourceId",)
#: What the job's own code reads (its arguments, environment, labels): text Vertex never
#: resolves as a resource, and a job may read another region's data from anywhere.
_NOT_RESOURCES: Final = ("containerSpec", "pythonPackageSpec", "labels")


def region_bound(body: Any, path: str = "") -> Iterator[tuple[str, str | None]]:
    """Each (path, region) of ``body`` bound to one region: a resource name naming its
    region, or a field regional by kind (region None). Walks the whole canonical body (already
    bounded in bytes by intake), without recursion.

    Examples:
        >>> key = "projects/p/locations/us-east1/keyRings/r/cryptoKeys/k"
        >>> list(region_bound({"encryptionSpec": {"kmsKeyName": key}}, "customJob"))
        [('customJob.encryptionSpec.kmsKeyName', 'us-east1')]
        >>> list(region_bound({"jobSpec": {"persistentResourceId": "pr", "network": "x"}}))
        [('jobSpec.persistentResourceId', None)]
        >>> list(region_bound({"v": ["projects/p/zones/us-west1-b/reservations/r"]}))
        [('v[0]', 'us-west1')]
        >>> list(region_bound({"containerSpec": {"args": ["projects/p/locations/us-east1/x"]}}))
        []
    """
    stack: list[tuple[str, Any]] = [(path, body)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict):
            for key, value in reversed(node.items()):
                at = f"{where}.{key}" if where else str(key)
                if key in _BOUND_BY_NAME and value:
                    yield at, None
                elif key not in _NOT_RESOURCES:
                    stack.append((at, value))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(node))))
        elif isinstance(node, str) and (found := _IN_REGION.search(node)):
            yield where, found.group(1) or found.group(2)


def check_region_moves(
    body: Any, body_path: str, location: str | None, regions: tuple[str, ...]
) -> list[FieldError]:
    """A body AUTO may run in any of ``regions`` (besides ``location``) must name nothing that
    lives in one region only: Vertex would refuse the attempt in any other, days later.

    Examples:
        >>> key = "projects/p/locations/us-east1/keyRings/r/cryptoKeys/k"
        >>> body = {"encryptionSpec": {"kmsKeyName": key}}
        >>> found = check_region_moves(body, "customJob", "us-east1", ("us-west1",))
        >>> [e.message[:40] for e in found]
        ['names a resource of us-east1 only, but r']
        >>> check_region_moves(body, "customJob", "us-east1", ())
        []
    """
    if not regions:
        return []
    places = sorted({*regions, *([location] if location else [])})
    errors = []
    for at, region in region_bound(body, body_path):
        if region is None:
            what = "is bound to the request's region"
        elif all(r == region for r in places):
            continue
        else:
            what = f"names a resource of {region} only"
        errors.append(
            FieldError(
                at,
                f"{what}, but regions lets AUTO run attempts in {', '.join(places)}; remove "
                "regions (or set pinnedRegion), or remove the field",
            )
        )
    return errors
