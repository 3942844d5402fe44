"""GPU capacity per (location, accelerator type), and how much of it running jobs hold."""

from __future__ import annotations

from typing import Any

from google.cloud import aiplatform_v1

from flexjobs_local.simulator.common import SimError


def check_gpus(gpus: int, accelerator_type: str | None = None) -> None:
    """Refuse a negative count or an accelerator type the API does not know.

    Raises:
        SimError: INVALID_ARGUMENT.
    """
    if (
        accelerator_type is not None
        and accelerator_type not in aiplatform_v1.AcceleratorType.__members__
    ):
        raise SimError("INVALID_ARGUMENT", f"Unknown accelerator type {accelerator_type!r}.")
    if gpus < 0:
        raise SimError("INVALID_ARGUMENT", "gpus must not be negative.")


class Capacity:
    """Total and in-use GPUs; pairs never set explicitly have the default total.

    Not thread-safe: the engine holds its lock.
    """

    def __init__(self, default_gpus: int) -> None:
        self.default_gpus = default_gpus
        self._total: dict[tuple[str, str], int] = {}
        self._in_use: dict[tuple[str, str], int] = {}

    def set_total(self, location: str, accelerator_type: str, gpus: int) -> None:
        self._total[(location, accelerator_type)] = int(gpus)

    def total(self, location: str, accelerator_type: str) -> int:
        return self._total.get((location, accelerator_type), self.default_gpus)

    def fits(self, location: str, demand: dict[str, int]) -> bool:
        """Whether every GPU of ``demand`` is free in ``location`` at once (gang scheduling)."""
        return all(
            self.total(location, accel) - self._in_use.get((location, accel), 0) >= gpus
            for accel, gpus in demand.items()
        )

    def allocate(self, location: str, demand: dict[str, int], sign: int) -> None:
        """Take (``sign`` +1) or give back (-1) the GPUs of ``demand``."""
        for accel, gpus in demand.items():
            key = (location, accel)
            self._in_use[key] = self._in_use.get(key, 0) + sign * gpus

    def to_json(self) -> dict[str, Any]:
        """``{"defaultGpus": n, "pools": [{location, acceleratorType, gpus, inUse, explicit}]}``."""
        keys = sorted(set(self._total) | {k for k, v in self._in_use.items() if v})
        return {
            "defaultGpus": self.default_gpus,
            "pools": [
                {
                    "location": location,
                    "acceleratorType": accel,
                    "gpus": self.total(location, accel),
                    "inUse": self._in_use.get((location, accel), 0),
                    "explicit": (location, accel) in self._total,
                }
                for location, accel in keys
            ],
        }
