"""The price table: loading, the packaged defaults, and cost/savings arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.adapters import packaged_prices
from shared.adapters.packaged_prices import load_packaged_prices
from shared.domain.policy.pricing import CostEstimate, PriceTable

ACCELERATORS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)

SMALL = """
accelerators:
  NVIDIA_L4: {STANDARD: 1.00, SPOT: 0.40, FLEX_START: 0.55}
  NVIDIA_H100_80GB: {STANDARD: 12.63, SPOT: 8.22, FLEX_START: 6.44}
"""


@pytest.fixture(scope="module")
def default_table() -> PriceTable:
    return load_packaged_prices()


def test_default_table_covers_every_accelerator(default_table: PriceTable) -> None:
    assert set(ACCELERATORS) <= set(default_table.rates)
    assert default_table.region == "us-central1"
    assert default_table.as_of


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_default_prices_are_ordered_sensibly(default_table: PriceTable, accelerator: str) -> None:
    rates = default_table.rates[accelerator]
    # Spot and DWS capacity are discounted against on-demand; anything else is a typo.
    assert 0 < rates.spot < rates.standard
    assert 0 < rates.flex_start < rates.standard


def test_h100_flex_start_matches_the_sourced_figures(default_table: PriceTable) -> None:
    # 8 GPUs for one hour on a3-highgpu-8g: $101.01 on demand vs $51.52 with DWS.
    estimate = default_table.estimate("NVIDIA_H100_80GB", "FLEX_START", gpu_seconds=8 * 3600)
    assert estimate == CostEstimate(cost_usd=51.52, on_demand_usd=101.04, savings_usd=49.52)


def test_estimate_arithmetic() -> None:
    table = PriceTable.load(SMALL)
    assert table.estimate("NVIDIA_L4", "STANDARD", 3600) == CostEstimate(1.0, 1.0, 0.0)
    assert table.estimate("NVIDIA_L4", "SPOT", 3 * 3600) == CostEstimate(1.2, 3.0, 1.8)
    assert table.estimate("NVIDIA_L4", "FLEX_START", 0) == CostEstimate(0.0, 0.0, 0.0)


def test_amounts_round_half_up_to_cents_and_add_up() -> None:
    table = PriceTable.load("accelerators: {X: {STANDARD: 0.09, SPOT: 0.05, FLEX_START: 0.07}}")
    # 0.5 h: 0.045 -> 0.05 (half up), 0.025 -> 0.03
    estimate = table.estimate("X", "SPOT", 1800)
    assert estimate == CostEstimate(0.03, 0.05, 0.02)
    assert estimate.on_demand_usd - estimate.cost_usd == pytest.approx(estimate.savings_usd)


def test_strategy_aliases_and_case() -> None:
    table = PriceTable.load(SMALL)
    assert table.estimate("nvidia_l4", "on_demand", 3600) == CostEstimate(1.0, 1.0, 0.0)
    assert table.estimate("NVIDIA_L4", "STRATEGY_UNSPECIFIED", 3600).cost_usd == 1.0


@pytest.mark.parametrize(
    ("accelerator", "strategy"), [("TPU_V5_LITEPOD", "SPOT"), ("NVIDIA_L4", "LOW_COST")]
)
def test_unpriced_is_zero_and_flagged(accelerator: str, strategy: str) -> None:
    estimate = PriceTable.load(SMALL).estimate(accelerator, strategy, 3600)
    assert estimate == CostEstimate(0.0, 0.0, 0.0, priced=False)
    assert estimate.to_dict() == {
        "costUsd": 0.0,
        "onDemandUsd": 0.0,
        "savingsUsd": 0.0,
        "priced": False,
    }


def test_negative_gpu_seconds_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        PriceTable.load(SMALL).estimate("NVIDIA_L4", "SPOT", -1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("accelerators: [", "not YAML"),
        ("[]", "'accelerators' must be a non-empty mapping"),
        ("accelerators: {}", "'accelerators' must be a non-empty mapping"),
        ("accelerators: {A: 3}", "accelerators.A: must map"),
        ("accelerators: {A: {STANDARD: 1, SPOT: 1}}", "accelerators.A.FLEX_START"),
        ("accelerators: {A: {STANDARD: -1, SPOT: 1, FLEX_START: 1}}", "accelerators.A.STANDARD"),
        ("accelerators: {A: {STANDARD: yes, SPOT: 1, FLEX_START: 1}}", "accelerators.A.STANDARD"),
        ("accelerators: {A: {STANDARD: '1', SPOT: 1, FLEX_START: 1}}", "accelerators.A.STANDARD"),
    ],
)
def test_invalid_tables(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("{", r"\{")):
        PriceTable.load(text)


def test_the_packaged_file_is_read_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter reads the shipped file, at most its cap: a larger or non-UTF-8 file is
    refused, never read whole or in part."""
    monkeypatch.setattr(packaged_prices.resources, "files", lambda package: tmp_path)
    prices = tmp_path / packaged_prices.FILE_NAME
    prices.write_text(SMALL, encoding="utf-8")
    assert load_packaged_prices() == PriceTable.load(SMALL)
    prices.write_text(SMALL + "#" * packaged_prices.MAX_PRICES_BYTES, encoding="utf-8")
    with pytest.raises(ValueError, match="larger than the 65536 bytes"):
        load_packaged_prices()
    prices.write_bytes(SMALL.encode() + b"\xff")
    with pytest.raises(UnicodeDecodeError):
        load_packaged_prices()
