"""Where a client points, and the Google faults it can meet, as one-line typed errors.

The project is the one named, else the environment's (``GOOGLE_CLOUD_PROJECT``, else
``GCLOUD_PROJECT``), else Application Default Credentials' (``google.auth.default()``, which
reads ``gcloud config``'s project and a service account key's). An emulator host
(``PUBSUB_EMULATOR_HOST``, ``FIRESTORE_EMULATOR_HOST``) is checked to be reachable before
the first call, so a stale variable is one clear line rather than a minute of retries.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from urllib.parse import urlsplit

from shared.kernel.errors import ConfigurationError, PublishFailed, StoreUnavailable

NO_PROJECT = (
    "no project: pass --project (project= in the library), set GOOGLE_CLOUD_PROJECT, or"
    " 'gcloud config set project P' (for the local stack: eval the exports"
    " './dev up' prints in a clone)"
)


def adc_project() -> str | None:
    """The project Application Default Credentials name (``gcloud config``'s, a key's), or
    None when there are no credentials or they name none."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        _, project = google.auth.default()
    except DefaultCredentialsError:
        return None
    return project if isinstance(project, str) and project else None


def resolve_project(
    explicit: str | None,
    env: Mapping[str, str] | None = None,
    default: Callable[[], str | None] | None = None,
) -> str:
    """The project: ``explicit``, else the environment's, else ``default()`` (by default
    :func:`adc_project`, looked up at call time).

    Examples:
        >>> resolve_project("a", {"GOOGLE_CLOUD_PROJECT": "b"}, lambda: "c")
        'a'
        >>> resolve_project(None, {"GCLOUD_PROJECT": "b"}, lambda: "c")
        'b'
        >>> resolve_project(None, {}, lambda: "c")
        'c'

    Raises:
        ConfigurationError: none of them names a project.
    """
    e = os.environ if env is None else env
    project = (
        explicit
        or e.get("GOOGLE_CLOUD_PROJECT")
        or e.get("GCLOUD_PROJECT")
        or (default or adc_project)()
    )
    if not project:
        raise ConfigurationError(NO_PROJECT)
    return project


def check_emulator(variable: str, what: str) -> None:
    """Raise ConfigurationError when ``variable`` names an emulator that does not answer."""
    host = os.environ.get(variable)
    if not host:
        return
    parts = urlsplit(f"//{host}")
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 80), 2):
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"the {what} emulator at {variable}={host} is not reachable ({exc.strerror or exc});"
            f" start it ('./dev up' in a clone), or unset {variable} to use Google Cloud"
        ) from exc


def first_line(value: object) -> str:
    return (str(value).strip().splitlines() or [""])[0]


@contextlib.contextmanager
def google_errors(what: str, publishing: bool = False) -> Iterator[None]:
    """Turn the Google client exceptions into flexjobs errors with one line each:
    ConfigurationError for what a retry cannot fix (credentials, permission, a missing
    resource), PublishFailed or StoreUnavailable (retryable) for faults that may pass."""
    from google.api_core import exceptions as gexc
    from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError

    transient = PublishFailed if publishing else StoreUnavailable
    try:
        yield
    except DefaultCredentialsError as exc:
        raise ConfigurationError(
            "no Google credentials: run 'gcloud auth application-default login', set"
            " GOOGLE_APPLICATION_CREDENTIALS, or point at the emulators ('./dev up' in a clone)"
        ) from exc
    except RefreshError as exc:
        raise ConfigurationError(f"{what}: cannot get credentials: {first_line(exc)}") from exc
    except TransportError as exc:
        raise transient(f"{what}: cannot get credentials: {first_line(exc)}") from exc
    except gexc.PermissionDenied as exc:
        raise ConfigurationError(f"{what}: permission denied: {first_line(exc.message)}") from exc
    except gexc.Unauthenticated as exc:
        raise ConfigurationError(f"{what}: not authenticated: {first_line(exc.message)}") from exc
    except (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError) as exc:
        raise transient(f"{what}: service not reachable: {first_line(exc)}") from exc
    except gexc.GoogleAPICallError as exc:
        raise transient(f"{what}: {first_line(exc)}") from exc
    except TimeoutError as exc:
        raise transient(f"{what}: timed out; check the network or the emulator host") from exc
