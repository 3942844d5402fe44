"""The region fields of an AUTO request (regions, checkpointSizeGb, pinnedRegion): intake."""

from __future__ import annotations

import copy
import json

import pytest

from shared.domain.request.auto_regions import MAX_REGIONS, RegionOptions
from shared.domain.request.field_policy import parse_field_policy
from shared.domain.request.message import parse_request
from shared.domain.request.validation import Guards, validators
from shared.kernel.config import Settings
from tests.unit.test_deadlines import PUBLISHED, auto, problems


def test_regions_with_auto_are_accepted_and_stored_as_options():
    body = auto(location="us-central1", regions=["us-east1", "europe-west4"], checkpointSizeGb=40)
    assert problems(body) == {}
    options = parse_request(body, {}, "m1", PUBLISHED).options
    read = RegionOptions.read(options)
    assert read.allowed("us-central1") == ("us-central1", "us-east1", "europe-west4")
    assert read.checkpoint_gb == 40.0


def test_the_location_may_be_listed_too_and_counts_once():
    body = auto(location="us-east1", regions=["us-east1", "us-west1"])
    assert problems(body) == {}
    assert RegionOptions.read(body).allowed("us-east1") == ("us-east1", "us-west1")


def test_region_fields_without_auto_are_refused():
    body = auto(regions=["us-east1"], checkpointSizeGb=4, pinnedRegion=True)
    body["customJob"]["jobSpec"]["scheduling"] = {"strategy": "SPOT"}
    for key in ("deadline", "estimatedRunSeconds"):
        body.pop(key)
    found = problems(body)
    for key in ("regions", "checkpointSizeGb", "pinnedRegion"):
        assert "applies only when" in found[key]


@pytest.mark.parametrize(
    ("regions", "path", "words"),
    [
        (["us-east1", "us-east1"], "regions[1]", "twice"),
        (["attacker.example:443#"], "regions[0]", "region such as"),
        (["US-EAST1"], "regions[0]", "region such as"),
        ([7], "regions[0]", "region such as"),
        ([], "regions", "non-empty list"),
        ("us-east1", "regions", "non-empty list"),
        ([f"us-east{i}" for i in range(1, MAX_REGIONS + 1)], "regions", f"at most {MAX_REGIONS}"),
    ],
)
def test_bad_regions_are_refused_with_their_path(regions, path, words):
    found = problems(auto(location="us-central1", regions=regions))
    assert words in found[path]


def test_eight_regions_with_the_location_are_the_bound():
    seven = [f"us-east{i}" for i in range(1, MAX_REGIONS)]
    assert problems(auto(location="us-central1", regions=seven)) == {}


@pytest.mark.parametrize("size", [0, -1, 100_001, True, "40", float("inf")])
def test_a_checkpoint_size_out_of_bounds_is_refused(size):
    found = problems(auto(regions=["us-east1"], checkpointSizeGb=size))
    assert "checkpointSizeGb" in found


def test_a_checkpoint_size_needs_regions():
    assert "applies only with regions" in problems(auto(checkpointSizeGb=10))["checkpointSizeGb"]


def test_pinned_takes_no_regions_and_must_be_a_boolean():
    assert problems(auto(pinnedRegion=True)) == {}
    assert (
        "cannot be combined"
        in problems(auto(regions=["us-east1"], pinnedRegion=True))["pinnedRegion"]
    )
    assert "true or false" in problems(auto(pinnedRegion="yes"))["pinnedRegion"]
    assert RegionOptions.read({"pinnedRegion": True, "regions": ["us-east1"]}).allowed(
        "us-central1"
    ) == ("us-central1",)


def test_every_problem_is_reported_at_once():
    found = problems(auto(regions=["x", "us-east1", "us-east1"], checkpointSizeGb=0))
    assert {"regions[0]", "regions[2]", "checkpointSizeGb"} <= set(found)


def test_a_hand_edited_record_reads_as_no_other_region():
    assert RegionOptions.read({"regions": "us-east1", "checkpointSizeGb": "big"}) == RegionOptions()


@pytest.mark.parametrize(("value", "price"), [(None, 0.02), ("0", 0.0), ("0.12", 0.12)])
def test_the_egress_price_setting(value, price):
    env = {} if value is None else {"FLEXJOBS_EGRESS_USD_PER_GB": value}
    assert Settings.from_env(env).egress_usd_per_gb == price


@pytest.mark.parametrize("value", ["-0.01", "11", "nan", "cheap"])
def test_an_egress_price_out_of_bounds_fails_at_start_up(value):
    with pytest.raises(ValueError, match="FLEXJOBS_EGRESS_USD_PER_GB"):
        Settings.from_env({"FLEXJOBS_EGRESS_USD_PER_GB": value})


def test_the_schema_takes_what_intake_takes_and_refuses_duplicates():
    jsonschema = pytest.importorskip("jsonschema")
    from flexjobs.schema import build_schema

    validator = jsonschema.Draft202012Validator(build_schema())
    good = auto(regions=["us-east1", "europe-west4"], checkpointSizeGb=12.5, location="us-west1")
    validator.validate(good)
    assert not validator.is_valid(auto(regions=["us-east1", "us-east1"]))
    assert not validator.is_valid(auto(regions=["US-EAST1"]))
    assert not validator.is_valid(auto(regions=["us-east1"], checkpointSizeGb=0))


KEY = "projects/p/locations/us-central1/keyRings/r/cryptoKeys/k"


def guarded(body: dict, **guards) -> dict[str, str]:
    """Every problem intake finds under ``guards`` (the field policy allows the key)."""
    policy = parse_field_policy(json.dumps({"encryptionSpec": True, "persistentResourceId": True}))
    request = parse_request(copy.deepcopy(body), {}, "m1", PUBLISHED)
    found = validators(Guards(field_policy=policy, **guards))
    return {e.path: e.message for check in found for e in check(request)}


def test_a_body_bound_to_its_region_cannot_name_other_regions():
    body = auto(location="us-central1", regions=["us-east1"])
    body["customJob"]["encryptionSpec"] = {"kmsKeyName": KEY}
    found = guarded(body)
    assert "names a resource of us-central1 only" in found["customJob.encryptionSpec.kmsKeyName"]
    body["customJob"]["jobSpec"]["persistentResourceId"] = "my-resource"
    found = guarded(body)
    assert "bound to the request's region" in found["customJob.jobSpec.persistentResourceId"]


def test_a_region_bound_body_is_fine_when_it_cannot_move():
    body = auto(location="us-central1")
    body["customJob"]["encryptionSpec"] = {"kmsKeyName": KEY}
    assert guarded(body) == {}
    assert guarded({**body, "pinnedRegion": True}) == {}


def test_the_operator_allowlist_bounds_every_region_a_request_names():
    allowed = ("us-central1", "us-east1")
    body = auto(location="us-central1", regions=["us-east1", "europe-west4"])
    found = guarded(body, allowed_regions=allowed)
    assert list(found) == ["regions[1]"]
    assert "FLEXJOBS_ALLOWED_REGIONS" in found["regions[1]"]
    assert "location" in guarded(auto(location="asia-east1"), allowed_regions=allowed)
    assert guarded(body) == {}  # no allowlist: any region name


def test_the_allowlist_setting_always_holds_the_default_location():
    settings = Settings.from_env(
        {"FLEXJOBS_LOCATION": "us-west1", "FLEXJOBS_ALLOWED_REGIONS": "us-east1"}
    )
    assert settings.allowed_regions == ("us-west1", "us-east1")
    assert Settings.from_env({}).allowed_regions == ()
    with pytest.raises(ValueError, match="FLEXJOBS_ALLOWED_REGIONS"):
        Settings.from_env({"FLEXJOBS_ALLOWED_REGIONS": "us-east1,evil.example:443"})
