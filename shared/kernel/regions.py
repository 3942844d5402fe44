"""Vertex AI region names: the one pattern every location is checked against.

A location ends up in a host name (``{location}-aiplatform.googleapis.com``) and in resource
names, so a request's text must never reach either unless it is a plain region name such as
``us-central1`` or ``europe-west4``: lower-case letters, one or more hyphenated words, then
digits. Everything else (``attacker.example:443#``, ``US-CENTRAL1``, ``us-central1\\n``,
``global``) is refused.
"""

from __future__ import annotations

import re
from typing import Any, Final

#: The region form, without anchors (JSON Schema patterns and larger regexes reuse it).
REGION_PATTERN: Final = r"[a-z]+(?:-[a-z]+)+[0-9]+"

_REGION: Final = re.compile(REGION_PATTERN)

#: What messages say a location must look like.
REGION_HINT: Final = "a Vertex AI region such as 'us-central1' or 'europe-west4'"


def is_region(value: Any) -> bool:
    """True when ``value`` is a Vertex AI region name.

    ``fullmatch``, never ``match`` with ``$``: ``$`` also matches before a trailing newline.

    Examples:
        >>> is_region("europe-west4"), is_region("us-central1\\n"), is_region("US-CENTRAL1")
        (True, False, False)
        >>> is_region("attacker.example:443#")
        False
    """
    return isinstance(value, str) and len(value) <= 63 and _REGION.fullmatch(value) is not None
