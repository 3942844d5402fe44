"""Compute Engine machine types and the accelerators they carry, as Vertex AI names them.

Accelerator-optimized machine types (A2, A3, A4, G2, ...) come with a fixed model and number of
GPUs, so a Vertex ``machineSpec`` must name exactly that ``acceleratorType`` and
``acceleratorCount``. N1 machine types instead take a chosen number of older GPUs (T4, P4,
V100, P100).

Sources (checked when this table was written):

- Compute Engine "GPU machine types" (cloud.google.com/compute/docs/gpus) and
  "Accelerator-optimized machine family" (cloud.google.com/compute/docs/accelerator-optimized-
  machines): the GPU count of every machine type below, and the N1 GPU counts.
- Vertex AI v1 ``AcceleratorType`` enum (google.cloud.aiplatform_v1.types.AcceleratorType and
  the REST reference of ``MachineSpec``): the accelerator names.
- Vertex AI "Schedule training jobs based on resource availability" (seed 000): DWS serves
  L4, A100, H100, H200 and B200 GPUs.

Everything here is pure data plus lookups; nothing performs I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

#: GPUs that Dynamic Workload Scheduler (``scheduling.strategy = FLEX_START``) can provision.
DWS_ACCELERATORS: Final = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)

#: GPUs Vertex AI knows that DWS does not serve (usable with STANDARD or SPOT).
NON_DWS_GPUS: Final = (
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_K80",
    "NVIDIA_GB200",
    "NVIDIA_RTX_PRO_6000",
)

#: Cloud TPU accelerator types. None of them is served by DWS.
TPU_ACCELERATORS: Final = ("TPU_V2", "TPU_V3", "TPU_V4_POD", "TPU_V5_LITEPOD")

#: TPU accelerator types that are Pod slices; Spot VMs are not supported on TPU Pods (seed 004).
TPU_POD_ACCELERATORS: Final = ("TPU_V4_POD", "TPU_V5_LITEPOD")

NON_DWS_ACCELERATORS: Final = NON_DWS_GPUS + TPU_ACCELERATORS

#: Every accelerator type of the Vertex AI v1 enum except ACCELERATOR_TYPE_UNSPECIFIED.
ALL_ACCELERATORS: Final = DWS_ACCELERATORS + NON_DWS_ACCELERATORS

#: The enum's "no accelerator" value; treated exactly like an absent acceleratorType.
UNSPECIFIED_ACCELERATOR: Final = "ACCELERATOR_TYPE_UNSPECIFIED"

#: Short names people use, for error messages ("T4 is not supported by DWS").
SHORT_NAMES: Final = MappingProxyType(
    {
        "NVIDIA_L4": "L4",
        "NVIDIA_TESLA_A100": "A100 40GB",
        "NVIDIA_A100_80GB": "A100 80GB",
        "NVIDIA_H100_80GB": "H100 80GB",
        "NVIDIA_H100_MEGA_80GB": "H100 Mega 80GB",
        "NVIDIA_H200_141GB": "H200 141GB",
        "NVIDIA_B200": "B200",
        "NVIDIA_TESLA_T4": "T4",
        "NVIDIA_TESLA_V100": "V100",
        "NVIDIA_TESLA_P4": "P4",
        "NVIDIA_TESLA_P100": "P100",
        "NVIDIA_TESLA_K80": "K80",
        "NVIDIA_GB200": "GB200",
        "NVIDIA_RTX_PRO_6000": "RTX PRO 6000",
        "TPU_V2": "TPU v2",
        "TPU_V3": "TPU v3",
        "TPU_V4_POD": "TPU v4 Pod",
        "TPU_V5_LITEPOD": "TPU v5e Pod",
    }
)


@dataclass(frozen=True)
class MachineShape:
    """A machine type that comes with a fixed number of one GPU model attached."""

    machine_type: str
    accelerator_type: str
    accelerator_count: int

    @property
    def family(self) -> str:
        """The machine family, e.g. ``a2-highgpu`` for ``a2-highgpu-2g``."""
        return self.machine_type.rsplit("-", 1)[0]


def _shapes(accelerator: str, *pairs: tuple[str, int]) -> dict[str, MachineShape]:
    return {name: MachineShape(name, accelerator, count) for name, count in pairs}


#: Machine types DWS can provision, with the exact GPUs each carries.
DWS_MACHINES: Final = MappingProxyType(
    {
        **_shapes(
            "NVIDIA_L4",
            ("g2-standard-4", 1),
            ("g2-standard-8", 1),
            ("g2-standard-12", 1),
            ("g2-standard-16", 1),
            ("g2-standard-24", 2),
            ("g2-standard-32", 1),
            ("g2-standard-48", 4),
            ("g2-standard-96", 8),
        ),
        **_shapes(
            "NVIDIA_TESLA_A100",
            ("a2-highgpu-1g", 1),
            ("a2-highgpu-2g", 2),
            ("a2-highgpu-4g", 4),
            ("a2-highgpu-8g", 8),
            ("a2-megagpu-16g", 16),
        ),
        **_shapes(
            "NVIDIA_A100_80GB",
            ("a2-ultragpu-1g", 1),
            ("a2-ultragpu-2g", 2),
            ("a2-ultragpu-4g", 4),
            ("a2-ultragpu-8g", 8),
        ),
        **_shapes(
            "NVIDIA_H100_80GB",
            ("a3-highgpu-1g", 1),
            ("a3-highgpu-2g", 2),
            ("a3-highgpu-4g", 4),
            ("a3-highgpu-8g", 8),
        ),
        **_shapes("NVIDIA_H100_MEGA_80GB", ("a3-megagpu-8g", 8)),
        **_shapes("NVIDIA_H200_141GB", ("a3-ultragpu-8g", 8)),
        **_shapes("NVIDIA_B200", ("a4-highgpu-8g", 8)),
    }
)

# Accelerator-optimized machine types with GPUs that DWS does not serve. They are listed so a
# Spot deployment on them is checked like any other instead of being called unknown. The
# fractional-GPU G4 shapes (g4-standard-6/12/24) are left out: Vertex has no way to ask for
# part of a GPU through acceleratorCount.
_OTHER_FIXED_MACHINES: Final = {
    **_shapes("NVIDIA_GB200", ("a4x-highgpu-4g", 4)),
    **_shapes(
        "NVIDIA_RTX_PRO_6000",
        ("g4-standard-48", 1),
        ("g4-standard-96", 2),
        ("g4-standard-192", 4),
        ("g4-standard-384", 8),
    ),
}

#: Every machine type with a fixed GPU model and count that flexjobs knows.
FIXED_GPU_MACHINES: Final = MappingProxyType({**DWS_MACHINES, **_OTHER_FIXED_MACHINES})

#: Accelerators that only come attached to accelerator-optimized machine types.
FIXED_ACCELERATORS: Final = tuple(
    sorted({shape.accelerator_type for shape in FIXED_GPU_MACHINES.values()})
)

#: Machine-type prefixes of the accelerator-optimized families, for "unknown machine" errors.
GPU_MACHINE_PREFIXES: Final = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")

#: GPUs that attach to N1 machine types, with the GPU counts Compute Engine allows.
N1_GPU_COUNTS: Final = MappingProxyType(
    {
        "NVIDIA_TESLA_T4": (1, 2, 4),
        "NVIDIA_TESLA_P4": (1, 2, 4),
        "NVIDIA_TESLA_V100": (1, 2, 4, 8),
        "NVIDIA_TESLA_P100": (1, 2, 4),
    }
)

# Vertex limits acceleratorCount to an int32; TPU counts are otherwise left to Vertex.
MAX_INT32: Final = 2**31 - 1


def describe(accelerator_type: str) -> str:
    """Name an accelerator for people, e.g. ``T4 (NVIDIA_TESLA_T4)``.

    Examples:
        >>> describe("NVIDIA_TESLA_T4")
        'T4 (NVIDIA_TESLA_T4)'
    """
    short = SHORT_NAMES.get(accelerator_type)
    return f"{short} ({accelerator_type})" if short else accelerator_type


def dws_accelerators_text() -> str:
    """The DWS GPU allow-list as one readable phrase, for error messages."""
    return ", ".join(describe(a) for a in DWS_ACCELERATORS)


def machine_shape(machine_type: str) -> MachineShape | None:
    """The fixed GPU shape of ``machine_type``, or None when it has no fixed GPUs we know."""
    return FIXED_GPU_MACHINES.get(machine_type)


def gpus_per_replica(machine_type: str) -> int | None:
    """How many GPUs one replica of ``machine_type`` has, or None when it is not fixed.

    Examples:
        >>> gpus_per_replica("g2-standard-24")
        2
        >>> gpus_per_replica("n1-standard-8") is None
        True
    """
    shape = machine_shape(machine_type)
    return shape.accelerator_count if shape else None


def accelerator_of(machine_type: str) -> str | None:
    """The accelerator type that ``machine_type`` comes with, or None."""
    shape = machine_shape(machine_type)
    return shape.accelerator_type if shape else None


def machine_types_for(accelerator_type: str) -> tuple[str, ...]:
    """Every known fixed-GPU machine type that carries ``accelerator_type``."""
    return tuple(
        name
        for name, shape in FIXED_GPU_MACHINES.items()
        if shape.accelerator_type == accelerator_type
    )


def machine_type_for(accelerator_type: str, count: int) -> str | None:
    """The machine type carrying exactly ``count`` of ``accelerator_type``, if there is one.

    When several match (four G2 types carry one L4) the smallest is returned.
    """
    for name, shape in FIXED_GPU_MACHINES.items():
        if shape.accelerator_type == accelerator_type and shape.accelerator_count == count:
            return name
    return None


def is_dws_accelerator(accelerator_type: str) -> bool:
    """True when DWS (FLEX_START) can provision ``accelerator_type``."""
    return accelerator_type in DWS_ACCELERATORS


def is_tpu(accelerator_type: str | None, machine_type: str = "") -> bool:
    """True for a Cloud TPU accelerator type or a TPU VM machine type (``ct*``, ``cloud-tpu``)."""
    if accelerator_type in TPU_ACCELERATORS:
        return True
    return machine_type.startswith("ct") or machine_type == "cloud-tpu"


def is_tpu_pod(
    accelerator_type: str | None, machine_type: str = "", tpu_topology: str | None = None
) -> bool:
    """True when a machine spec asks for a TPU Pod slice, where Spot VMs are not supported.

    A Pod accelerator type (TPU_V4_POD, TPU_V5_LITEPOD), a ``tpuTopology`` or a TPU VM machine
    type (``ct4p-…``, ``ct5lp-…``: Vertex provisions those as Pod slices) each count.
    """
    if accelerator_type in TPU_POD_ACCELERATORS or tpu_topology:
        return True
    return machine_type.startswith("ct")


def families_text(accelerator_type: str | None = None) -> str:
    """The machine families (and their types) that carry ``accelerator_type``, or all of them.

    Examples:
        >>> families_text("NVIDIA_H200_141GB")
        'the a3-ultragpu family (a3-ultragpu-8g)'
    """
    names = machine_types_for(accelerator_type) if accelerator_type else ()
    if not names:
        names = tuple(FIXED_GPU_MACHINES)
    families = sorted({FIXED_GPU_MACHINES[n].family for n in names})
    noun = "family" if len(families) == 1 else "families"
    return f"the {', '.join(families)} {noun} ({', '.join(names)})"


def machine_spec_problems(
    machine_type: str, accelerator_type: str | None, accelerator_count: int | None
) -> list[tuple[str, str]]:
    """Check that a machine type, accelerator type and count fit together.

    ``accelerator_type`` is None for a CPU-only spec (ACCELERATOR_TYPE_UNSPECIFIED counts as
    None); ``accelerator_count`` is None when absent. Both must already be of the right JSON
    type. Returns ``(field, message)`` pairs, field being ``machineType``, ``acceleratorType``
    or ``acceleratorCount``; every problem is reported, not just the first.

    Examples:
        >>> machine_spec_problems("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2)
        []
        >>> machine_spec_problems("a2-highgpu-2g", "NVIDIA_TESLA_A100", 1)[0][0]
        'acceleratorCount'
    """
    shape = machine_shape(machine_type)
    if shape is not None:
        return _fixed_shape_problems(shape, accelerator_type, accelerator_count)
    if machine_type.startswith(GPU_MACHINE_PREFIXES):
        message = (
            f"{machine_type} is not a known accelerator-optimized machine type; use one of "
            f"{families_text(accelerator_type)}"
        )
        return [("machineType", message)]
    if accelerator_type is None:
        if accelerator_count in (None, 0):
            return []
        message = "is set but acceleratorType is not; set acceleratorType or remove it"
        return [("acceleratorCount", message)]
    if accelerator_type in N1_GPU_COUNTS:
        return _n1_problems(machine_type, accelerator_type, accelerator_count)
    if accelerator_type in TPU_ACCELERATORS:
        return _tpu_problems(machine_type, accelerator_type, accelerator_count)
    if accelerator_type in FIXED_ACCELERATORS:
        message = (
            f"{machine_type} cannot carry {describe(accelerator_type)}; that GPU comes only "
            f"with {families_text(accelerator_type)}"
        )
        return [("machineType", message)]
    if accelerator_type == "NVIDIA_TESLA_K80":
        # Still in the Vertex enum, but the K80 has reached end of support on Compute Engine.
        message = (
            "K80 (NVIDIA_TESLA_K80) has reached end of support; choose another GPU such as "
            "T4 (NVIDIA_TESLA_T4) or L4 (NVIDIA_L4)"
        )
        return [("acceleratorType", message)]
    return [("acceleratorType", f"unknown; choose one of {', '.join(ALL_ACCELERATORS)}")]


def _fixed_shape_problems(
    shape: MachineShape, accelerator_type: str | None, accelerator_count: int | None
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    name, gpu, count = shape.machine_type, shape.accelerator_type, shape.accelerator_count
    if accelerator_type is None:
        problems.append(
            (
                "acceleratorType",
                f"{name} comes with {count} x {gpu}; set acceleratorType to {gpu} "
                f"and acceleratorCount to {count}",
            )
        )
    elif accelerator_type != gpu:
        others = machine_types_for(accelerator_type)
        hint = f", or use a machine type for it: {', '.join(others)}" if others else ""
        problems.append(
            (
                "acceleratorType",
                f"{name} comes with {gpu}, not {accelerator_type}; set acceleratorType to "
                f"{gpu}{hint}",
            )
        )
    if accelerator_count != count:
        exact = machine_type_for(gpu, accelerator_count) if accelerator_count else None
        gpus = "1 GPU" if accelerator_count == 1 else f"{accelerator_count} GPUs"
        hint = f" (for {gpus} use {exact})" if exact else ""
        problems.append(
            (
                "acceleratorCount",
                f"{name} has exactly {count} x {gpu}; set acceleratorCount to {count}{hint}",
            )
        )
    return problems


def _n1_problems(
    machine_type: str, accelerator_type: str, accelerator_count: int | None
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    counts = N1_GPU_COUNTS[accelerator_type]
    if not machine_type.startswith("n1-"):
        problems.append(
            (
                "machineType",
                f"{describe(accelerator_type)} attaches only to N1 machine types such as "
                f"n1-standard-8; {machine_type} cannot carry it",
            )
        )
    if accelerator_count not in counts:
        problems.append(
            (
                "acceleratorCount",
                f"{describe(accelerator_type)} attaches in counts of "
                f"{', '.join(map(str, counts))} per machine",
            )
        )
    return problems


def _tpu_problems(
    machine_type: str, accelerator_type: str, accelerator_count: int | None
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if not is_tpu(None, machine_type):
        problems.append(
            (
                "machineType",
                f"{describe(accelerator_type)} needs a TPU machine type such as cloud-tpu or "
                "ct5lp-hightpu-4t",
            )
        )
    if accelerator_count is None or accelerator_count < 1:
        problems.append(("acceleratorCount", "set the number of TPU chips (at least 1)"))
    return problems
