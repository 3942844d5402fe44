"""The queue file (shared.domain.admission.config) and a request's check at intake
(shared.domain.admission.demand), on plain values."""

from __future__ import annotations

import pytest

from shared.domain.admission.config import (
    DEFAULT_QUEUE,
    MAX_FILE_BYTES,
    MAX_QUEUES,
    Pool,
    Queue,
    Resource,
    parse_queue_file,
    pool_of,
    read_queues,
)
from shared.domain.admission.demand import admission_of, check_request, demand_of
from shared.domain.admission.quota import Ceiling
from shared.kernel.errors import InvalidConfiguration, InvalidRequest

H100 = Resource("us-central1", "NVIDIA_H100_80GB", Pool.PREEMPTIBLE)
WHERE = {"region": "us-central1", "acceleratorType": "NVIDIA_H100_80GB", "pool": "PREEMPTIBLE"}

EXAMPLE = """
fairSharing:
  usageHalfLifeSeconds: 7200
projectQuota:
  - {region: us-central1, acceleratorType: NVIDIA_H100_80GB, pool: PREEMPTIBLE, limit: 32}
queues:
  - name: team-a
    weight: 3
    cohort: research
    quotas:
      - region: us-central1
        acceleratorType: NVIDIA_H100_80GB
        pool: PREEMPTIBLE
        nominal: 16
        borrowingLimit: 8
        lendingLimit: 8
    priorities: {high: 100, normal: 0}
    defaultPriority: normal
    preemption: {withinQueue: true, requireCheckpoint: true}
  - name: team-b
    weight: 1.5
    cohort: research
    quotas:
      - {region: us-central1, acceleratorType: NVIDIA_H100_80GB, pool: PREEMPTIBLE, nominal: 16}
"""


def errors_of(raw: object) -> dict[str, str]:
    with pytest.raises(InvalidConfiguration) as caught:
        read_queues(raw)  # type: ignore[arg-type]
    return {e.path: e.message for e in caught.value.errors}


def test_the_documented_example_reads_into_records():
    queues = parse_queue_file(EXAMPLE)
    a = queues.queue("team-a")
    assert queues.half_life_seconds == 7200
    assert queues.project_quota == {H100: 32}
    assert (a.weight, a.cohort, a.default_priority) == (3.0, "research", 0)
    assert a.quota(H100).nominal == 16 and a.quota(H100).kept == 8
    assert a.preemption.within_queue and not a.preemption.within_cohort
    assert queues.queue("team-b").quota(H100).lendable == 16
    assert [q.name for q in queues.cohort_of(a)] == ["team-a", "team-b"]


def test_no_file_is_one_unbounded_default_queue():
    for queues in (read_queues({}), parse_queue_file(""), parse_queue_file("queues: []")):
        assert list(queues.queues) == [DEFAULT_QUEUE]
        assert queues.queue(DEFAULT_QUEUE).unbounded
        assert admission_of(queues, None, None, {H100: 10_000}).queue == DEFAULT_QUEUE


def test_queues_without_a_default_make_a_request_naming_none_inadmissible():
    queues = read_queues({"queues": [{"name": "team-a", "quotas": [{**WHERE, "nominal": 8}]}]})
    assert not queues.queue(DEFAULT_QUEUE).unbounded
    errors = check_request(queues, None, None, {H100: 1})
    assert [e.path for e in errors] == ["queue"]
    assert "can ever hold (0)" in errors[0].message


def test_every_problem_is_reported_at_once_at_its_path():
    found = errors_of(
        {
            "queues": [
                {"name": "Bad Name", "weight": -1},
                {
                    "name": "b",
                    "quotas": [
                        {**WHERE, "nominal": "8"},
                        {**WHERE, "pool": "CHEAP", "nominal": 1},
                    ],
                },
                {
                    "name": "c",
                    "quotas": [
                        {**WHERE, "nominal": 4, "borrowingLimit": 2, "lendingLimit": 8},
                        {**WHERE, "nominal": 4},
                        {**WHERE, "acceleratorType": "TPU_V3", "nominal": 1},
                    ],
                    "priorities": {"high": 10},
                    "defaultPriority": "low",
                    "preemption": {"withinCohort": True},
                },
                {"name": "c"},
                {"name": "d", "surprise": 1},
            ],
            "projectQuota": [],
        }
    )
    assert set(found) >= {
        "queues[0].name",
        "queues[0].weight",
        "queues[1].quotas[0].nominal",
        "queues[1].quotas[1].pool",
        "queues[2].quotas[0].borrowingLimit",
        "queues[2].quotas[0].lendingLimit",
        "queues[2].quotas[1]",
        "queues[2].quotas[2].acceleratorType",
        "queues[2].defaultPriority",
        "queues[2].preemption.withinCohort",
        "queues[3].name",
        "queues[4].surprise",
    }
    assert (
        found["queues[2].quotas[0].borrowingLimit"] == "only a queue in a cohort borrows or lends"
    )
    assert "declared twice" in found["queues[3].name"]


def test_counts_are_strict_integers_never_booleans_or_strings():
    for bad in (True, "8", 8.0, -1, 10**7):
        assert "queues[0].quotas[0].nominal" in errors_of(
            {"queues": [{"name": "a", "quotas": [{**WHERE, "nominal": bad}]}]}
        )


def test_the_file_is_bounded_in_bytes_queues_and_aliases():
    with pytest.raises(InvalidConfiguration, match="bytes"):
        parse_queue_file("#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InvalidConfiguration, match="anchors and aliases"):
        parse_queue_file("a: &x {name: q}\nqueues: [*x]\n")
    too_many = {"queues": [{"name": f"q{i}"} for i in range(MAX_QUEUES + 1)]}
    assert "queues" in errors_of(too_many)
    with pytest.raises(InvalidConfiguration, match="mapping"):
        parse_queue_file("- just a list\n")
    with pytest.raises(InvalidConfiguration, match="not valid YAML at line 2"):
        parse_queue_file("queues: [\n")


def test_strategies_map_to_the_pool_vertex_charges():
    assert pool_of("STANDARD") is Pool.ON_DEMAND
    assert pool_of("SPOT") is pool_of("FLEX_START") is Pool.PREEMPTIBLE
    with pytest.raises(ValueError, match="AUTO"):
        pool_of("AUTO")
    with pytest.raises(ValueError, match="unknown"):
        pool_of("LOW_COST")


def test_demand_is_replicas_times_accelerators_over_pools_times_parallel_trials():
    def pool(accelerator: str, count: int, replicas: int) -> dict[str, object]:
        spec = {"acceleratorType": accelerator, "acceleratorCount": count}
        return {"machineSpec": spec, "replicaCount": replicas}

    pools = [
        pool("NVIDIA_H100_80GB", 8, 2),
        pool("NVIDIA_H100_80GB", 4, 1),
        pool("NVIDIA_L4", 1, 3),
    ]
    custom = {"jobSpec": {"workerPoolSpecs": pools}}
    demand = demand_of("customJob", custom, region="us-central1", pool=Pool.PREEMPTIBLE)
    l4 = Resource("us-central1", "NVIDIA_L4", Pool.PREEMPTIBLE)
    assert demand == {H100: 20, l4: 3}
    tuning = {"parallelTrialCount": 5, "trialJobSpec": {"workerPoolSpecs": pools[:1]}}
    assert demand_of(
        "hyperparameterTuningJob", tuning, region="us-central1", pool=Pool.ON_DEMAND
    ) == {Resource("us-central1", "NVIDIA_H100_80GB", Pool.ON_DEMAND): 80}
    assert demand_of("customJob", {"jobSpec": {}}, region="us-central1", pool=Pool.ON_DEMAND) == {}


def test_a_demand_past_all_its_queue_could_borrow_is_inadmissible():
    queues = parse_queue_file(EXAMPLE)
    # team-a: nominal 16, borrowing at most 8; team-b lends all 16 of its nominal.
    assert check_request(queues, "team-a", "high", {H100: 24}) == []
    (error,) = check_request(queues, "team-a", "high", {H100: 25})
    assert (error.path, "can ever hold (24)" in error.message) == ("queue", True)
    # team-b may borrow what team-a lends (8) beside its own 16.
    assert check_request(queues, "team-b", None, {H100: 24}) == []
    assert check_request(queues, "team-b", None, {H100: 25}) != []
    # The project's quota, where known, bounds it too.
    (error,) = check_request(queues, "team-b", None, {H100: 20}, Ceiling({H100: 16}))
    assert "project's quota (16)" in error.message


def test_unknown_queues_and_priorities_outside_the_queue_are_refused():
    queues = parse_queue_file(EXAMPLE)
    (error,) = check_request(queues, "team-z", None, {})
    assert error.message == '"team-z" is not a queue; the queues are default, team-a, team-b'
    assert check_request(queues, 7, None, {})[0].path == "queue"
    for bad in ("urgent", 101, -1, True, 1.5):
        assert [e.path for e in check_request(queues, "team-a", bad, {})] == ["priority"]
    assert admission_of(queues, "team-a", 50, {}).priority == 50
    assert admission_of(queues, "team-a", "high", {}).priority == 100
    with pytest.raises(InvalidRequest):
        admission_of(queues, "team-b", "high", {})


def test_a_queue_without_priorities_has_normal_only():
    queue = Queue("q")
    assert queue.priority_of(None) == 0
    assert queue.priority_of(1) is None
    assert queue.allowed() == "normal: 0"
