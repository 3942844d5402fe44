"""The machine <-> accelerator table: every row, and the combinations it must refuse."""

from __future__ import annotations

import pytest

from shared.domain.request import machines
from shared.domain.request.machines import (
    DWS_ACCELERATORS,
    DWS_MACHINES,
    describe,
    families_text,
    gpus_per_replica,
    is_tpu_pod,
    machine_spec_problems,
    machine_type_for,
)

# The table as the Compute Engine "GPU machine types" page states it, written out again so a
# typo in machines.py cannot agree with itself.
EXPECTED = {
    "g2-standard-4": ("NVIDIA_L4", 1),
    "g2-standard-8": ("NVIDIA_L4", 1),
    "g2-standard-12": ("NVIDIA_L4", 1),
    "g2-standard-16": ("NVIDIA_L4", 1),
    "g2-standard-24": ("NVIDIA_L4", 2),
    "g2-standard-32": ("NVIDIA_L4", 1),
    "g2-standard-48": ("NVIDIA_L4", 4),
    "g2-standard-96": ("NVIDIA_L4", 8),
    "a2-highgpu-1g": ("NVIDIA_TESLA_A100", 1),
    "a2-highgpu-2g": ("NVIDIA_TESLA_A100", 2),
    "a2-highgpu-4g": ("NVIDIA_TESLA_A100", 4),
    "a2-highgpu-8g": ("NVIDIA_TESLA_A100", 8),
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    "a2-ultragpu-1g": ("NVIDIA_A100_80GB", 1),
    "a2-ultragpu-2g": ("NVIDIA_A100_80GB", 2),
    "a2-ultragpu-4g": ("NVIDIA_A100_80GB", 4),
    "a2-ultragpu-8g": ("NVIDIA_A100_80GB", 8),
    "a3-highgpu-1g": ("NVIDIA_H100_80GB", 1),
    "a3-highgpu-2g": ("NVIDIA_H100_80GB", 2),
    "a3-highgpu-4g": ("NVIDIA_H100_80GB", 4),
    "a3-highgpu-8g": ("NVIDIA_H100_80GB", 8),
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    "a3-ultragpu-8g": ("NVIDIA_H200_141GB", 8),
    "a4-highgpu-8g": ("NVIDIA_B200", 8),
}
ROWS = sorted(EXPECTED.items())


def test_dws_table_is_exactly_the_documented_one():
    got = {name: (s.accelerator_type, s.accelerator_count) for name, s in DWS_MACHINES.items()}
    assert got == EXPECTED


def test_dws_allow_list_is_exact():
    assert set(DWS_ACCELERATORS) == {
        "NVIDIA_L4",
        "NVIDIA_TESLA_A100",
        "NVIDIA_A100_80GB",
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
        "NVIDIA_B200",
    }
    assert {"NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_P100"} <= set(
        machines.NON_DWS_GPUS
    )
    assert set(machines.TPU_ACCELERATORS) == {"TPU_V2", "TPU_V3", "TPU_V4_POD", "TPU_V5_LITEPOD"}
    assert not set(DWS_ACCELERATORS) & set(machines.NON_DWS_ACCELERATORS)


@pytest.mark.parametrize(("machine", "row"), ROWS)
def test_every_row_is_valid(machine, row):
    accelerator, count = row
    assert machine_spec_problems(machine, accelerator, count) == []
    assert gpus_per_replica(machine) == count
    assert machines.accelerator_of(machine) == accelerator


@pytest.mark.parametrize(("machine", "row"), ROWS)
def test_every_row_refuses_a_wrong_count(machine, row):
    accelerator, count = row
    for wrong in (0, count + 1, count * 2, None):
        problems = machine_spec_problems(machine, accelerator, wrong)
        assert [field for field, _ in problems] == ["acceleratorCount"], wrong
        assert f"set acceleratorCount to {count}" in problems[0][1]


@pytest.mark.parametrize(("machine", "row"), ROWS)
def test_every_row_refuses_another_accelerator(machine, row):
    accelerator, count = row
    other = "NVIDIA_B200" if accelerator != "NVIDIA_B200" else "NVIDIA_L4"
    problems = machine_spec_problems(machine, other, count)
    assert [field for field, _ in problems] == ["acceleratorType"]
    assert accelerator in problems[0][1]


@pytest.mark.parametrize(("machine", "row"), ROWS)
def test_every_row_needs_its_accelerator(machine, row):
    accelerator, _ = row
    problems = dict(machine_spec_problems(machine, None, None))
    assert set(problems) == {"acceleratorType", "acceleratorCount"}
    assert accelerator in problems["acceleratorType"]


@pytest.mark.parametrize(
    ("machine", "accelerator", "count", "fields"),
    [
        # N1 takes T4/P4/V100/P100 in the counts Compute Engine allows.
        ("n1-standard-8", "NVIDIA_TESLA_T4", 1, []),
        ("n1-standard-8", "NVIDIA_TESLA_T4", 4, []),
        ("n1-standard-8", "NVIDIA_TESLA_T4", 8, ["acceleratorCount"]),
        ("n1-standard-8", "NVIDIA_TESLA_T4", 3, ["acceleratorCount"]),
        ("n1-highmem-16", "NVIDIA_TESLA_V100", 8, []),
        ("n1-standard-4", "NVIDIA_TESLA_P100", 2, []),
        ("n1-standard-4", "NVIDIA_TESLA_P4", None, ["acceleratorCount"]),
        ("g2-standard-8", "NVIDIA_TESLA_T4", 1, ["acceleratorType"]),
        ("e2-standard-8", "NVIDIA_TESLA_T4", 1, ["machineType"]),
        # DWS GPUs come only with their own families.
        ("n1-standard-8", "NVIDIA_L4", 1, ["machineType"]),
        ("n2-standard-32", "NVIDIA_H100_80GB", 8, ["machineType"]),
        ("a2-highgpu-3g", "NVIDIA_TESLA_A100", 3, ["machineType"]),
        ("a3-edgegpu-8g", "NVIDIA_H100_80GB", 8, ["machineType"]),
        ("g2-standard-2", None, None, ["machineType"]),
        # CPU only.
        ("n1-standard-4", None, None, []),
        ("n1-standard-4", None, 0, []),
        ("n1-standard-4", None, 2, ["acceleratorCount"]),
        # TPUs.
        ("cloud-tpu", "TPU_V3", 8, []),
        ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD", 4, []),
        ("n1-standard-4", "TPU_V2", 8, ["machineType"]),
        ("cloud-tpu", "TPU_V2", 0, ["acceleratorCount"]),
        # Non-DWS accelerator-optimized machines are still checked exactly.
        ("g4-standard-96", "NVIDIA_RTX_PRO_6000", 2, []),
        ("a4x-highgpu-4g", "NVIDIA_GB200", 8, ["acceleratorCount"]),
        ("n1-standard-8", "NVIDIA_TESLA_K80", 1, ["acceleratorType"]),
        ("n1-standard-8", "NVIDIA_FAKE", 1, ["acceleratorType"]),
    ],
)
def test_combinations(machine, accelerator, count, fields):
    assert [f for f, _ in machine_spec_problems(machine, accelerator, count)] == fields


def test_unknown_machine_message_names_the_families():
    [(field, message)] = machine_spec_problems("n1-standard-8", "NVIDIA_L4", 1)
    assert field == "machineType"
    assert "g2-standard" in message and "g2-standard-4" in message
    [(_, message)] = machine_spec_problems("a2-highgpu-3g", "NVIDIA_TESLA_A100", 3)
    assert "a2-highgpu" in message and "a2-megagpu" in message


def test_count_hint_points_at_the_right_machine():
    [(_, message)] = machine_spec_problems("a2-highgpu-2g", "NVIDIA_TESLA_A100", 4)
    assert "a2-highgpu-4g" in message


def test_helpers():
    assert describe("NVIDIA_TESLA_T4") == "T4 (NVIDIA_TESLA_T4)"
    assert describe("SOMETHING") == "SOMETHING"
    assert machine_type_for("NVIDIA_L4", 2) == "g2-standard-24"
    assert machine_type_for("NVIDIA_L4", 3) is None
    assert gpus_per_replica("n1-standard-8") is None
    assert families_text("NVIDIA_B200") == "the a4-highgpu family (a4-highgpu-8g)"
    assert "a2-ultragpu" in families_text()


@pytest.mark.parametrize(
    ("accelerator", "machine", "topology", "pod"),
    [
        ("TPU_V4_POD", "cloud-tpu", None, True),
        ("TPU_V5_LITEPOD", "ct5lp-hightpu-4t", None, True),
        ("TPU_V3", "cloud-tpu", "4x4", True),
        (None, "ct5p-hightpu-4t", None, True),
        ("TPU_V3", "cloud-tpu", None, False),
        ("NVIDIA_L4", "g2-standard-4", None, False),
        (None, "n1-standard-4", "", False),
    ],
)
def test_tpu_pods(accelerator, machine, topology, pod):
    assert is_tpu_pod(accelerator, machine, topology) is pod
