"""Estimate what a job's GPU time cost, and what it saved against on-demand capacity.

Prices are USD per GPU-hour with the machine included (see ``prices.yaml`` beside this module
for the figures, their sources and which are estimates). This module does no I/O: it parses the
text it is given (:meth:`PriceTable.load`), and everything else is arithmetic. The functions'
table is that file, read by :func:`shared.adapters.packaged_prices.load_packaged_prices`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from types import MappingProxyType

import yaml

from shared.domain.model.strategies import Strategy, runs_as

#: The columns of a price row, in the order prices.yaml lists them.
STRATEGY_KEYS = (Strategy.STANDARD, Strategy.SPOT, Strategy.FLEX_START)
_CENT = Decimal("0.01")
_SECONDS_PER_HOUR = Decimal(3600)


@dataclass(frozen=True)
class Rates:
    """USD per GPU-hour of one accelerator type, per scheduling strategy."""

    standard: Decimal
    spot: Decimal
    flex_start: Decimal

    def for_strategy(self, strategy: str) -> Decimal:
        rates = {
            Strategy.STANDARD: self.standard,
            Strategy.SPOT: self.spot,
            Strategy.FLEX_START: self.flex_start,
        }
        return rates[Strategy(strategy)]


@dataclass(frozen=True)
class CostEstimate:
    """Cost of some GPU time, its on-demand equivalent and the difference, in USD (cents).

    ``priced`` is False when the accelerator or strategy is not in the table; the amounts
    are then all zero rather than a guess.
    """

    cost_usd: float
    on_demand_usd: float
    savings_usd: float
    priced: bool = True

    def to_dict(self) -> dict[str, float | bool]:
        return {
            "costUsd": self.cost_usd,
            "onDemandUsd": self.on_demand_usd,
            "savingsUsd": self.savings_usd,
            "priced": self.priced,
        }


UNPRICED = CostEstimate(0.0, 0.0, 0.0, priced=False)


def _rate(path: str, value: object, problems: list[str]) -> Decimal:
    # bool is an int subclass; a price of `true` is a typo, not a number.
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        problems.append(f"{path}: must be a non-negative number (USD per GPU-hour)")
        return Decimal(0)
    return Decimal(str(value))


@dataclass(frozen=True)
class PriceTable:
    """Prices by accelerator type. Build with :meth:`load` from a price document's text, or
    with the rates themselves.

    Examples:
        >>> table = PriceTable.load(
        ...     "accelerators: {NVIDIA_L4: {STANDARD: 1.0, SPOT: 0.4, FLEX_START: 0.5}}")
        >>> table.estimate("NVIDIA_L4", "SPOT", gpu_seconds=7200)
        CostEstimate(cost_usd=0.8, on_demand_usd=2.0, savings_usd=1.2, priced=True)
    """

    rates: Mapping[str, Rates]
    region: str = ""
    as_of: str = ""

    @classmethod
    def load(cls, text: str) -> PriceTable:
        """Parse a YAML (or JSON) price document shaped like ``shared/domain/policy/prices.yaml``.

        Raises:
            ValueError: listing every problem, with paths such as
                ``accelerators.NVIDIA_L4.SPOT``.
        """
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"price table is not YAML or JSON: {exc}") from exc
        accelerators = document.get("accelerators") if isinstance(document, dict) else None
        if not isinstance(accelerators, dict) or not accelerators:
            raise ValueError("price table: 'accelerators' must be a non-empty mapping")
        problems: list[str] = []
        rates: dict[str, Rates] = {}
        for name, row in accelerators.items():
            path = f"accelerators.{name}"
            if not isinstance(row, dict):
                problems.append(f"{path}: must map STANDARD, SPOT and FLEX_START to prices")
                continue
            values = [_rate(f"{path}.{key}", row.get(key), problems) for key in STRATEGY_KEYS]
            rates[str(name).upper()] = Rates(*values)
        if problems:
            raise ValueError("price table: " + "; ".join(problems))
        return cls(
            rates=MappingProxyType(rates),
            region=str(document.get("region", "")),
            as_of=str(document.get("as_of", "")),
        )

    def estimate(self, accelerator_type: str, strategy: str, gpu_seconds: float) -> CostEstimate:
        """Cost of ``gpu_seconds`` GPU-seconds (GPUs x wall seconds) under ``strategy``.

        Amounts are rounded half-up to cents; savings are the difference of the rounded
        amounts, so the three figures always add up.

        Raises:
            ValueError: when ``gpu_seconds`` is negative.
        """
        if gpu_seconds < 0:
            raise ValueError(f"gpu_seconds must be non-negative, got {gpu_seconds}")
        rates = self.rates.get(accelerator_type.upper())
        key = runs_as(strategy.upper())
        if rates is None or key not in STRATEGY_KEYS:
            return UNPRICED
        hours = Decimal(str(gpu_seconds)) / _SECONDS_PER_HOUR
        cost = (rates.for_strategy(key) * hours).quantize(_CENT, ROUND_HALF_UP)
        on_demand = (rates.standard * hours).quantize(_CENT, ROUND_HALF_UP)
        return CostEstimate(float(cost), float(on_demand), float(on_demand - cost))
