"""Everything at once (benchmarks/scale_everything.py): a day of the control plane priced
from the measured tick and job life, the GPUs it manages at their Spot price, and the log
lines counted where the benchmark's functions write them."""

from __future__ import annotations

import pytest

from benchmarks import scale_everything as bench
from benchmarks.costs import Invocation, Operations, load_prices
from benchmarks.scale import LogSink
from tests.unit.test_scale_costs import PRICES as COST_PRICES

PRICES = {
    **COST_PRICES,
    "scheduler": {"per_job_month": 0.10},
    "logging": {"per_gib": 0.50, "entry_overhead_bytes": 1000, "request_log_bytes": 2000},
}
TICK = {"reads": 1000, "writes": 10, "vertex": {"GetEndpoint": 200}, "wall": 2.05,
        "log_bytes": 500, "log_lines": 2}  # fmt: skip


def test_a_day_is_1440_ticks_each_priced_as_the_tick_measured():
    day = bench.daily_cost(TICK, None, (0, 0), 0, PRICES)
    assert day.firestore == pytest.approx(1440 * (1000 * 0.06 + 10 * 0.18) / 1e5)
    # 2.05 s billed as 2.1 s of 1 vCPU and 0.5 GiB, plus the request fee.
    per_tick = 2.1 * (0.000024 + 0.5 * 0.0000025) + 0.4e-6
    assert day.functions == pytest.approx(1440 * per_tick)
    assert day.pubsub == pytest.approx(1440 * 2000 * 40.0 / 2**40)
    assert day.scheduler == pytest.approx(0.10 * 12 / 365)
    assert day.logging == pytest.approx(1440 * (500 + 2 * 1000 + 2000) / 2**30 * 0.5)
    assert any("not included" in note for note in day.notes)


def test_the_job_events_are_one_life_per_active_job_and_hour():
    life = Operations(reads=20, writes=30, invocations=[Invocation(0.05, 1.0, 1.0)] * 13)
    without = bench.daily_cost(TICK, None, (0, 0), 0, PRICES)
    with_jobs = bench.daily_cost(TICK, life, (4000, 8), 100, PRICES, job_hours=2.0)
    lives = 100 * 24 / 2.0
    added = with_jobs.firestore - without.firestore
    assert added == pytest.approx(lives * (20 * 0.06 + 30 * 0.18) / 1e5)
    log_bytes = 4000 + 8 * 1000 + 13 * 2000
    assert with_jobs.logging - without.logging == pytest.approx(lives * log_bytes / 2**30 * 0.5)


def test_the_gpus_are_priced_all_day_at_spot():
    gpu, how = bench.gpu_day(10_000, 1_000)
    assert gpu == pytest.approx(10_000 * 1.60 * 24 + 1_000 * 0.33 * 24)
    assert "Spot" in how


def test_the_price_table_prices_the_scheduler_and_logging_with_sources():
    table = load_prices()
    for section in ("scheduler", "logging"):
        assert str(table[section]["source"]).startswith("https://"), section
    assert bench.daily_cost(TICK, None, (0, 0), 0, table).total > 0


def test_the_log_sink_counts_bytes_and_lines():
    sink = LogSink()
    sink.write('{"message": "é"}\n')
    sink.write("two\nthree\n")
    assert (sink.bytes, sink.lines) == (len('{"message": "é"}\n'.encode()) + 10, 3)
