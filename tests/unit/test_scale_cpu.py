"""The CPU-floor benchmark's pure helpers (benchmarks/floor.py): its figures, the captured
payloads' job fields, and the reading of py-spy's collapsed stacks."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import pytest

from benchmarks.floor import (
    LIBRARY_METHODS,
    NOT_A_HANDLER,
    REPO,
    LibraryClock,
    Sides,
    Split,
    collapsed,
    exclusive,
    function_of,
    inclusive,
    job_keys,
    outside_library,
    own_work_budget,
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
    assert function_of(f"submit_job ({REPO}/shared/app/services/intake.py:63)") == (
        "submit_job (shared/app/services/intake.py)"
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


def test_a_split_s_own_work_is_what_is_left_outside_the_library_calls() -> None:
    assert Split(total=5.0, inside=3.25).outside == pytest.approx(1.75)


def test_the_own_work_budget_is_the_target_times_the_floor_less_the_library_calls() -> None:
    floor, real = Split(3.5, 3.35), Split(5.0, 3.4)
    assert own_work_budget(floor, real, 1.3) == pytest.approx(1.3 * 3.5 - 3.4)
    # Held to it exactly, the real side is at the target.
    spent = Split(real.inside + own_work_budget(floor, real, 1.3), real.inside)
    assert spent.total / floor.total == pytest.approx(1.3)


class _Library:
    def __init__(self) -> None:
        self.calls = 0

    def outer(self, n: int) -> int:
        self.calls += 1
        return self.inner(n) + n

    def inner(self, n: int) -> int:
        self.calls += 1
        return 2 * n


def ticking() -> Callable[[], float]:
    """A clock that moves one unit each time it is read."""
    ticks = itertools.count()
    return lambda: float(next(ticks))


def test_the_library_clock_times_the_outermost_call_once_and_puts_the_methods_back() -> None:
    clock = LibraryClock(ticking())
    original = _Library.__dict__["outer"], _Library.__dict__["inner"]
    lib = _Library()
    with clock.installed([(_Library, "outer"), (_Library, "inner")]):
        assert lib.outer(5) == 15
        # Read twice, once before and once after: inner, called from outer, is not timed
        # again (timed, it would read the clock twice more, and outer would span 3).
        assert clock.spent == 1.0
        assert lib.inner(1) == 2  # a call of its own is timed
        assert clock.spent == 2.0
    assert lib.calls == 3
    assert (_Library.__dict__["outer"], _Library.__dict__["inner"]) == original
    lib.outer(1)  # put back: no longer timed
    assert clock.spent == 2.0


def test_the_library_clock_puts_the_methods_back_when_the_batch_fails() -> None:
    original = _Library.__dict__["outer"]
    with pytest.raises(RuntimeError), LibraryClock().installed([(_Library, "outer")]):
        raise RuntimeError("the batch failed")
    assert _Library.__dict__["outer"] is original


def test_every_library_method_named_is_defined_on_its_class() -> None:
    from benchmarks.floor import library_classes

    for (cls, name), (_module, class_name, method) in zip(
        library_classes(), LIBRARY_METHODS, strict=True
    ):
        assert cls.__name__ == class_name and name == method
        assert name in cls.__dict__, f"{class_name}.{name} is inherited: wrap its own class"
