"""Settings from the environment: what is read is what ENV_VARS declares."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from shared.kernel.config import ENV_VARS, Settings


class Spy(Mapping[str, str]):
    """An environment that records every name read."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.values[key]

    def get(self, key, default=None):  # type: ignore[no-untyped-def,override]
        self.read.add(key)
        return self.values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("from_env must read names, not walk the environment")

    def __len__(self) -> int:
        return len(self.values)


def test_from_env_reads_exactly_the_declared_variables():
    spy = Spy({})
    Settings.from_env(spy)
    assert spy.read == set(ENV_VARS)


@pytest.mark.parametrize(
    ("value", "prefix"), [(None, "requests/"), ("", "requests/"), ("in", "in/"), ("a/b/", "a/b/")]
)
def test_the_upload_prefix_is_a_folder(value, prefix):
    env = {} if value is None else {"FLEXJOBS_UPLOAD_PREFIX": value}
    assert Settings.from_env(env).upload_prefix == prefix


@pytest.mark.parametrize(("value", "size"), [(None, 100), ("", 100), ("1", 1), ("1000", 1000)])
def test_the_status_page_size(value, size):
    env = {} if value is None else {"FLEXJOBS_STATUS_PAGE_SIZE": value}
    assert Settings.from_env(env).status_page_size == size


@pytest.mark.parametrize("value", ["0", "1001", "-1", "ten", "\uff11"])
def test_a_status_page_size_out_of_bounds_fails_at_start_up(value):
    with pytest.raises(ValueError, match="FLEXJOBS_STATUS_PAGE_SIZE"):
        Settings.from_env({"FLEXJOBS_STATUS_PAGE_SIZE": value})


@pytest.mark.parametrize(("value", "scale"), [(None, 1.0), ("", 1.0), ("60", 60.0), ("0.5", 0.5)])
def test_the_auto_time_scale(value, scale):
    env = {} if value is None else {"FLEXJOBS_AUTO_TIME_SCALE": value}
    assert Settings.from_env(env).auto_time_scale == scale


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "fast"])
def test_an_auto_time_scale_that_is_not_a_positive_number_fails_at_start_up(value):
    with pytest.raises(ValueError, match="FLEXJOBS_AUTO_TIME_SCALE"):
        Settings.from_env({"FLEXJOBS_AUTO_TIME_SCALE": value})
