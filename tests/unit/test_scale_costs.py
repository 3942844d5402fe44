"""The scale benchmark's cost arithmetic (benchmarks/costs.py) and its price table."""

from __future__ import annotations

import math

import pytest

from benchmarks.costs import (
    TIB,
    Invocation,
    Operations,
    billed_seconds,
    dollars,
    gpu_dollars,
    load_prices,
)

PRICES = {
    "firestore": {"reads_per_100k": 0.06, "writes_per_100k": 0.18},
    "pubsub": {"per_tib": 40.0, "min_bytes_per_request": 1000},
    "vertex_api": {"per_call": 0.0},
    "functions": {
        "vcpu_second": 0.000024,
        "gib_second": 0.0000025,
        "per_million_requests": 0.40,
        "billing_increment_seconds": 0.1,
    },
}


def test_firestore_is_priced_per_100k_reads_and_writes() -> None:
    priced = dollars(Operations(reads=100_000, writes=200_000), PRICES)
    assert priced.firestore == pytest.approx(0.06 + 0.36)
    assert priced.total == pytest.approx(priced.firestore)


def test_a_small_pubsub_request_is_billed_its_1000_byte_minimum() -> None:
    small = dollars(Operations(pubsub_request_bytes=[10, 10]), PRICES).pubsub
    assert small == pytest.approx(2000 * 40.0 / TIB)
    big = dollars(Operations(pubsub_request_bytes=[5000]), PRICES).pubsub
    assert big == pytest.approx(5000 * 40.0 / TIB)


def test_a_function_call_is_billed_whole_100_ms_of_its_allocation_and_a_request_fee() -> None:
    call = Invocation(seconds=0.03, vcpu=1.0, gib=0.5)
    priced = dollars(Operations(invocations=[call]), PRICES).functions
    assert priced == pytest.approx(0.1 * (0.000024 + 0.5 * 0.0000025) + 0.4e-6)
    longer = dollars(Operations(invocations=[Invocation(0.25, 1.0, 0.5)]), PRICES).functions
    assert longer == pytest.approx(0.3 * (0.000024 + 0.5 * 0.0000025) + 0.4e-6)


def test_billed_seconds_round_up_to_the_increment() -> None:
    assert billed_seconds(0.0, 0.1) == 0.1
    assert billed_seconds(0.3, 0.1) == pytest.approx(0.3)
    assert billed_seconds(0.31, 0.1) == pytest.approx(0.4)


def test_operations_add_up() -> None:
    a = Operations(1, 2, [100], 1, [Invocation(0.1, 1, 1)])
    b = Operations(3, 4, [200, 300], 2, [])
    assert a + b == Operations(4, 6, [100, 200, 300], 3, [Invocation(0.1, 1, 1)])


def test_the_price_table_names_a_source_for_every_price() -> None:
    table = load_prices()
    for section in ("firestore", "pubsub", "vertex_api", "functions"):
        assert str(table[section]["source"]).startswith("https://"), section
    # The repository's table prices what the arithmetic expects.
    assert dollars(Operations(reads=1, writes=1), table).firestore > 0


def test_the_gpu_is_priced_at_its_cheapest_strategy() -> None:
    usd, strategy = gpu_dollars("NVIDIA_TESLA_A100", 1, 1.0)
    assert strategy == "SPOT"
    assert math.isclose(usd, 1.60)
    assert gpu_dollars("NVIDIA_TESLA_A100", 2, 0.5)[0] == pytest.approx(usd)
