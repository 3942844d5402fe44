"""The policy table's file (``shared.adapters.serving_table``): written and read back equal,
and refused whole, with every problem at its path, when it is too large or malformed."""

from __future__ import annotations

import json

import pytest

from shared.adapters.serving_table import (
    COLUMNS,
    MAX_ROWS,
    MAX_TABLE_BYTES,
    decode_table,
    encode_table,
    load_policy_table,
)
from shared.domain.serving.objective import Measured, PolicyTable, ServingPolicy
from shared.kernel.errors import InvalidConfiguration

TABLE = PolicyTable(
    (
        Measured(1, ServingPolicy(0, 0, True), 0.924321, 0.920261, 0.6182, 0.1349),
        Measured(1, ServingPolicy(1, 0, False), 1.0, 1.0, 0.0, 1.0),
        Measured(4, ServingPolicy(1, 2, True), 0.999, 0.95, 0.8, 0.3),
    ),
    spot_ratio=0.410256,
    accelerator="NVIDIA_L4",
    learned_on=("preemption/1-node/aws-04-19-2023/us-east-1b_intel_64.json",),
)


def document(**changes):
    doc = json.loads(encode_table(TABLE))
    doc.update(changes)
    return json.dumps(doc).encode()


def paths(data: bytes) -> list[str]:
    with pytest.raises(InvalidConfiguration) as err:
        decode_table(data)
    return [e.path for e in err.value.errors]


def test_a_table_is_written_one_row_a_line_and_read_back_equal():
    text = encode_table(TABLE)
    assert decode_table(text.encode()) == TABLE
    assert text.count("\n") == len(TABLE.rows) + 1
    assert "[1, 0, 0, true, 0.924321, 0.920261, 0.6182, 0.1349]" in text


def test_an_oversized_file_is_refused_before_it_is_parsed():
    data = b" " * MAX_TABLE_BYTES + encode_table(TABLE).encode()
    with pytest.raises(InvalidConfiguration, match=f"more than the {MAX_TABLE_BYTES} allowed"):
        decode_table(data)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\xfe", "not a JSON table"),
        (b"{", "not a JSON table"),
        (b"[" * 5000 + b"]" * 5000, "not a JSON table"),
        (b'{"format": 1, "format": 1}', "given twice"),
        (document(spotRatio=1).replace(b"1,", b"NaN,", 1), "not a JSON table"),
        (b"[]", "must be a JSON object"),
    ],
)
def test_a_file_that_is_not_one_json_object_is_refused_with_why(data, says):
    with pytest.raises(InvalidConfiguration, match=says):
        decode_table(data)


def test_every_problem_is_named_at_its_path():
    bad_rows = [
        [1, 2, 0, True, 0.9, 0.9, 0.5, 0.5],  # a floor above N
        [4, 0, -1, "yes", 1.5, 0.9, -1, 0.5],  # four problems in one row
        [0, 0, 0, True, 0.9, 0.9, 0.5, 0.5],  # no replicas
        [1, 0, 0],  # short
        [1, 0, 0, True, 0.9, 0.9, 0.5, 0.5],
        [1, 0, 0, True, 0.8, 0.8, 0.5, 0.5],  # the same knobs again
    ]
    data = document(
        format=2,
        accelerator=7,
        spotRatio=0,
        learnedOn=["x" * 201],
        columns=list(reversed(COLUMNS)),
        rows=bad_rows,
        extra=True,
    )
    assert paths(data) == [
        "extra",
        "format",
        "accelerator",
        "spotRatio",
        "learnedOn",
        "columns",
        "rows[0].minOnDemandReplicas",
        "rows[1].extraSpotReplicas",
        "rows[1].hedge",
        "rows[1].atLeastOneReplica",
        "rows[1].spotShare",
        "rows[2].replicas",
        "rows[3]",
        "rows[5]",
    ]


def test_a_bool_is_not_a_count_and_a_count_is_not_a_bool():
    assert paths(document(rows=[[True, 0, 0, True, 1, 1, 0, 1]])) == ["rows[0].replicas"]
    assert paths(document(rows=[[1, 0, 0, 1, 1, 1, 0, 1]])) == ["rows[0].hedge"]


def test_too_many_rows_are_refused_not_cut():
    many = [[1, 0, e, True, 0.9, 0.9, 0.5, 0.5] for e in range(MAX_ROWS + 1)]
    assert paths(document(rows=many)) == ["rows"]


def test_the_packaged_table_loads_and_always_offers_always_on_demand():
    table = load_policy_table()
    replicas = {row.replicas for row in table.rows}
    assert replicas and 0 < table.spot_ratio <= 1 and table.learned_on
    # Always on-demand (a floor of N) is never beaten on availability, so every replica count
    # the benchmark measured keeps it: objective mode always has a row that meets.
    for n in replicas:
        assert any(row.policy == ServingPolicy(n, 0, False) for row in table.for_replicas(n))
