"""Finding the latest complete checkpoint from an object listing, and where to look."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain.model.checkpoint import Checkpoint, Listing, ObjectInfo
from shared.domain.policy.checkpoints import (
    check_checkpoint_uri,
    checkpoint_prefix,
    confirm,
    latest_checkpoint,
    latest_complete,
    listings,
    split_gcs_uri,
    step_directories,
    step_of,
)

BUCKET = "ckpt-bucket"
PREFIX = "runs/r1/checkpoints/"
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def obj(rel: str, minutes: int = 0, size: int = 10) -> ObjectInfo:
    return ObjectInfo(PREFIX + rel, T0 + timedelta(minutes=minutes), size)


def marked(rel: str, minutes: int = 0) -> list[ObjectInfo]:
    """A step directory's marker ``rel`` and the data it commits, written just before it."""
    directory = rel.rpartition("/")[0]
    return [obj(f"{directory}/shard.bin", minutes), obj(rel, minutes)]


def uri(rel: str) -> str:
    return f"gs://{BUCKET}/{PREFIX}{rel}"


@pytest.mark.parametrize(
    "name", ["step-00000200", "checkpoint_200", "ckpt-200", "200", "global_step200"]
)
def test_each_naming_style(name: str) -> None:
    objects = [obj(f"{name}/__0_0.distcp", 1), obj(f"{name}/.metadata", 2)]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found == Checkpoint(uri(f"{name}/"), 200, T0 + timedelta(minutes=2))


@pytest.mark.parametrize("marker", ["commit_success.txt", ".metadata", "_SUCCESS"])
def test_each_marker(marker: str) -> None:
    objects = [obj("step-100/data.bin", 1), obj(f"step-100/{marker}", 3)]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.step == 100 and found.at == T0 + timedelta(minutes=3)


def test_half_written_higher_step_is_never_chosen() -> None:
    objects = [
        obj("step-00000100/__0_0.distcp", 1),
        obj("step-00000100/.metadata", 2),
        obj("step-00000200/__0_0.distcp", 10),
        obj("step-00000200/.metadata", 11),
        obj("step-00000300/__0_0.distcp", 20),  # preempted mid-save: no marker
        obj("step-00000300/__1_0.distcp", 21),
    ]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.uri == uri("step-00000200/") and found.step == 200


def test_highest_step_wins_not_newest_or_lexical() -> None:
    objects = [
        *marked("ckpt-900/_SUCCESS", 1),  # older but higher
        *marked("ckpt-1000/_SUCCESS", 0),  # "1000" < "900" lexically
        *marked("ckpt-50/_SUCCESS", 30),  # newest but lowest
    ]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.step == 1000


@pytest.mark.parametrize("marker", ["commit_success.txt", ".metadata", "_SUCCESS"])
def test_a_marker_alone_is_no_checkpoint(marker: str) -> None:
    # A framework writes its marker after the data it commits: a marker with nothing beside
    # it (a forged or stray write) saves nothing, and must never be resumed from.
    objects = [*marked("step-100/.metadata", 1), obj(f"step-900/{marker}", 5, size=0)]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.step == 100


def test_confirm_reads_the_checkpoints_own_listing() -> None:
    objects = [*marked("step-100/.metadata", 1), obj("step-200/.metadata", 5), obj("m.pt", 7)]
    read = listings(objects, "")
    told = T0 + timedelta(days=1)  # what an event said: the listing's time is what counts
    assert confirm(Checkpoint(uri("step-100/"), 100, told), read) == Checkpoint(
        uri("step-100/"), 100, T0 + timedelta(minutes=1)
    )
    assert confirm(Checkpoint(uri("step-200/"), 200, told), read) is None  # a marker alone
    assert confirm(Checkpoint(uri("step-300/"), 300, told), read) is None  # not there
    assert confirm(Checkpoint(uri("m.pt"), None, told), read) == Checkpoint(
        uri("m.pt"), None, T0 + timedelta(minutes=7)
    )
    empty = listings([obj("m.pt", 7, size=0)], "")
    assert confirm(Checkpoint(uri("m.pt"), None, told), empty) is None


def test_listing_order_does_not_matter() -> None:
    objects = [obj("200/commit_success.txt", 5), obj("100/commit_success.txt", 1), obj("200/x", 4)]
    assert latest_complete(reversed(objects), BUCKET, PREFIX) == latest_complete(
        objects, BUCKET, PREFIX
    )


def test_marker_must_be_directly_inside_the_step_directory() -> None:
    objects = [
        *marked("step-100/_SUCCESS", 1),
        obj("step-200/logs/deep/_SUCCESS", 2),
        obj("step-200/sub/.metadata", 2),
    ]
    found = latest_complete(objects, BUCKET, PREFIX, item_markers=False)
    assert found is not None and found.step == 100


def test_orbax_item_level_markers_complete_a_step() -> None:
    # Orbax on GCS: 200/<item>/commit_success.txt per item, then 200/commit_success.txt.
    objects = [
        *marked("100/commit_success.txt", 1),
        obj("200/default/_METADATA", 5),
        obj("200/default/ocdbt.process_0/d/abc", 5),
        obj("200/default/commit_success.txt", 6),
        obj("200/dataset/commit_success.txt", 7),
    ]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found == Checkpoint(uri("200/"), 200, T0 + timedelta(minutes=7))
    strict = latest_complete(objects, BUCKET, PREFIX, item_markers=False)
    assert strict is not None and strict.step == 100


def test_orbax_step_with_an_unfinished_item_is_half_written() -> None:
    objects = [
        *marked("100/commit_success.txt", 1),
        obj("200/default/commit_success.txt", 6),
        obj("200/optimizer/_METADATA", 6),  # this item never committed
    ]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.step == 100


def test_orbax_temporary_directories_are_ignored() -> None:
    objects = [
        *marked("100/commit_success.txt", 1),
        *marked("300.orbax-checkpoint-tmp-1718000000/commit_success.txt", 9),
    ]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.step == 100


def test_same_step_twice_prefers_later_commit() -> None:
    objects = [*marked("step-200/_SUCCESS", 1), *marked("checkpoint_200/_SUCCESS", 5)]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.uri == uri("checkpoint_200/")


def test_single_file_fallback_newest_by_update_time() -> None:
    objects = [
        obj("model_step300.pt", 1),
        obj("model_step100.ckpt", 9),  # newest
        obj("weights.safetensors", 5),
        obj("notes.txt", 20),
        obj("model-00001-of-00002.safetensors", 30),  # a shard, not a checkpoint
        obj("step-400/__0_0.distcp", 40),  # half-written directory
    ]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found == Checkpoint(uri("model_step100.ckpt"), 100, T0 + timedelta(minutes=9))


def test_single_file_without_step() -> None:
    found = latest_complete([obj("last.pt", 3), obj("LAST.PTH", 1)], BUCKET, PREFIX)
    assert found == Checkpoint(uri("last.pt"), None, T0 + timedelta(minutes=3))


def test_complete_directory_beats_newer_file() -> None:
    objects = [*marked("step-10/_SUCCESS", 1), obj("final.pt", 99)]
    found = latest_complete(objects, BUCKET, PREFIX)
    assert found is not None and found.uri == uri("step-10/")


def test_files_in_subdirectories_are_not_single_file_checkpoints() -> None:
    assert latest_complete([obj("old/model.pt", 1)], BUCKET, PREFIX) is None


@pytest.mark.parametrize(
    "objects",
    [
        [],
        [ObjectInfo(PREFIX, T0, 0)],  # the "folder" placeholder object
        [obj("logs/events.out", 1), obj("README", 2)],
        [ObjectInfo("runs/r1/checkpoints-old/step-1/_SUCCESS", T0, 1)],  # outside the prefix
    ],
)
def test_nothing_complete_returns_none(objects: list[ObjectInfo]) -> None:
    assert latest_complete(objects, BUCKET, PREFIX) is None


def test_prefix_without_trailing_slash_and_bucket_root() -> None:
    objects = [*marked("step-5/_SUCCESS", 1)]
    found = latest_complete(objects, BUCKET, PREFIX.rstrip("/"))
    assert found is not None and found.uri == uri("step-5/")
    root_objects = [ObjectInfo("step-7/data", T0, 1), ObjectInfo("step-7/_SUCCESS", T0, 1)]
    root = latest_complete(root_objects, BUCKET, "")
    assert root is not None and root.uri == f"gs://{BUCKET}/step-7/"


def test_step_of() -> None:
    assert step_of("epoch=3-step=1200") == 1200
    assert step_of("final") is None


def test_checkpoint_dict_round_trip() -> None:
    cp = Checkpoint(uri("step-200/"), 200, T0)
    assert cp.to_dict() == {"uri": uri("step-200/"), "step": 200, "at": "2025-06-01T12:00:00+00:00"}
    assert Checkpoint.from_dict(cp.to_dict()) == cp
    assert Checkpoint.from_dict({"uri": "gs://abc/x.pt", "step": None, "at": T0}).step is None


# Stale checkpoints (not_before) -----------------------------------------------------------------


def test_not_before_skips_an_earlier_runs_higher_step() -> None:
    # A reused output directory: the earlier run reached step 500, this run is at step 100.
    objects = [*marked("step-00000500/.metadata", 0), *marked("step-00000100/.metadata", 30)]
    assert latest_complete(objects, BUCKET, PREFIX) == Checkpoint(uri("step-00000500/"), 500, T0)
    found = latest_complete(objects, BUCKET, PREFIX, not_before=T0 + timedelta(minutes=10))
    assert found == Checkpoint(uri("step-00000100/"), 100, T0 + timedelta(minutes=30))


def test_not_before_is_inclusive_and_can_leave_nothing() -> None:
    objects = [*marked("step-1/_SUCCESS", 5)]
    assert latest_complete(objects, BUCKET, PREFIX, not_before=T0 + timedelta(minutes=5))
    assert latest_complete(objects, BUCKET, PREFIX, not_before=T0 + timedelta(minutes=6)) is None


def test_not_before_applies_to_single_files() -> None:
    objects = [obj("old.pt", 50), obj("mine.pt", 20), obj("older.ckpt", 1)]
    cutoff = T0 + timedelta(minutes=60)
    assert latest_complete(objects, BUCKET, PREFIX, not_before=cutoff) is None
    found = latest_complete(objects, BUCKET, PREFIX, not_before=T0 + timedelta(minutes=10))
    assert found is not None and found.uri == uri("old.pt")


def test_a_stale_complete_directory_does_not_beat_a_fresh_file() -> None:
    objects = [*marked("step-900/_SUCCESS", 0), obj("final.pt", 40)]
    found = latest_complete(objects, BUCKET, PREFIX, not_before=T0 + timedelta(minutes=1))
    assert found is not None and found.uri == uri("final.pt")


def test_same_step_twice_with_one_stale_takes_the_fresh_one() -> None:
    objects = [*marked("checkpoint_200/_SUCCESS", 1), *marked("step-200/_SUCCESS", 9)]
    found = latest_complete(objects, BUCKET, PREFIX, not_before=T0 + timedelta(minutes=5))
    assert found is not None and found.uri == uri("step-200/")


def test_naive_not_before_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        latest_complete([], BUCKET, PREFIX, not_before=datetime(2025, 1, 1))


@given(
    st.dictionaries(
        st.integers(min_value=0, max_value=10**6),
        st.tuples(st.booleans(), st.integers(min_value=0, max_value=100)),
        max_size=10,
    ),
    st.integers(min_value=0, max_value=101),
)
def test_property_highest_fresh_marked_step_wins(
    steps: dict[int, tuple[bool, int]], cutoff: int
) -> None:
    objects = []
    for step, (marked, minutes) in steps.items():
        objects.append(obj(f"step-{step:08d}/__0_0.distcp", minutes))
        if marked:
            objects.append(obj(f"step-{step:08d}/.metadata", minutes))
    not_before = T0 + timedelta(minutes=cutoff)
    found = latest_complete(objects, BUCKET, PREFIX, not_before=not_before)
    fresh = [s for s, (marked, minutes) in steps.items() if marked and minutes >= cutoff]
    assert (found.step if found else None) == (max(fresh) if fresh else None)


# The search over delimiter listings ------------------------------------------------------------


def test_step_directories_highest_first() -> None:
    subs = [
        PREFIX + "step-9/",
        PREFIX + "logs/",
        PREFIX + "10.orbax-checkpoint-tmp-17/",
        PREFIX + "step-10/",
        PREFIX + "ckpt-10/",
        "elsewhere/step-99/",
    ]
    assert step_directories(subs, PREFIX) == [(10, ["ckpt-10", "step-10"]), (9, ["step-9"])]


def test_listings_index_a_flat_listing() -> None:
    read = listings([obj("step-1/_SUCCESS"), obj("step-1/a/b/c"), obj("x.pt")], PREFIX)
    assert [o.name for o in read(PREFIX).objects] == [PREFIX + "x.pt"]
    assert read(PREFIX).subdirectories == (PREFIX + "step-1/",)
    assert read(PREFIX + "step-1/").subdirectories == (PREFIX + "step-1/a/",)
    assert read(PREFIX + "step-1/a/b/").objects == (obj("step-1/a/b/c"),)


def test_directories_are_read_highest_first_and_only_as_needed() -> None:
    read = listings(
        [*marked("step-1/_SUCCESS"), obj("step-2/x"), *marked("step-3/_SUCCESS")], PREFIX
    )
    asked: list[str] = []

    def reading(directory: str) -> Listing:
        asked.append(directory)
        return read(directory)

    found = latest_checkpoint(read(PREFIX), reading, BUCKET, PREFIX)
    assert found is not None and found.step == 3
    assert asked == [PREFIX + "step-3/"]


def test_a_spent_budget_stops_the_search_and_falls_back_to_files() -> None:
    read = listings([*marked("step-1/_SUCCESS"), obj("step-2/x"), obj("last.pt", 9)], PREFIX)
    budget = [1]

    def bounded(directory: str) -> Listing | None:
        if not budget[0]:
            return None
        budget[0] -= 1
        return read(directory)

    found = latest_checkpoint(read(PREFIX), bounded, BUCKET, PREFIX)
    assert found is not None and found.uri == uri("last.pt")


def test_a_truncated_step_listing_cannot_prove_its_items_committed() -> None:
    step = Listing(subdirectories=(PREFIX + "200/default/",), truncated=True)
    item = Listing(objects=(obj("200/default/commit_success.txt"),))
    dirs = {PREFIX + "200/": step, PREFIX + "200/default/": item}
    top = Listing(subdirectories=(PREFIX + "200/",))
    assert latest_checkpoint(top, dirs.get, BUCKET, PREFIX) is None
    dirs[PREFIX + "200/"] = Listing(subdirectories=step.subdirectories)
    found = latest_checkpoint(top, dirs.get, BUCKET, PREFIX)
    assert found is not None and found.step == 200


# Prefix derivation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "base", "expected"),
    [
        ({"checkpointUri": "gs://mine/ck"}, "gs://out/job", "gs://mine/ck/"),
        ({"checkpointUri": "gs://mine/ck/"}, None, "gs://mine/ck/"),
        ({}, "gs://out/job", "gs://out/job/checkpoints/"),
        ({}, "gs://out/job/", "gs://out/job/checkpoints/"),
        ({"retryPolicy": {}}, None, None),
        ({}, "", None),
    ],
)
def test_checkpoint_prefix(
    options: dict[str, object], base: str | None, expected: str | None
) -> None:
    assert checkpoint_prefix(options, base) == expected


@pytest.mark.parametrize(
    ("options", "base"),
    [({"checkpointUri": "s3://x/y"}, None), ({"checkpointUri": 5}, None), ({}, "/local/out")],
)
def test_checkpoint_prefix_rejects_non_gcs(options: dict[str, object], base: str | None) -> None:
    with pytest.raises(ValueError):
        checkpoint_prefix(options, base)


def test_split_gcs_uri() -> None:
    assert split_gcs_uri("gs://bucket-1/a/b/") == ("bucket-1", "a/b/")
    assert split_gcs_uri("gs://bucket-1") == ("bucket-1", "")
    for bad in ("s3://bucket/a", "bucket/a", "gs://", "gs://B/a", "gs:///a"):
        with pytest.raises(ValueError, match=r"gs://|bucket"):
            split_gcs_uri(bad)


def test_check_checkpoint_uri() -> None:
    assert check_checkpoint_uri(None) == []
    assert check_checkpoint_uri("gs://bucket/ck/") == []
    assert [e.path for e in check_checkpoint_uri("http://x")] == ["checkpointUri"]
    assert [e.path for e in check_checkpoint_uri(3)] == ["checkpointUri"]


@given(
    st.dictionaries(
        st.integers(min_value=0, max_value=10**8),
        st.tuples(st.booleans(), st.integers(min_value=0, max_value=1000)),
        max_size=12,
    )
)
def test_property_highest_marked_step_wins(steps: dict[int, tuple[bool, int]]) -> None:
    objects = []
    for step, (marked, minutes) in steps.items():
        objects.append(obj(f"step-{step:08d}/__0_0.distcp", minutes))
        if marked:
            objects.append(obj(f"step-{step:08d}/.metadata", minutes + 1))
    found = latest_complete(objects, BUCKET, PREFIX)
    marked_steps = [step for step, (marked, _) in steps.items() if marked]
    if not marked_steps:
        assert found is None
    else:
        assert found is not None and found.step == max(marked_steps)
