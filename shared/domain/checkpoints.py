"""Find the latest *complete* checkpoint from a listing of objects under a prefix.

A checkpoint prefix holds step directories, single checkpoint files, or both:

* **Step directories** are named with a trailing step number: ``step-00000200``,
  ``checkpoint_200``, ``ckpt-200``, ``global_step200`` or plain ``200``. A directory is
  complete only when it holds a completion marker, written last by the framework:

  - ``commit_success.txt`` (Orbax on GCS; Orbax writes it only after every item is
    finalized, and its own ``CheckpointManager`` treats a GCS step without it as temporary);
  - ``.metadata`` (torch distributed checkpoint: ``FileSystemWriter.finish`` writes it after
    all ``*.distcp`` shards, via a ``.metadata.tmp`` rename);
  - ``_SUCCESS`` (Hadoop/Spark convention, and a simple marker for hand-written savers).

  The marker must sit directly inside the step directory. One exception covers Orbax item
  directories: Orbax also writes ``commit_success.txt`` into each item directory
  (``200/default/commit_success.txt``); a step with no step-level marker counts as complete
  when *every* item subdirectory holds its own ``commit_success.txt``. Pass
  ``item_markers=False`` to require the step-level marker strictly. Orbax temporary
  directories (``200.orbax-checkpoint-tmp-1234``) are never complete.

  A directory without its marker is half-written (the job was preempted mid-save) and is
  never chosen, even when its step is the highest.

* **Single files** directly under the prefix (``*.pt``, ``*.pth``, ``*.ckpt``,
  ``*.safetensors``) are the fallback when no directory is complete: the newest by update
  time wins, and its step is parsed from the name when present (``model_step200.pt``).
  Shards such as ``model-00001-of-00004.safetensors`` are not single-file checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from shared.errors import FieldError

COMMIT_SUCCESS = "commit_success.txt"
STEP_MARKERS = frozenset({COMMIT_SUCCESS, ".metadata", "_SUCCESS"})
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
ORBAX_TMP = ".orbax-checkpoint-tmp-"

_TRAILING_STEP = re.compile(r"(\d+)$")
_SHARD = re.compile(r"-\d+-of-\d+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its URI (directories end with ``/``), step and commit time.

    Examples:
        >>> from datetime import UTC
        >>> cp = Checkpoint("gs://bkt/ck/step-200/", 200, datetime(2025, 1, 2, tzinfo=UTC))
        >>> cp.to_dict()
        {'uri': 'gs://bkt/ck/step-200/', 'step': 200, 'at': '2025-01-02T00:00:00+00:00'}
    """

    uri: str
    step: int | None
    at: datetime

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form; ``at`` is ISO 8601 so events and records read the same."""
        return {"uri": self.uri, "step": self.step, "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> Checkpoint:
        """Inverse of :meth:`to_dict` (``at`` may also be a ``datetime``, as Firestore gives)."""
        at = raw["at"]
        when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
        step = raw.get("step")
        return cls(str(raw["uri"]), int(step) if isinstance(step, int) else None, when)


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its full name in the bucket, update time and size in bytes."""

    name: str
    updated: datetime
    size: int


@dataclass
class _StepDir:
    """What the listing says about one step directory (mutable only while scanning)."""

    step: int
    marker_at: datetime | None = None
    items: set[str] = field(default_factory=set)
    item_markers: dict[str, datetime] = field(default_factory=dict)

    def committed_at(self, item_markers: bool) -> datetime | None:
        if self.marker_at is not None:
            return self.marker_at
        if item_markers and self.items and self.items <= set(self.item_markers):
            return max(self.item_markers.values())
        return None


def step_of(name: str) -> int | None:
    """The step number at the end of a directory or file stem, or None.

    Examples:
        >>> [step_of(n) for n in ("step-00000200", "checkpoint_200", "ckpt-200", "200", "last")]
        [200, 200, 200, 200, None]
    """
    match = _TRAILING_STEP.search(name)
    return int(match.group(1)) if match else None


def _file_stem(name: str) -> str | None:
    """The stem of a single-file checkpoint name, or None when it is not one."""
    lowered = name.lower()
    for suffix in FILE_SUFFIXES:
        if lowered.endswith(suffix):
            stem = name[: -len(suffix)]
            return None if _SHARD.search(stem) else stem
    return None


def _normalise_prefix(prefix: str) -> str:
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def latest_complete(
    objects: Iterable[ObjectInfo], bucket: str, prefix: str, *, item_markers: bool = True
) -> Checkpoint | None:
    """Return the latest complete checkpoint under ``gs://bucket/prefix``, or None.

    The highest step among complete step directories wins (ties: the later commit); failing
    any, the newest single checkpoint file directly under the prefix. See the module
    docstring for what counts as complete.

    Args:
        objects: every object under the prefix, in any order (one listing, no delimiter).
        bucket: the bucket name, used to build the URI.
        prefix: the object prefix, such as ``runs/r1/checkpoints/`` ("" for the bucket root).
        item_markers: accept Orbax item-level markers when the step-level one is missing.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2025, 1, 1, tzinfo=UTC)
        >>> objs = [ObjectInfo("ck/step-100/.metadata", t, 9),
        ...         ObjectInfo("ck/step-200/__0_0.distcp", t, 9)]
        >>> latest_complete(objs, "bkt", "ck/").uri
        'gs://bkt/ck/step-100/'
    """
    prefix = _normalise_prefix(prefix)
    dirs: dict[str, _StepDir] = {}
    files: list[tuple[datetime, str, int | None]] = []
    for obj in objects:
        if not obj.name.startswith(prefix):
            continue
        parts = obj.name[len(prefix) :].split("/")
        if len(parts) == 1:
            stem = _file_stem(parts[0]) if parts[0] else None
            if stem is not None:
                files.append((obj.updated, parts[0], step_of(stem)))
            continue
        name = parts[0]
        step = step_of(name)
        if step is None or ORBAX_TMP in name:
            continue
        entry = dirs.setdefault(name, _StepDir(step))
        if len(parts) == 2 and parts[1] in STEP_MARKERS:
            entry.marker_at = max(entry.marker_at or obj.updated, obj.updated)
        elif len(parts) >= 3 and parts[1]:
            entry.items.add(parts[1])
            if len(parts) == 3 and parts[2] == COMMIT_SUCCESS:
                entry.item_markers[parts[1]] = obj.updated
    complete = [
        (entry.step, committed, name)
        for name, entry in dirs.items()
        if (committed := entry.committed_at(item_markers)) is not None
    ]
    if complete:
        step, committed, name = max(complete)
        return Checkpoint(f"gs://{bucket}/{prefix}{name}/", step, committed)
    if files:
        updated, name, file_step = max(files, key=lambda f: (f[0], f[1]))
        return Checkpoint(f"gs://{bucket}/{prefix}{name}", file_step, updated)
    return None


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """Split ``gs://bucket/some/prefix/`` into ``("bucket", "some/prefix/")``.

    Raises:
        ValueError: when ``uri`` is not a ``gs://`` URI with a valid bucket name.

    Examples:
        >>> split_gcs_uri("gs://my-bucket/runs/r1/checkpoints/")
        ('my-bucket', 'runs/r1/checkpoints/')
        >>> split_gcs_uri("gs://my-bucket")
        ('my-bucket', '')
    """
    if not isinstance(uri, str) or not uri.startswith("gs://"):
        raise ValueError(f"{uri!r} is not a Cloud Storage URI such as 'gs://bucket/prefix/'")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(f"{uri!r} does not name a valid bucket (got {bucket!r})")
    return bucket, prefix


def check_checkpoint_uri(raw: object) -> list[FieldError]:
    """Return the problems with a request's optional ``checkpointUri`` ([] when valid)."""
    if raw is None:
        return []
    if not isinstance(raw, str):
        return [FieldError("checkpointUri", "must be a string such as 'gs://bucket/ckpt/'")]
    try:
        split_gcs_uri(raw)
    except ValueError as exc:
        return [FieldError("checkpointUri", str(exc))]
    return []


def checkpoint_prefix(
    request_options: Mapping[str, object], spec_base_output_dir: str | None
) -> str | None:
    """The URI to look for checkpoints under, always ending with ``/``; None when unknown.

    The request's ``checkpointUri`` wins; otherwise ``checkpoints/`` under the job's
    ``baseOutputDirectory.outputUriPrefix``.

    Raises:
        ValueError: when the chosen URI is not a ``gs://`` URI.

    Examples:
        >>> checkpoint_prefix({}, "gs://bkt/out")
        'gs://bkt/out/checkpoints/'
        >>> checkpoint_prefix({"checkpointUri": "gs://bkt/ck"}, "gs://bkt/out")
        'gs://bkt/ck/'
        >>> checkpoint_prefix({}, None) is None
        True
    """
    explicit = request_options.get("checkpointUri")
    if explicit is not None:
        if not isinstance(explicit, str):
            raise ValueError(f"checkpointUri must be a string, got {type(explicit).__name__}")
        uri = _normalise_prefix(explicit)
    elif spec_base_output_dir:
        uri = _normalise_prefix(spec_base_output_dir) + "checkpoints/"
    else:
        return None
    split_gcs_uri(uri)
    return uri
