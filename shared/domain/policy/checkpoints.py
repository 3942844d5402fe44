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
  never chosen, even when its step is the highest. Nor is a directory that holds its marker
  and nothing else: every framework writes the marker *after* the data it commits, so a
  marker alone saves nothing (it is what a forged or stray write looks like), and resuming
  from it would start the job over while its record claims progress.

* **Single files** directly under the prefix (``*.pt``, ``*.pth``, ``*.ckpt``,
  ``*.safetensors``) are the fallback when no directory is complete: the newest by update
  time wins, and its step is parsed from the name when present (``model_step200.pt``).
  Shards such as ``model-00001-of-00004.safetensors`` are not single-file checkpoints.

A checkpoint's time is its marker's (or file's) Custom-Time when the writer set one, else its
update time. ``not_before`` ignores checkpoints older than it: a reused output directory may
hold another run's, which must not be resumed by accident.

The search reads *delimiter listings* (what sits directly in one directory) through a
``read`` callback, so the caller chooses the I/O and its bound: the step directories come from
the listing of the prefix, and each is read only when every higher step has been ruled out.
:func:`latest_complete` runs the same search over one flat listing held in memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from shared.domain.model.checkpoint import Checkpoint, Listing, ObjectInfo
from shared.kernel.errors import FieldError

COMMIT_SUCCESS = "commit_success.txt"
STEP_MARKERS = frozenset({COMMIT_SUCCESS, ".metadata", "_SUCCESS"})
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
ORBAX_TMP = ".orbax-checkpoint-tmp-"

_TRAILING_STEP = re.compile(r"(\d+)$")
_SHARD = re.compile(r"-\d+-of-\d+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
#: The longest object name Cloud Storage takes, in UTF-8 bytes.
MAX_OBJECT_NAME_BYTES = 1024


# The delimiter listing of a directory, or None once the caller's bound on work is spent.
ReadDirectory = Callable[[str], "Listing | None"]


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


def latest_checkpoint(
    top: Listing,
    read: ReadDirectory,
    bucket: str,
    prefix: str,
    *,
    item_markers: bool = True,
    not_before: datetime | None = None,
) -> Checkpoint | None:
    """Return the latest complete checkpoint under ``gs://bucket/prefix``, or None.

    Step directories are checked from the highest step down, each with one call of ``read``
    (more for Orbax item markers); the first step with a complete directory committed no
    earlier than ``not_before`` wins (two directories of that step: the later commit). Failing
    any, the newest single checkpoint file in ``top`` no older than ``not_before``. See the
    module docstring for what counts as complete.

    Args:
        top: the delimiter listing of the prefix itself.
        read: the delimiter listing of a directory (a full prefix ending with ``/``), or None
            once the caller's bound on work is spent; the search then stops checking
            directories and falls back to the single files.
        bucket: the bucket name, used to build the URI.
        prefix: the object prefix, such as ``runs/r1/checkpoints/`` ("" for the bucket root).
        item_markers: accept Orbax item-level markers when the step-level one is missing.
        not_before: ignore checkpoints whose time is earlier (another run's, left in a reused
            directory); must be timezone-aware.

    Raises:
        ValueError: when ``not_before`` is a naive datetime.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2025, 1, 1, tzinfo=UTC)
        >>> dirs = {"ck/step-100/": Listing((ObjectInfo("ck/step-100/.metadata", t, 9),
        ...                                  ObjectInfo("ck/step-100/__0_0.distcp", t, 9))),
        ...         "ck/step-200/": Listing((ObjectInfo("ck/step-200/__0_0.distcp", t, 9),))}
        >>> top = Listing(subdirectories=tuple(dirs))
        >>> latest_checkpoint(top, dirs.get, "bkt", "ck/").uri
        'gs://bkt/ck/step-100/'
    """
    if not_before is not None and not_before.utcoffset() is None:
        raise ValueError(f"not_before must be timezone-aware, got {not_before!r}")
    prefix = _normalise_prefix(prefix)
    for step, names in step_directories(top.subdirectories, prefix):
        found: list[tuple[datetime, str]] = []
        spent = False
        for name in names:
            listing = read(f"{prefix}{name}/")
            if listing is None:
                spent = True
                break
            at = _committed_at(f"{prefix}{name}/", listing, read, item_markers)
            if at is not None and (not_before is None or at >= not_before):
                found.append((at, name))
        if found:
            at, name = max(found)
            return Checkpoint(f"gs://{bucket}/{prefix}{name}/", step, at)
        if spent:
            break
    return _newest_file(top.objects, bucket, prefix, not_before)


def latest_complete(
    objects: Iterable[ObjectInfo],
    bucket: str,
    prefix: str,
    *,
    item_markers: bool = True,
    not_before: datetime | None = None,
) -> Checkpoint | None:
    """:func:`latest_checkpoint` over one flat listing of every object under the prefix.

    Args:
        objects: every object under the prefix, in any order (one listing, no delimiter).
        bucket, prefix, item_markers, not_before: as for :func:`latest_checkpoint`.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2025, 1, 1, tzinfo=UTC)
        >>> objs = [ObjectInfo("ck/step-100/.metadata", t, 9),
        ...         ObjectInfo("ck/step-100/__0_0.distcp", t, 9),
        ...         ObjectInfo("ck/step-200/__0_0.distcp", t, 9)]
        >>> latest_complete(objs, "bkt", "ck/").uri
        'gs://bkt/ck/step-100/'
    """
    prefix = _normalise_prefix(prefix)
    read = listings(objects, prefix)
    return latest_checkpoint(
        read(prefix), read, bucket, prefix, item_markers=item_markers, not_before=not_before
    )


def listings(objects: Iterable[ObjectInfo], prefix: str) -> Callable[[str], Listing]:
    """Index a flat listing of the objects under ``prefix`` as delimiter listings.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2025, 1, 1, tzinfo=UTC)
        >>> read = listings([ObjectInfo("ck/1/a/b", t, 1), ObjectInfo("ck/f.pt", t, 1)], "ck/")
        >>> [o.name for o in read("ck/").objects], read("ck/").subdirectories
        (['ck/f.pt'], ('ck/1/',))
    """
    direct: dict[str, list[ObjectInfo]] = {}
    subdirectories: dict[str, set[str]] = {}
    for obj in objects:
        if not obj.name.startswith(prefix):
            continue
        parent = prefix
        cut = obj.name.find("/", len(parent))
        while cut != -1:
            child = obj.name[: cut + 1]
            subdirectories.setdefault(parent, set()).add(child)
            parent = child
            cut = obj.name.find("/", len(parent))
        direct.setdefault(parent, []).append(obj)

    def read(directory: str) -> Listing:
        if directory and not directory.endswith("/"):
            # A prefix that names one object: its own listing, as a list by prefix gives it.
            parent = directory.rpartition("/")[0]
            own = direct.get(f"{parent}/" if parent else "", [])
            return Listing(tuple(o for o in own if o.name == directory))
        return Listing(
            tuple(direct.get(directory, ())), tuple(sorted(subdirectories.get(directory, ())))
        )

    return read


def step_directories(subdirectories: Iterable[str], prefix: str) -> list[tuple[int, list[str]]]:
    """The step directories among a listing's subdirectories, grouped by step, highest first.

    Names without a trailing step number and Orbax temporary directories are left out.

    Examples:
        >>> step_directories(["ck/step-9/", "ck/logs/", "ck/ckpt-10/", "ck/step-10/"], "ck/")
        [(10, ['ckpt-10', 'step-10']), (9, ['step-9'])]
    """
    by_step: dict[int, list[str]] = {}
    for sub in subdirectories:
        if not (sub.startswith(prefix) and sub.endswith("/")):
            continue
        name = sub[len(prefix) : -1]
        step = step_of(name)
        if step is None or "/" in name or ORBAX_TMP in name:
            continue
        by_step.setdefault(step, []).append(name)
    return [(step, sorted(by_step[step])) for step in sorted(by_step, reverse=True)]


def _committed_at(
    directory: str, listing: Listing, read: ReadDirectory, item_markers: bool
) -> datetime | None:
    """When a step directory was committed (its latest marker), or None if half-written, or
    if it holds its marker and nothing else (see the module docstring)."""
    markers = [o.updated for o in listing.objects if o.name[len(directory) :] in STEP_MARKERS]
    items = [sub for sub in listing.subdirectories if sub != directory + "/"]
    data = [o for o in listing.objects if o.name[len(directory) :] not in STEP_MARKERS]
    if markers:
        return max(markers) if data or items else None
    if not item_markers or listing.truncated or not items:
        return None
    committed: list[datetime] = []
    for item in items:
        inside = read(item)
        done = (
            [o.updated for o in inside.objects if o.name == item + COMMIT_SUCCESS] if inside else []
        )
        if not done:
            return None  # an item never committed (or the bound on work is spent)
        committed.append(max(done))
    return max(committed)


def confirm(
    checkpoint: Checkpoint, read: ReadDirectory, *, item_markers: bool = True
) -> Checkpoint | None:
    """The checkpoint as its own listing shows it, or None when the listing does not show a
    complete one (a marker with nothing beside it, a file that is gone or empty, a directory
    that is not there any more).

    An event (a finalize, or a record's ``latestCheckpoint``) only says where to look: the
    time returned is the listing's, and only what :func:`latest_checkpoint` would choose counts.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2025, 1, 1, tzinfo=UTC)
        >>> dirs = {"ck/step-1/": Listing((ObjectInfo("ck/step-1/.metadata", t, 9),
        ...                               ObjectInfo("ck/step-1/__0_0.distcp", t, 9))),
        ...         "ck/step-2/": Listing((ObjectInfo("ck/step-2/.metadata", t, 0),))}
        >>> confirm(Checkpoint("gs://bkt/ck/step-1/", 1, t), dirs.get).uri
        'gs://bkt/ck/step-1/'
        >>> confirm(Checkpoint("gs://bkt/ck/step-2/", 2, t), dirs.get) is None
        True
    """
    try:
        _, name = split_gcs_uri(checkpoint.uri)
    except ValueError:
        return None  # no Cloud Storage object of ours (a hand-edited record): nothing there
    if name.endswith("/"):
        listing = read(name)
        at = _committed_at(name, listing, read, item_markers) if listing is not None else None
        return None if at is None else Checkpoint(checkpoint.uri, checkpoint.step, at)
    # A file's own listing: the objects whose names begin with its name (the file itself).
    listing = read(name)
    if listing is None:
        return None
    found = [o for o in listing.objects if o.name == name and o.size > 0]
    if not found or _file_stem(name.rpartition("/")[2]) is None:
        return None
    return Checkpoint(checkpoint.uri, checkpoint.step, max(o.updated for o in found))


def _newest_file(
    objects: Iterable[ObjectInfo], bucket: str, prefix: str, not_before: datetime | None
) -> Checkpoint | None:
    files: list[tuple[datetime, str, int | None]] = []
    for obj in objects:
        rel = obj.name[len(prefix) :] if obj.name.startswith(prefix) else ""
        stem = _file_stem(rel) if rel and "/" not in rel else None
        if stem is not None and (not_before is None or obj.updated >= not_before):
            files.append((obj.updated, rel, step_of(stem)))
    if not files:
        return None
    updated, name, file_step = max(files, key=lambda f: (f[0], f[1]))
    return Checkpoint(f"gs://{bucket}/{prefix}{name}", file_step, updated)


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
        raise ValueError(f"{uri[:80]!r} is not a Cloud Storage URI such as 'gs://bucket/prefix/'")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(f"{uri[:80]!r} does not name a valid bucket (got {bucket[:80]!r})")
    try:
        size = len(prefix.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{uri[:80]!r} is not valid Unicode") from None
    if size > MAX_OBJECT_NAME_BYTES:
        # No object can be named so (the record would hold it twice, and index it).
        raise ValueError(
            f"names {size} bytes inside its bucket; Cloud Storage allows {MAX_OBJECT_NAME_BYTES}"
        )
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


def completed_by(bucket: str, name: str, at: datetime) -> tuple[str, Checkpoint] | None:
    """The checkpoint an object's finalize completes, with the prefix it belongs to.

    A step directory is complete when its marker is written (the marker directly inside it);
    a single-file checkpoint is complete when it is written. Anything else completes nothing:
    shards, a half-written step's files, Orbax temporary directories, item-level markers
    (a later listing still finds those steps).

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2026, 1, 1, tzinfo=UTC)
        >>> prefix, cp = completed_by("bkt", "out/checkpoints/step-00000200/.metadata", t)
        >>> prefix, cp.uri, cp.step
        ('gs://bkt/out/checkpoints/', 'gs://bkt/out/checkpoints/step-00000200/', 200)
        >>> completed_by("bkt", "out/checkpoints/step-00000200/__0_0.distcp", t) is None
        True
    """
    parent, _, leaf = name.rpartition("/")
    if leaf in STEP_MARKERS and parent:
        above, _, directory = parent.rpartition("/")
        step = step_of(directory)
        if step is None or ORBAX_TMP in directory:
            return None
        prefix = f"gs://{bucket}/{above}/" if above else f"gs://{bucket}/"
        return prefix, Checkpoint(f"gs://{bucket}/{parent}/", step, at)
    stem = _file_stem(leaf)
    if stem is None:
        return None
    prefix = f"gs://{bucket}/{parent}/" if parent else f"gs://{bucket}/"
    return prefix, Checkpoint(f"gs://{bucket}/{name}", step_of(stem), at)
