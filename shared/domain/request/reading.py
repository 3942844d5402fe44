"""Reading one request message: its byte bound, its decoding, and the command it carries.

Every reader of a message goes through here, so each bound and each error string exists
once: intake reads a delivered message (a Pub/Sub message, or one message of a request file)
with :func:`read_message`; the ``flexjobs`` command reads each message of a file with
:func:`read_body`, as the upload function does, then checks it with :func:`read_message` in
the form it will be published.

Examples:
    >>> from datetime import UTC, datetime
    >>> clock = lambda: datetime(2026, 11, 30, tzinfo=UTC)
    >>> read_message(b'{"cancel": "r1"}', {}, "m1", None, max_bytes=99, validators=(), clock=clock)
    Cancel(request_id='r1')
    >>> try:
    ...     read_body(b'{"cancel": "r1"}', max_bytes=8)
    ... except InvalidRequest as err:
    ...     print(err.errors[0].message)
    message is 16 bytes; the limit is 8 bytes
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared.domain.model.ids import check_request_id
from shared.domain.model.kinds import KINDS
from shared.domain.request.message import JobRequest, decode_message, parse_request
from shared.domain.request.schedule import check_not_ahead
from shared.kernel.errors import FieldError, InvalidRequest, reading_untrusted

if TYPE_CHECKING:
    from shared.domain.request.validation import Validator


@dataclass(frozen=True)
class Cancel:
    """``{"cancel": "<requestId>"}``: cancel that request and every retry that would follow
    (a deployment's: take it down, its fallback first)."""

    request_id: str


@dataclass(frozen=True)
class Resume:
    """``{"resume": "<requestId>"}``: follow a deployment paused by a hand edit again, taking
    its endpoint as it is now (the "until told again" of a paused deployment)."""

    request_id: str


def read_body(data: bytes, max_bytes: int) -> dict[str, Any]:
    """Decode message data into a JSON object, within ``max_bytes`` (the message limit).

    Raises:
        InvalidRequest: the data is too large, not UTF-8, not JSON or not an object.
    """
    if len(data) > max_bytes:
        raise InvalidRequest(
            [FieldError("$", f"message is {len(data)} bytes; the limit is {max_bytes} bytes")]
        )
    return decode_message(data)


def is_cancel(body: dict[str, Any]) -> bool:
    """``{"cancel": "<requestId>"}`` on the requests topic cancels that request.

    Examples:
        >>> is_cancel({"cancel": "r1"}), is_cancel({"cancel": "r1", "customJob": {}})
        (True, False)
    """
    return "cancel" in body and not any(kind in body for kind in KINDS)


def is_resume(body: dict[str, Any]) -> bool:
    """``{"resume": "<requestId>"}`` on the requests topic resumes a paused deployment.

    Examples:
        >>> is_resume({"resume": "s1"}), is_resume({"resume": "s1", "cancel": "s1"})
        (True, False)
    """
    return "resume" in body and "cancel" not in body and not any(kind in body for kind in KINDS)


def cancel_target(body: dict[str, Any], field: str = "cancel") -> str:
    """The requestId a cancel (or a resume: ``field``) names.

    Raises:
        InvalidRequest: it is not a non-empty string, or longer than a requestId may be.
    """
    target = body.get(field)
    if not isinstance(target, str) or not target.strip():
        raise InvalidRequest([FieldError(field, "must be a non-empty requestId string")])
    if too_long := check_request_id(target, field):
        raise InvalidRequest(too_long)
    return target


def read_message(
    data: bytes,
    attributes: dict[str, str],
    message_id: str,
    publish_time: str | None,
    *,
    max_bytes: int,
    validators: Sequence[Validator],
    clock: Callable[[], datetime],
) -> Cancel | Resume | JobRequest:
    """What a message asks: a :class:`Cancel`, a :class:`Resume`, or a parsed and validated
    :class:`JobRequest`.

    Reading is pure, so whatever it raises refuses the message (a recorded rejection, never
    an endless redelivery; see :func:`~shared.kernel.errors.reading_untrusted`).

    Raises:
        InvalidRequest: with every problem found; the message can never succeed.
    """
    with reading_untrusted("the message"):
        body = read_body(data, max_bytes)
        if is_cancel(body):
            return Cancel(cancel_target(body))
        if is_resume(body):
            return Resume(cancel_target(body, "resume"))
        request = parse_request(body, attributes, message_id, publish_time)
        errors = [error for validate in validators for error in validate(request)]
        if errors:
            raise InvalidRequest(errors)
        if request.slot is not None and (ahead := check_not_ahead(request.slot, clock())):
            raise InvalidRequest(ahead)
        return request
