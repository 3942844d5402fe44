"""Objective mode: the cheapest serving policy that meets an availability objective.

A Spot deployment of N required replicas can be kept serving by three knobs
(:class:`ServingPolicy`): a warm on-demand *floor* of ``min_on_demand`` replicas always
deployed beside the Spot model (the Spot model then asks for the other ``N - min_on_demand``),
``extra_spot`` Spot replicas over the N (over-provisioning), and ``hedge``, the reactive
on-demand fallback sized to the deficit ``N - (Spot available + floor available)``. SkyServe's
SpotHedge (EuroSys 2025) exposes the same three as ``base_ondemand_fallback_replicas``,
``num_overprovision`` and ``dynamic_ondemand_fallback``, and, as SkyServe does, the floor is
part of the N (``num_spot_to_provision = target - base_ondemand_fallback_replicas``).

Which knobs an objective needs is an empirical question: availability depends on how Spot is
reclaimed, which no formula here knows. So the choice is made from a table of *measured*
rows (:class:`PolicyTable`: per replica count and knobs, the worst trace's share of minutes
with at least one replica and with all N serving, and the node-hours paid, as shares of
always-on-demand's), which ``./dev bench serving --write-table`` replays on one half of the
public preemption traces and writes beside this module. :func:`choose` takes the table as an
argument (reading it is the caller's I/O: ``shared.adapters.serving_table``) and answers the
cheapest row that meets the objective, or :func:`default_policy` (a floor of N: always
on-demand, which meets every objective) when none does.

Costs are kept as node-hour shares rather than one price: ``spot_share`` Spot and
``on_demand_share`` on-demand node-hours per node-hour of always-on-demand, so a row costs
``r * spot_share + on_demand_share`` of always-on-demand at any Spot/on-demand price ratio r,
and the order of the rows follows the deployment's own accelerator.

Pure: stdlib and frozen dataclasses, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.domain.policy.serving_knobs import MAX_EXTRA_SPOT, MAX_REPLICAS

__all__ = ["MAX_EXTRA_SPOT", "MAX_REPLICAS"]


def _count(value: object) -> bool:
    # bool is an int subclass; a count of `true` is a typo, not a number.
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ServingPolicy:
    """The knobs of a Spot deployment's serving (a ``deployModel`` request's
    ``minOnDemandReplicas``, ``extraSpotReplicas`` and ``hedge``).

    For N required replicas: an on-demand model of ``min_on_demand`` replicas is always
    deployed (the floor), the Spot model asks for ``N - min_on_demand + extra_spot``, and
    with ``hedge`` an on-demand fallback covers ``N - (Spot available + floor available)``
    after the grace period. Traffic goes to each model in proportion to the replicas it serves.

    Examples:
        >>> ServingPolicy(min_on_demand=1, extra_spot=1).spot_replicas(4)
        4
        >>> ServingPolicy(min_on_demand=5).problems(4)
        ['minOnDemandReplicas: 5 is more than the 4 replicas required']
    """

    min_on_demand: int = 0
    extra_spot: int = 0
    hedge: bool = True

    def problems(self, replicas: int) -> list[str]:
        """Every reason these knobs cannot serve ``replicas`` required replicas (none: they
        can), each at the request field it comes from."""
        out: list[str] = []
        if not _count(replicas) or not 1 <= replicas <= MAX_REPLICAS:
            out.append(f"replicas: {replicas!r} is not a count from 1 to {MAX_REPLICAS}")
        if not _count(self.min_on_demand) or self.min_on_demand < 0:
            out.append(f"minOnDemandReplicas: {self.min_on_demand!r} is not a count >= 0")
        elif _count(replicas) and self.min_on_demand > replicas:
            # The floor is part of the N required: a floor above N pays for replicas nothing
            # asked for; always on-demand is a floor of exactly N.
            out.append(
                f"minOnDemandReplicas: {self.min_on_demand} is more than the {replicas}"
                " replicas required"
            )
        if not _count(self.extra_spot) or not 0 <= self.extra_spot <= MAX_EXTRA_SPOT:
            out.append(
                f"extraSpotReplicas: {self.extra_spot!r} is not a count from 0 to {MAX_EXTRA_SPOT}"
            )
        if not isinstance(self.hedge, bool):
            out.append(f"hedge: {self.hedge!r} is not true or false")
        return out

    def check(self, replicas: int) -> ServingPolicy:
        """These knobs, when they can serve ``replicas``.

        Raises:
            ValueError: naming every problem (:meth:`problems`) at once.
        """
        problems = self.problems(replicas)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def spot_replicas(self, replicas: int) -> int:
        """The Spot model's replicas for ``replicas`` required (0: no Spot model at all)."""
        return replicas - self.min_on_demand + self.extra_spot

    def label(self, replicas: int) -> str:
        """A short name: ``floor 1 + Spot 4 + hedge``.

        Examples:
            >>> ServingPolicy(0, 0, True).label(1)
            'Spot 1 + hedge'
            >>> ServingPolicy(1, 0, False).label(1)
            'floor 1 (always on-demand)'
        """
        spot = self.spot_replicas(replicas)
        if spot == 0:
            return f"floor {self.min_on_demand} (always on-demand)"
        parts = [f"floor {self.min_on_demand}"] if self.min_on_demand else []
        parts.append(f"Spot {spot}")
        # The hedge covers N - (Spot + floor): with a floor of N there is never a deficit.
        if self.hedge and self.min_on_demand < replicas:
            parts.append("hedge")
        return " + ".join(parts)


def default_policy(replicas: int) -> ServingPolicy:
    """What objective mode keeps when no measured row meets the objective: a floor of all N
    replicas, that is always on-demand. On-demand replicas are not reclaimed, so it meets
    every availability objective (at 1x always-on-demand's cost, by definition), as far as
    on-demand capacity holds: an on-demand stockout is outside what the table measures."""
    return ServingPolicy(min_on_demand=replicas, extra_spot=0, hedge=False)


def cost_floor(spot_ratio: float, replicas: int, min_on_demand: int) -> float:
    """The least a policy keeping ``min_on_demand`` of ``replicas`` warm on-demand can cost
    while serving all of them, as a share of always-on-demand: the floor at 1x and every other
    replica on Spot at ``spot_ratio``, ``r + (1 - r) * k / N``.

    Examples:
        >>> round(cost_floor(0.4, 4, 1), 2)
        0.55
    """
    return spot_ratio + (1 - spot_ratio) * min_on_demand / replicas


def _fraction(name: str, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        return f"{name}: {value!r} is not a fraction of minutes in (0, 1]"
    return None


@dataclass(frozen=True)
class AvailabilityObjective:
    """A ``deployModel`` request's ``availabilityObjective``: the share of minutes with at
    least one replica serving (``atLeastOneReplica``) and, optionally, with all N
    (``allRequired``), each a fraction in (0, 1].

    Examples:
        >>> AvailabilityObjective(0.999).met_by(0.9995, 0.9)
        True
        >>> AvailabilityObjective(0.999, all_required=0.99).met_by(0.9995, 0.9)
        False

    Raises:
        ValueError: naming every field that is not such a fraction.
    """

    at_least_one: float
    all_required: float | None = None

    def __post_init__(self) -> None:
        problems = [_fraction("atLeastOneReplica", self.at_least_one)]
        if self.all_required is not None:
            problems.append(_fraction("allRequired", self.all_required))
        found = [p for p in problems if p]
        if found:
            raise ValueError("; ".join(found))

    def met_by(self, at_least_one: float, all_required: float) -> bool:
        return at_least_one >= self.at_least_one and (
            self.all_required is None or all_required >= self.all_required
        )


@dataclass(frozen=True)
class Measured:
    """One row of the table: ``policy`` replayed for ``replicas`` required replicas.

    ``at_least_one`` and ``all_required`` are the *worst* trace's shares of minutes (an
    objective is met on every trace, not on average); ``spot_share`` and ``on_demand_share``
    are the node-hours paid on each capacity, per node-hour of always-on-demand (the mean over
    the traces): the row costs :meth:`cost` of always-on-demand.
    """

    replicas: int
    policy: ServingPolicy
    at_least_one: float
    all_required: float
    spot_share: float
    on_demand_share: float

    def cost(self, spot_ratio: float) -> float:
        """The cost against always-on-demand when Spot costs ``spot_ratio`` of on-demand."""
        return spot_ratio * self.spot_share + self.on_demand_share


@dataclass(frozen=True)
class PolicyTable:
    """The measured rows objective mode chooses from, with what they were measured on:
    ``spot_ratio`` (Spot/on-demand of ``accelerator``, the ratio costs are compared at unless
    the caller names its own) and the trace files ``learned_on``."""

    rows: tuple[Measured, ...]
    spot_ratio: float
    accelerator: str = ""
    learned_on: tuple[str, ...] = ()

    def for_replicas(self, replicas: int) -> tuple[Measured, ...]:
        return tuple(row for row in self.rows if row.replicas == replicas)


@dataclass(frozen=True)
class Choice:
    """What objective mode keeps: ``policy``, the table's ``row`` it was chosen by (None for
    the default), and why, in words."""

    policy: ServingPolicy
    row: Measured | None
    reason: str

    @property
    def default(self) -> bool:
        return self.row is None


def choose(
    objective: AvailabilityObjective,
    replicas: int,
    table: PolicyTable,
    spot_ratio: float | None = None,
) -> Choice:
    """The cheapest measured policy for ``replicas`` that meets ``objective``, at
    ``spot_ratio`` (default: the table's own).

    Ties go to the higher availability (at least one, then all required), then to the fewer
    on-demand and extra Spot replicas, then to the hedge. A replica count the table has no row
    for, or an objective no row meets, gets :func:`default_policy`: always on-demand, which
    meets it.

    Examples:
        >>> spot = Measured(1, ServingPolicy(0, 0, True), 0.95, 0.95, 0.9, 0.3)
        >>> floor = Measured(1, ServingPolicy(1, 0, False), 1.0, 1.0, 0.0, 1.0)
        >>> table = PolicyTable((spot, floor), spot_ratio=0.4)
        >>> choose(AvailabilityObjective(0.9), 1, table).policy
        ServingPolicy(min_on_demand=0, extra_spot=0, hedge=True)
        >>> choose(AvailabilityObjective(0.99), 1, table).policy.min_on_demand
        1
        >>> choose(AvailabilityObjective(0.99), 4, table).reason
        'the table has no row for 4 replica(s): always on-demand'

    Raises:
        ValueError: when ``replicas`` is not a count from 1 to :data:`MAX_REPLICAS`, or
            ``spot_ratio`` is not a positive number.
    """
    if not _count(replicas) or not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas: {replicas!r} is not a count from 1 to {MAX_REPLICAS}")
    ratio = table.spot_ratio if spot_ratio is None else spot_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
        raise ValueError(f"spot_ratio: {ratio!r} is not a positive number")
    rows = table.for_replicas(replicas)
    fits = [
        row
        for row in rows
        if objective.met_by(row.at_least_one, row.all_required)
        and not row.policy.problems(replicas)
    ]
    if not fits:
        why = (
            f"the table has no row for {replicas} replica(s)"
            if not rows
            else f"none of the {len(rows)} measured policies for {replicas} replica(s) meets it"
        )
        return Choice(default_policy(replicas), None, f"{why}: always on-demand")
    best = min(
        fits,
        key=lambda row: (
            row.cost(ratio),
            -row.at_least_one,
            -row.all_required,
            row.policy.min_on_demand,
            row.policy.extra_spot,
            # Measured alike, the hedge costs nothing where it never fires and covers a
            # deficit where it would.
            not row.policy.hedge,
        ),
    )
    which = (
        "the only measured policy that meets it"
        if len(fits) == 1
        else f"the cheapest of the {len(fits)} measured policies that meet it"
    )
    reason = f"{which}: {best.cost(ratio):.2f}x always-on-demand at Spot/on-demand {ratio:.2f}"
    return Choice(best.policy, best, reason)
