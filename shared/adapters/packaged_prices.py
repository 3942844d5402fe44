"""The price table shipped with the functions: ``prices.yaml``, package data, read bounded.

The figures (USD per GPU-hour by accelerator and strategy, their sources, which are estimates)
are ``shared/domain/policy/prices.yaml``, beside the
:class:`~shared.domain.policy.pricing.PriceTable` they fill, as the serving policy table sits
beside its type (:mod:`shared.adapters.serving_table`). This module is the one reader of the
file, so that the domain does no I/O: it parses the text it is given
(:meth:`~shared.domain.policy.pricing.PriceTable.load`).
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from shared.domain.policy.pricing import PriceTable

#: The package and file the table is shipped as (package data: pyproject.toml's
#: [tool.setuptools.package-data], and the function zip of flexjobs_local/package.py).
PACKAGE: Final = "shared.domain.policy"
FILE_NAME: Final = "prices.yaml"
#: The file is about 3 KiB (a row per accelerator, and the comments giving its sources): 64 KiB
#: holds many times as many rows, and a larger file is not one of ours.
MAX_PRICES_BYTES: Final = 64 * 1024


def load_packaged_prices() -> PriceTable:
    """The price table shipped with the functions (``shared/domain/policy/prices.yaml``).

    Reads at most :data:`MAX_PRICES_BYTES` + 1 bytes, so an oversized file is refused without
    being read whole.

    Examples:
        >>> load_packaged_prices().rates["NVIDIA_L4"].standard > 0
        True

    Raises:
        ValueError: the file is larger than :data:`MAX_PRICES_BYTES`, is not UTF-8, or is not
            a price table (:meth:`~shared.domain.policy.pricing.PriceTable.load`).
        FileNotFoundError: the package holds no price table.
    """
    with resources.files(PACKAGE).joinpath(FILE_NAME).open("rb") as handle:
        data = handle.read(MAX_PRICES_BYTES + 1)
    if len(data) > MAX_PRICES_BYTES:
        raise ValueError(f"{FILE_NAME}: larger than the {MAX_PRICES_BYTES} bytes a table may have")
    # UnicodeDecodeError is a ValueError: a file that is not UTF-8 is refused like a bad table.
    return PriceTable.load(data.decode("utf-8"))
