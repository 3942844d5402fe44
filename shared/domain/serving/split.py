"""The traffic split of a hedged deployment: integer shares that sum to 100.

The Spot model and its fallback share the percent the Spot model had (the *pool*), in
proportion to the replicas each can serve now (``status.availableReplicaCount``); the
endpoint's other deployed models keep their shares exactly. ``Endpoint.traffic_split`` takes
integer percents that must add up to 100, so the pool is divided by largest remainder
(Hamilton's method), which keeps the sum exact and moves no share by a whole point more than
its proportion asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from shared.domain.serving.model import ObservedEndpoint


def largest_remainder(total: int, weights: Sequence[int]) -> tuple[int, ...]:
    """``total`` divided in proportion to ``weights``, as integers that sum to ``total``.

    Each part gets the floor of its quota, and the points left over go to the largest
    remainders (ties: the larger weight, then the earlier part). A part of weight 0 gets 0.

    Examples:
        >>> largest_remainder(100, [1, 1, 1])
        (34, 33, 33)
        >>> largest_remainder(70, [3, 0, 1])
        (53, 0, 17)

    Raises:
        ValueError: when ``total`` is negative or no weight is positive (nothing to divide by).
    """
    if total < 0 or any(w < 0 for w in weights):
        raise ValueError("largest_remainder: total and weights must be >= 0")
    whole = sum(weights)
    if whole <= 0:
        raise ValueError("largest_remainder: at least one weight must be positive")
    floors = [total * w // whole for w in weights]
    remainders = [total * w % whole for w in weights]
    left = total - sum(floors)
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], -weights[i], i))
    for i in order[:left]:
        floors[i] += 1
    return tuple(floors)


def hedged_split(
    observed: ObservedEndpoint, ours: Sequence[str], weights: Sequence[int]
) -> Mapping[str, int] | None:
    """The endpoint's split with the pool of ``ours`` (the Spot model, then the fallback)
    divided by ``weights``; every other model keeps its share.

    None when the split must not change: no model of ours can serve (``weights`` all 0, so
    there is nowhere to move traffic without giving it to a model with no replica, or taking
    it from another model), or the endpoint takes no traffic at all (an empty split).

    Examples:
        >>> from shared.domain.serving.model import ObservedEndpoint
        >>> endpoint = ObservedEndpoint("e", (), {"spot": 80, "other": 20})
        >>> dict(hedged_split(endpoint, ["spot", "fallback"], [1, 3]))
        {'fallback': 60, 'other': 20, 'spot': 20}
        >>> hedged_split(endpoint, ["spot", "fallback"], [0, 0]) is None
        True
    """
    if not observed.traffic_split or sum(weights) <= 0:
        return None
    pool = sum(observed.share(i) for i in ours)
    shares = dict(zip(ours, largest_remainder(pool, weights), strict=True))
    split = {k: v for k, v in observed.traffic_split.items() if k not in ours}
    split.update({k: v for k, v in shares.items() if v > 0})
    return MappingProxyType(dict(sorted(split.items())))
