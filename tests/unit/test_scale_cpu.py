"""The CPU-floor benchmark's pure helpers (benchmarks/floor.py): its figures, the captured
payloads' job fields, and the reading of py-spy's collapsed stacks."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.floor import (
    NOT_A_HANDLER,
    REPO,
    Sides,
    collapsed,
    exclusive,
    function_of,
    inclusive,
    job_keys,
    outside_library,
    request_ids,
    spread,
    with_job,
)


def test_the_ratio_is_the_medians_and_each_round_has_its_own() -> None:
    sides = Sides(floor=(2.0, 4.0, 3.0), real=(3.0, 6.0, 3.3))
    assert sides.ratio == pytest.approx(3.3 / 3.0)
    assert sides.round_ratios == pytest.approx((1.5, 1.5, 1.1))


def test_spread_is_min_then_median() -> None:
    assert spread([5.0, 1.25, 2.5, 9.0]) == "1.250 / 3.750"


def test_job_keys_find_where_a_write_names_its_job() -> None:
    name = "projects/p/locations/us-central1/customJobs/123"
    data = {
        "vertexJob": name,
        "vertexJobId": "123",
        "vertexJobIds": ["99", "123"],
        "state": "QUEUED",
        "attempt": 2,
        "other": ["123", "x"],
    }
    assert job_keys(data, name) == {
        "vertexJob": "name",
        "vertexJobId": "id",
        "vertexJobIds": "ids",
    }
    assert job_keys({"state": "RETRYING"}, name) == {}


def test_with_job_puts_the_created_job_where_the_capture_had_its_own() -> None:
    captured = {"vertexJob": "a/1", "vertexJobId": "1", "vertexJobIds": ["0", "1"], "x": 1}
    keys = job_keys(captured, "a/1")
    replayed = with_job(captured, keys, "a/42")
    assert replayed == {
        "vertexJob": "a/42",
        "vertexJobId": "42",
        "vertexJobIds": ["0", "42"],
        "x": 1,
    }
    assert captured["vertexJob"] == "a/1"  # the capture is replayed again, never changed


def test_request_ids_are_all_as_long_as_each_other() -> None:
    ids = request_ids("07c", 3) + request_ids("cap", 1)
    assert len({len(i) for i in ids}) == 1
    with pytest.raises(AssertionError):
        request_ids("long", 1)


def test_collapsed_stacks_are_read_with_their_counts() -> None:
    text = "main (a.py:1);f (b.py:2) 3\nmain (a.py:1) 2\nmain (a.py:1);f (b.py:2) 1\nnoise\n"
    assert collapsed(text) == Counter({"main (a.py:1);f (b.py:2)": 4, "main (a.py:1)": 2})


def test_a_frame_names_its_function_and_file_without_the_line() -> None:
    assert function_of(f"submit_job ({REPO}/shared/app/intake.py:63)") == (
        "submit_job (shared/app/intake.py)"
    )
    site = "/x/.venv/lib/python3.11/site-packages/grpc/_channel.py:1119"
    assert function_of(f"_blocking ({site})") == "_blocking (grpc/_channel.py)"


def test_inclusive_counts_a_function_once_per_stack_and_exclusive_its_own_time() -> None:
    stacks = Counter(
        {
            "h (x.py:1);f (x.py:5);f (x.py:9)": 2,  # f twice in one stack (recursion)
            "h (x.py:1);g (y.py:3)": 3,
            "h (x.py:1)": 1,
        }
    )
    assert inclusive(stacks) == Counter({"h (x.py)": 6, "f (x.py)": 2, "g (y.py)": 3})
    assert exclusive(stacks) == Counter({"f (x.py)": 2, "g (y.py)": 3, "h (x.py)": 1})


def test_samples_in_the_floors_library_calls_are_told_from_the_handlers_own() -> None:
    stacks = Counter(
        {
            "main (main.py:1);submit (shared/app/x.py:2);WriteBatch.commit (batch.py:9)": 5,
            "main (main.py:1);submit (shared/app/x.py:2);parse (shared/domain/y.py:3)": 3,
            "main (main.py:1);submit (shared/app/x.py:2);deepcopy (copy.py:128)": 2,
            "_run_channel_spin_thread (grpc/_channel.py:1)": 1,
        }
    )
    inside, rest = outside_library(stacks)
    assert inside == 5
    assert rest == Counter(
        {
            "parse (shared/domain/y.py)": 3,
            "submit (shared/app/x.py)": 2,
            NOT_A_HANDLER: 1,
        }
    )
