"""The admission scale benchmark's inputs are what issue 41 names: its queue file is 20
queues in 2 cohorts on a 512-GPU project quota, and its requests are valid ones that ask the
GPUs they say (benchmarks/scale_admission.py)."""

from __future__ import annotations

from benchmarks import scale_admission as bench
from shared.domain.admission.config import Pool, Resource, parse_queue_file
from shared.domain.admission.demand import demand_of
from shared.domain.request.message import parse_request


def test_the_queue_file_is_twenty_queues_in_two_cohorts_on_a_512_gpu_quota():
    queues = parse_queue_file(bench.queue_file())
    a100 = Resource(bench.REGION, bench.A100, Pool.PREEMPTIBLE)
    # Beside the file's 20, the queue every request without one goes to (its own).
    named = {n: q for n, q in queues.queues.items() if n != "default"}
    assert sorted(named) == [f"q{i:02d}" for i in range(20)]
    assert {q.cohort for q in named.values()} == {"c0", "c1"}
    assert dict(queues.project_quota) == {a100: 512}


def test_a_request_asks_the_gpus_it_says_in_its_queue():
    for gpus in bench.GPUS:
        body = bench.request_body(f"r{gpus}", "q03", gpus, "high")
        request = parse_request(body, {}, "m")
        assert request.options["queue"] == "q03" and request.options["priority"] == "high"
        demand = demand_of(request.kind, request.spec, region=bench.REGION, pool=Pool.PREEMPTIBLE)
        assert sum(demand.values()) == gpus


def test_p95_is_the_value_95_percent_are_at_or_under():
    assert bench.p95([float(n) for n in range(1, 101)]) == 95.0
    assert bench.p95([5.0]) == 5.0
