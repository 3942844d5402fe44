"""Identities derived from a requestId are injective (labels, run ids, document ids)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from shared.domain.model.ids import doc_id, label_value


def test_a_readable_request_id_cannot_take_the_label_of_a_hashed_one():
    hashed = label_value("Team/Run 7")
    assert hashed.startswith("team-run-7-")
    # The review's collision: this requestId is already a valid label value, and used to be
    # taken as it is, equal to the hashed label of "Team/Run 7".
    assert label_value(hashed) != hashed
    assert label_value(hashed) != label_value("Team/Run 7")


def test_a_request_id_shaped_like_a_hashed_doc_id_is_hashed_too():
    long_id = "x" * 300
    hashed = doc_id(long_id)
    assert hashed == f"sha256-{hashlib.sha256(long_id.encode()).hexdigest()}"
    assert doc_id(hashed) != hashed
    assert doc_id(hashed).startswith("sha256-")


def test_readable_forms_stay_readable():
    assert label_value("seed-1") == "seed-1"
    assert label_value("nightly_2026-11-30") == "nightly_2026-11-30"
    assert doc_id("team/run 7") == "team%2Frun 7"


_IDS = st.one_of(
    st.text(min_size=0, max_size=80),
    st.from_regex(r"[a-z0-9_-]{1,40}(-[0-9a-f]{16})?", fullmatch=True),
    st.from_regex(r"sha256-[0-9a-f]{64}", fullmatch=True),
)


@given(_IDS, _IDS)
def test_label_values_are_injective(left, right):
    if left != right:
        assert label_value(left) != label_value(right)


@given(_IDS, _IDS)
def test_doc_ids_are_injective(left, right):
    if left != right:
        assert doc_id(left) != doc_id(right)


@given(_IDS)
def test_label_values_are_valid_vertex_labels(value):
    label = label_value(value)
    assert 1 <= len(label) <= 63
    assert set(label) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_")
