"""Checks of fields that training jobs and deployments both have: the service account, the
container image, and the machine spec with its accelerator.

The service account and the image are where the operator guards apply; the machine spec is
where the DWS accelerator rule and the Spot-on-TPU-Pods rule apply.
"""

from __future__ import annotations

from typing import Any

from shared.domain.model.strategies import Strategy
from shared.domain.model.values import kind_of, show
from shared.domain.request.machines import (
    ALL_ACCELERATORS,
    TPU_ACCELERATORS,
    TPU_POD_ACCELERATORS,
    UNSPECIFIED_ACCELERATOR,
    describe,
    dws_accelerators_text,
    is_dws_accelerator,
    is_tpu_pod,
    machine_shape,
    machine_spec_problems,
)
from shared.domain.request.validation.readers import Context, read_int, read_str
from shared.domain.request.wire import ACCELERATOR_COUNT


def check_service_account(ctx: Context, node: dict[str, Any], base: str) -> None:
    """Allow ``serviceAccount`` only when it is one the operator allows."""
    path = f"{base}.serviceAccount"
    if "serviceAccount" not in node:
        return
    value = node["serviceAccount"]
    allowed = ctx.guards.allowed_service_accounts
    if not isinstance(value, str) or not value:
        ctx.add(path, f"must be a service account email, not {kind_of(value)}")
    elif not allowed:
        ctx.add(
            path,
            "must be absent: only the default Vertex AI service agent is allowed here; remove "
            "serviceAccount (an operator can allow accounts with "
            "FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS)",
        )
    elif value not in allowed:
        ctx.add(
            path,
            f"{show(value)} is not allowed; use one of {', '.join(allowed)}, or remove the "
            "field to run as the default Vertex AI service agent",
        )


def check_image(ctx: Context, image: str | None, path: str) -> None:
    """Allow an image only under one of the operator's prefixes (any, when none is set)."""
    prefixes = ctx.guards.allowed_image_prefixes
    if image is not None and prefixes and not image.startswith(prefixes):
        ctx.add(
            path,
            f"image {show(image)} is not allowed; images must start with one of "
            f"{', '.join(prefixes)} (FLEXJOBS_ALLOWED_IMAGE_PREFIXES)",
        )


def check_machine_spec(
    ctx: Context, spec: Any, path: str, *, strategy: str | None, default: str | None
) -> int:
    """Check a machineSpec; return its GPUs per replica (0 when unknown or CPU-only).

    ``default`` is the machine type Vertex uses when machineType is absent (deployments only).
    """
    if spec is None:
        ctx.add(path, "is required: machineType, plus acceleratorType and acceleratorCount")
        return 0
    if not isinstance(spec, dict):
        ctx.add(path, f"must be a JSON object, not {kind_of(spec)}")
        return 0
    machine = read_str(
        ctx,
        spec,
        "machineType",
        path,
        required=default is None,
        what="a machine type such as a2-highgpu-1g",
    )
    if machine is None and "machineType" not in spec:
        machine = default
    usable, accelerator = _read_accelerator(ctx, spec, path)
    count = read_int(
        ctx,
        spec,
        "acceleratorCount",
        path,
        required=False,
        bounds=ACCELERATOR_COUNT,
        what="accelerators per machine",
    )
    count_ok = spec.get("acceleratorCount") is None or count is not None
    topology = spec.get("tpuTopology")
    if topology is not None and not isinstance(topology, str):
        ctx.add(f"{path}.tpuTopology", f"must be a string such as 2x2, not {kind_of(topology)}")
        topology = None
    if machine is not None and usable and count_ok:
        for field, message in machine_spec_problems(machine, accelerator, count):
            ctx.add(f"{path}.{field}", message)
    if strategy == Strategy.FLEX_START and usable:
        _check_dws_accelerator(ctx, path, machine, accelerator)
    if strategy == Strategy.SPOT and usable and is_tpu_pod(accelerator, machine or "", topology):
        field = (
            "acceleratorType"
            if accelerator in TPU_POD_ACCELERATORS
            else ("tpuTopology" if topology else "machineType")
        )
        ctx.add(
            f"{path}.{field}",
            "Spot VMs are not supported on TPU Pods; use a GPU machine type for Spot",
        )
    shape = machine_shape(machine) if machine else None
    if shape is not None:
        return shape.accelerator_count
    if accelerator is not None and accelerator not in TPU_ACCELERATORS and count:
        return count
    return 0


def _read_accelerator(ctx: Context, spec: dict[str, Any], path: str) -> tuple[bool, str | None]:
    """Return (usable, acceleratorType); ACCELERATOR_TYPE_UNSPECIFIED means no accelerator."""
    raw = spec.get("acceleratorType")
    if raw is None or raw == UNSPECIFIED_ACCELERATOR:
        return True, None
    if not isinstance(raw, str):
        message = f"must be a string such as NVIDIA_L4, not {kind_of(raw)}"
        ctx.add(f"{path}.acceleratorType", message)
        return False, None
    if raw not in ALL_ACCELERATORS:
        ctx.add(
            f"{path}.acceleratorType",
            f"{show(raw)} is not a Vertex AI accelerator type; use one of "
            f"{', '.join(ALL_ACCELERATORS)}",
        )
        return False, None
    return True, raw


def _check_dws_accelerator(
    ctx: Context, path: str, machine: str | None, accelerator: str | None
) -> None:
    field = f"{path}.acceleratorType"
    if accelerator is None:
        if machine is not None and machine_shape(machine) is not None:
            return  # machine_spec_problems already asked for this machine's GPU
        ctx.add(
            field,
            "is required under FLEX_START: DWS provisions GPUs only, so CPU-only pools are not "
            f"supported; use one of {dws_accelerators_text()}, or set scheduling.strategy to "
            "STANDARD or SPOT",
        )
    elif not is_dws_accelerator(accelerator):
        noun = "TPUs are" if accelerator in TPU_ACCELERATORS else f"{describe(accelerator)} is"
        ctx.add(
            field,
            f"{noun} not supported by DWS (FLEX_START); use one of {dws_accelerators_text()}, "
            "or set scheduling.strategy to SPOT or STANDARD",
        )
