"""Failure classification: every default rule, rule order, and operator-configured tables."""

from __future__ import annotations

import pytest

from shared.domain.policy.failures import (
    DEFAULT_RULES,
    FailureClass,
    FailureRule,
    InvalidRules,
    classify,
    load_rules,
)

FAILED = "JOB_STATE_FAILED"


@pytest.mark.parametrize(
    ("state", "code", "message", "expected"),
    [
        ("JOB_STATE_CANCELLED", 1, "Job was cancelled by the user", FailureClass.CANCELLED),
        ("job_state_cancelled", None, None, FailureClass.CANCELLED),
        ("JOB_STATE_EXPIRED", None, None, FailureClass.MAX_WAIT_EXPIRED),
        (
            FAILED,
            4,
            "Resources not found within the max wait duration",
            FailureClass.MAX_WAIT_EXPIRED,
        ),
        (
            FAILED,
            None,
            "scheduling.maxWaitDuration of 3600s elapsed",
            FailureClass.MAX_WAIT_EXPIRED,
        ),
        (FAILED, None, "max_wait_duration reached", FailureClass.MAX_WAIT_EXPIRED),
        (FAILED, 14, "The replica workerpool0-0 was preempted", FailureClass.PREEMPTED),
        (FAILED, None, "PREEMPTION notice received", FailureClass.PREEMPTED),
        (FAILED, None, "GCE_STOCKOUT in us-central1-a", FailureClass.STOCKOUT),
        (FAILED, None, "ZONE_RESOURCE_POOL_EXHAUSTED", FailureClass.STOCKOUT),
        (FAILED, None, "The zone resource pool exhausted for a3", FailureClass.STOCKOUT),
        (FAILED, None, "Zone does not have enough resources available", FailureClass.STOCKOUT),
        (FAILED, 8, "Resources are insufficient in region us-central1", FailureClass.STOCKOUT),
        (
            FAILED,
            3,
            "The replica workerpool0-0 exited with a non-zero status of 1.",
            FailureClass.USER_ERROR,
        ),
        (FAILED, 13, "something broke", FailureClass.INFRASTRUCTURE),
        (FAILED, 14, "service unavailable", FailureClass.INFRASTRUCTURE),
        (
            FAILED,
            None,
            "Internal error occurred for the current attempt",
            FailureClass.INFRASTRUCTURE,
        ),
        (FAILED, 3, "Invalid image URI", FailureClass.UNKNOWN),
        (FAILED, None, None, FailureClass.UNKNOWN),
        ("", None, "", FailureClass.UNKNOWN),
    ],
)
def test_default_table_rows(
    state: str, code: int | None, message: str | None, expected: FailureClass
) -> None:
    assert classify(state, code, message) is expected


@pytest.mark.parametrize(
    ("state", "code", "message", "expected"),
    [
        # A preemption reported as RESOURCE_EXHAUSTED is still a preemption: rule 3 before 4.
        (FAILED, 8, "Job was preempted", FailureClass.PREEMPTED),
        # Preemption kills the process, so its message may also carry a non-zero exit.
        (FAILED, 13, "preempted; exited with a non-zero status of 137", FailureClass.PREEMPTED),
        # The state decides before any message.
        ("JOB_STATE_CANCELLED", 8, "preempted", FailureClass.CANCELLED),
        ("JOB_STATE_EXPIRED", 8, "STOCKOUT", FailureClass.MAX_WAIT_EXPIRED),
        # Stockout outranks the generic infrastructure codes.
        (FAILED, 13, "ZONE_RESOURCE_POOL_EXHAUSTED", FailureClass.STOCKOUT),
        # A user's non-zero exit with an internal code is the user's failure.
        (FAILED, 13, "exited with a non-zero status of 2", FailureClass.USER_ERROR),
    ],
)
def test_order_resolves_conflicts(
    state: str, code: int | None, message: str | None, expected: FailureClass
) -> None:
    assert classify(state, code, message) is expected


def test_default_order_is_documented_order() -> None:
    assert [rule.failure for rule in DEFAULT_RULES] == [
        FailureClass.CANCELLED,
        FailureClass.MAX_WAIT_EXPIRED,
        FailureClass.PREEMPTED,
        FailureClass.STOCKOUT,
        FailureClass.USER_ERROR,
        FailureClass.INFRASTRUCTURE,
    ]


def test_failure_class_values_are_wire_strings() -> None:
    assert FailureClass.MAX_WAIT_EXPIRED.value == "max-wait-expired"
    assert isinstance(FailureClass.PREEMPTED, str)
    assert FailureClass("user-error") is FailureClass.USER_ERROR


def test_rule_needs_a_condition() -> None:
    with pytest.raises(ValueError, match="at least one"):
        FailureRule(FailureClass.STOCKOUT)


def test_custom_json_table_replaces_defaults() -> None:
    table = load_rules(
        '[{"class": "infrastructure", "messages": ["NCCL timeout"]},'
        ' {"class": "preempted", "codes": [10], "states": ["job_state_failed"]}]'
    )
    assert classify(FAILED, None, "nccl TIMEOUT on rank 3", table) is FailureClass.INFRASTRUCTURE
    assert classify(FAILED, 8, "whatever", table) is FailureClass.PREEMPTED  # state matched
    assert classify("JOB_STATE_CANCELLED", None, None, table) is FailureClass.UNKNOWN


def test_custom_yaml_table_with_defaults_after() -> None:
    table = load_rules(
        """
        includeDefaults: true
        rules:
          - class: stockout
            messages: ["Internal error: no a3 capacity"]
        """
    )
    assert len(table) == len(DEFAULT_RULES) + 1
    # The custom rule wins over the default "Internal error" infrastructure rule...
    assert classify(FAILED, 13, "Internal error: no A3 capacity", table) is FailureClass.STOCKOUT
    # ...and the defaults still apply after it.
    assert classify(FAILED, 13, "Internal error", table) is FailureClass.INFRASTRUCTURE
    assert classify("JOB_STATE_EXPIRED", None, None, table) is FailureClass.MAX_WAIT_EXPIRED


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rules: [", "neither JSON"),
        ("[]", "rules: must be a non-empty list"),
        ('{"rules": "x"}', "rules: must be a non-empty list"),
        ('[{"messages": ["x"]}]', "rules[0].class: is required"),
        ('[{"class": "boom", "messages": ["x"]}]', "rules[0].class: 'boom' is not one of"),
        ('[{"class": "stockout"}]', "rules[0]: needs at least one of"),
        ('[{"class": "stockout", "codes": [99]}]', "rules[0].codes: must be a list of google.rpc"),
        ('[{"class": "stockout", "codes": [true]}]', "rules[0].codes"),
        ('[{"class": "stockout", "messages": "x"}]', "rules[0].messages: must be a list"),
        ('[{"class": "stockout", "messages": [""]}]', "rules[0].messages"),
        ('[{"class": "stockout", "codes": [8], "colour": 1}]', "rules[0].colour: unknown key"),
        ('["stockout"]', "rules[0]: must be an object"),
        ('{"rules": [{"class": "stockout", "codes": [8]}], "extra": 1}', "extra: unknown key"),
        (
            '{"rules": [{"class": "stockout", "codes": [8]}], "includeDefaults": "yes"}',
            "includeDefaults: must be true or false",
        ),
    ],
)
def test_invalid_tables_are_rejected_clearly(text: str, problem: str) -> None:
    with pytest.raises(InvalidRules) as info:
        load_rules(text)
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_invalid_table_reports_every_problem() -> None:
    with pytest.raises(InvalidRules) as info:
        load_rules('[{"class": "nope", "codes": [8]}, {"class": "stockout", "codes": ["8"]}]')
    paths = [p.split(":")[0] for p in info.value.problems]
    assert paths == ["rules[0].class", "rules[1].codes"]
    assert isinstance(info.value, ValueError)


def test_a_failure_rules_file_is_read_bounded(tmp_path):
    from shared.bootstrap import MAX_RULES_BYTES, retry_policy
    from shared.kernel.config import Settings
    from shared.kernel.errors import InvalidConfiguration

    small = tmp_path / "rules.yaml"
    small.write_text('[{"class": "infrastructure", "messages": ["NCCL timeout"]}]')
    settings = Settings.from_env({"FLEXJOBS_FAILURE_RULES": str(small)})
    assert [rule.failure for rule in retry_policy(settings).rules] == ["infrastructure"]
    large = tmp_path / "large.yaml"
    large.write_bytes(b"#" * (MAX_RULES_BYTES + 1))
    with pytest.raises(InvalidConfiguration, match="over"):
        retry_policy(Settings.from_env({"FLEXJOBS_FAILURE_RULES": str(large)}))
