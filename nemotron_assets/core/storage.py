"""One storage root, local folder or ``s3://bucket/prefix``, with atomic commits.

Steps write their files into a local staging folder and then ``commit`` them: locally an ``os.replace``
from a staging folder on the same file system (atomic), after an ``fsync`` of the file, and an ``fsync`` of
the folder after it, so a crash or power loss cannot leave a name (a receipt above all) pointing at data that
never reached the disk; on S3 one upload per object (an object appears whole or not at all). So a failure
leaves either the old file or nothing, never half a file. A step that publishes several files deletes its
"done" marker first and writes it last, so readers never mistake a partial set for a finished one.

A staging folder is named after the process that owns it (``<host>-<pid>-<process start>-<random>``), so a
process killed with ``kill -9`` leaves a folder that the next run can recognise as orphaned and remove
(``remove_orphaned_staging``) without touching the folders of runs that are still going.
"""

import contextlib
import errno
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.processes import owner_alive, owner_token

STAGING_DIR = ".staging"
S3_STAGING_PREFIX = "nemotron-staging-"
HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class OrphanedStaging:
    """A staging folder whose owning process is gone: what it held and whether it was removed."""

    path: str
    bytes: int


class Storage:
    """Credentials are optional: without them s3fs falls back to botocore's own lookup (environment, profile,
    instance role). They live in a private attribute and stay out of ``repr`` so a logged storage object or a
    traceback's locals never show the secret."""

    def __init__(self, root: str, endpoint_url: str | None = None, key: str | None = None,
                 secret: str | None = None, region: str | None = None) -> None:
        self.is_s3 = root.startswith("s3://")
        if not self.is_s3 and "://" in root:
            raise ValueError(f"storage root must be a local folder or s3://bucket/prefix, got {root!r}")
        self.root = root.rstrip("/") if self.is_s3 else str(Path(root).expanduser().resolve())
        self.endpoint_url = endpoint_url
        self.region = region
        self._credentials = {"key": key, "secret": secret} if key or secret else {}
        self._fs = None

    def at(self, root: str) -> "Storage":
        """A storage with this one's endpoint and credentials, rooted elsewhere (a local folder or an s3:// URL)."""
        other = Storage(root, self.endpoint_url, region=self.region)
        other._credentials = self._credentials
        return other

    def __repr__(self) -> str:
        return f"Storage({self.root!r}, endpoint_url={self.endpoint_url!r})"

    # --- addressing -------------------------------------------------------------------------------------
    def url(self, relative: str) -> str:
        """Absolute location of a relative path: a local path or an s3:// URL."""
        _check_relative(relative)
        return f"{self.root}/{relative}" if self.is_s3 else str(Path(self.root) / relative)

    def polars_options(self) -> dict | None:
        """``storage_options`` for polars/object_store scans of s3:// URLs under this root."""
        if not self.is_s3:
            return None
        options = {"aws_endpoint_url": self.endpoint_url} if self.endpoint_url else {}
        if self.endpoint_url and self.endpoint_url.startswith("http://"):
            options["aws_allow_http"] = "true"
        if self.region:
            options["aws_region"] = self.region
        if self._credentials:
            options["aws_access_key_id"] = self._credentials["key"]
            options["aws_secret_access_key"] = self._credentials["secret"]
        return options

    @property
    def fs(self):
        """The s3fs file system (S3 roots only)."""
        if self._fs is None:
            import s3fs

            client_kwargs = {name: value for name, value in (("endpoint_url", self.endpoint_url),
                                                             ("region_name", self.region)) if value}
            self._fs = s3fs.S3FileSystem(client_kwargs=client_kwargs, skip_instance_cache=True,
                                         **self._credentials)
        return self._fs

    # --- writing ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A private local folder for files about to be committed; removed afterwards, whatever happens."""
        base = self._staging_base()
        base.mkdir(parents=True, exist_ok=True)
        prefix = S3_STAGING_PREFIX if self.is_s3 else ""
        folder = base / f"{prefix}{owner_token()}-{uuid.uuid4().hex[:12]}"
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _staging_base(self) -> Path:
        """Local roots stage next to the outputs (same file system, so ``os.replace`` is atomic); S3 roots in the
        machine's temp folder."""
        return Path(tempfile.gettempdir()) if self.is_s3 else Path(self.root) / STAGING_DIR

    def orphaned_staging(self) -> list[OrphanedStaging]:
        """Staging folders of this machine whose owning process no longer runs (killed mid-step)."""
        base = self._staging_base()
        prefix = S3_STAGING_PREFIX if self.is_s3 else ""
        if not base.is_dir():
            return []
        found = []
        for folder in sorted(base.iterdir()):
            if not folder.is_dir() or not folder.name.startswith(prefix):
                continue
            token = folder.name[len(prefix):].rsplit("-", 1)[0]  # <host>-<pid>-<start>-<random>
            if owner_alive(token) is False:
                size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
                found.append(OrphanedStaging(str(folder), size))
        return found

    def remove_orphaned_staging(self) -> list[OrphanedStaging]:
        """Delete the staging folders that killed processes left behind; returns what was removed."""
        removed = self.orphaned_staging()
        for orphan in removed:
            shutil.rmtree(orphan.path, ignore_errors=True)
        return removed

    def commit(self, staged: Path, relative: str) -> None:
        """Publish a staged file at ``relative``, replacing any previous version atomically."""
        target = self.url(relative)
        if self.is_s3:
            self.fs.put_file(str(staged), target)
            return
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        _sync(staged)
        os.replace(staged, target)
        _sync(Path(target).parent)

    def copy_from(self, source: "StoredFile", relative: str) -> None:
        """Publish a file of another storage at ``relative``, its bytes unchanged and never read through this process
        when it can be helped: a hard link when both are local on one file system, a server-side copy when both are
        on S3, else a byte copy. Like ``commit``, the new name appears whole or not at all."""
        origin = source.store.url(source.relative)
        if self.is_s3:
            if source.store.is_s3:
                source.store.fs.copy(origin, self.url(relative))
            else:
                self.fs.put_file(origin, self.url(relative))
            return
        with self.staging() as folder:
            staged = folder / "linked"
            if source.store.is_s3:
                source.store.fs.get_file(origin, str(staged))
            else:
                try:
                    os.link(origin, staged)
                except OSError as error:
                    if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                        raise
                    shutil.copyfile(origin, staged)
            self.commit(staged, relative)

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Atomically write a small file."""
        with self.staging() as folder:
            staged = folder / "payload"
            staged.write_bytes(data)
            self.commit(staged, relative)

    def move(self, relative: str, to: str) -> None:
        """Give a stored file another name, its bytes unchanged: locally an atomic rename (the modification time
        is kept), on S3 a server-side copy, then the old object deleted."""
        source, target = self.url(relative), self.url(to)
        if self.is_s3:
            self.fs.copy(source, target)
            self.fs.rm_file(source)
            return
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
        _sync(Path(target).parent)
        _sync(Path(source).parent)

    def delete(self, relative: str) -> None:
        target = self.url(relative)
        if self.is_s3:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(target)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(target)

    # --- reading ------------------------------------------------------------------------------------------
    def exists(self, relative: str) -> bool:
        target = self.url(relative)
        if self.is_s3:
            self.fs.invalidate_cache(target)
            return self.fs.exists(target)
        return os.path.exists(target)

    def size(self, relative: str) -> int:
        target = self.url(relative)
        return int(self.fs.info(target)["size"]) if self.is_s3 else os.path.getsize(target)

    def stamp(self, relative: str) -> str:
        """What changes whenever the stored object is rewritten, read without reading its content: the
        modification time in nanoseconds on local disk, the ETag on S3."""
        target = self.url(relative)
        if self.is_s3:
            self.fs.invalidate_cache(target)
            return "etag:" + str(self.fs.info(target).get("ETag", "")).strip('"')
        return f"mtime_ns:{os.stat(target).st_mtime_ns}"

    def sha256(self, relative: str) -> str:
        """sha256 of the stored bytes, streamed."""
        digest = hashlib.sha256()
        with self.open(relative) as stream:
            while chunk := stream.read(HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def read_bytes(self, relative: str) -> bytes:
        target = self.url(relative)
        if self.is_s3:
            return self.fs.cat_file(target)
        return Path(target).read_bytes()

    def open(self, relative: str):
        """Binary read handle (streams from S3)."""
        target = self.url(relative)
        return self.fs.open(target, "rb") if self.is_s3 else open(target, "rb")

    def list_dirs(self, relative_dir: str) -> list[str]:
        """Names of the folders directly in a folder, sorted; [] if it does not exist."""
        target = self.url(relative_dir)
        if self.is_s3:
            self.fs.invalidate_cache(target)
            try:
                entries = self.fs.ls(target, detail=True)
            except FileNotFoundError:
                return []
            return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")
        if not os.path.isdir(target):
            return []
        return sorted(n for n in os.listdir(target) if os.path.isdir(Path(target) / n))

    def list(self, relative_dir: str) -> list[str]:
        """Relative paths of the files directly in a folder, sorted; [] if it does not exist."""
        target = self.url(relative_dir)
        if self.is_s3:
            self.fs.invalidate_cache(target)
            try:
                entries = self.fs.ls(target, detail=True)
            except FileNotFoundError:
                return []
            return sorted(f"{relative_dir}/{e['name'].rsplit('/', 1)[-1]}" for e in entries if e.get("type") == "file")
        if not os.path.isdir(target):
            return []
        return sorted(f"{relative_dir}/{n}" for n in os.listdir(target) if os.path.isfile(Path(target) / n))


@dataclass(frozen=True)
class StoredFile:
    """A file of one storage, named by its path relative to that storage's root."""

    store: Storage
    relative: str


@contextlib.contextmanager
def locate_os_errors(folder: Path) -> Iterator[None]:
    """An ``OSError`` raised by a plain ``write`` names no file (``[Errno 28] No space left on device``); give it
    the staging folder, so the user learns which disk is full."""
    try:
        yield
    except OSError as error:
        if error.errno is not None and error.filename is None:
            raise OSError(error.errno, error.strerror, str(folder)) from error
        raise


def _check_relative(relative: str) -> None:
    parts = relative.split("/")
    if relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a safe relative storage path: {relative!r}")


def _sync(path: Path) -> None:
    """Flush a file's data, or a folder's entries, to the disk before anyone relies on it."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
