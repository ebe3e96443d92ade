"""One study name, one driver: ``<study>/.study.lock``, ``flock`` on local disks, a
conditional PUT on ``s3://`` (how each behaves and fails: docs/reliability.md "One driver
per study")."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from study.errors import LockError

LOCK = ".study.lock"
STALE_S = 300.0
HEARTBEAT_S = 60.0


def _me() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
        "heartbeat": time.time(),
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def _read_holder(fd: int) -> dict:
    """What the holder of the lock open on ``fd`` wrote; a holder that has just taken it writes within
    microseconds of its ``flock``: read again for up to 0.5 s before naming it unknown."""
    for _ in range(50):
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            info = {}
        if info:
            return info
        time.sleep(0.01)
    return {}


def _stale(info: dict) -> bool:
    """An object-storage lock to take over: no heartbeat for :data:`STALE_S`, or a dead process on this
    host."""
    return time.time() - float(info.get("heartbeat", 0)) > STALE_S or (
        info.get("host") == socket.gethostname() and not _alive(int(info.get("pid", -1)))
    )


def _holder(info: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, since {when}"


class StudyLock:
    """:meth:`acquire` (raises :class:`LockError`, one line: ``busy`` then the holder) and
    :meth:`release`."""

    def __init__(self, *, root: str, name: str, busy: str | None = None):
        self.root, self.name = root, name
        self.busy = busy or f"study {name!r} is already being run by another driver"
        self._fd: int | None = None
        self._s3: tuple[str, str] | None = (
            None  # (bucket, key) of the lock held on S3 (no client: see heartbeat)
        )
        self._beat = self._started = 0.0
        self._made: list[
            Path
        ] = []  # folders acquire() created, deepest first: release() removes the empty ones

    def _mkdirs(self, folder: Path) -> None:
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        self._made += [p for p in missing if p not in self._made]

    def _acquire_local(self) -> None:
        import fcntl

        path = Path(self.root) / LOCK
        for _ in range(5):
            self._mkdirs(path.parent)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # the folder was removed by a holder releasing it: retry
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                info = _read_holder(fd)
                os.close(fd)
                self._remove_made()
                raise LockError(f"{self.busy} ({_holder(info)}); lock {path}") from None
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, json.dumps(_me()).encode(), 0)
                    self._fd = fd
                    return
            os.close(fd)  # released and removed between our open and our lock: retry
        self._remove_made()
        raise LockError(f"could not take the lock {path}")

    def _remove_made(self) -> None:
        for folder in self._made:  # deepest first; one that holds anything stays, and so do those above it
            try:
                folder.rmdir()
            except OSError:
                break
        self._made = []

    def _client(self):
        try:
            import boto3
        except ImportError:
            raise LockError(
                f"{self.root}: locking a study on object storage needs boto3 "
                "(pip install boto3; or STUDY_LOCK=none to run without a lock)"
            ) from None
        from urllib.parse import urlparse

        u = urlparse(self.root)
        if u.scheme != "s3":
            raise LockError(
                f"{self.root}: no lock for {u.scheme}:// storage (STUDY_LOCK=none runs without one)"
            )
        from botocore.config import Config

        from study.results.storage import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S

        # bounded waits, as every request of a command (study.results.storage); boto3 reads
        # AWS_ENDPOINT_URL(_S3) itself
        client = boto3.client(
            "s3",
            config=Config(
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=4 * REQUEST_TIMEOUT_S,
                retries={"max_attempts": 3, "mode": "standard"},
            ),
        )
        return client, u.netloc, f"{u.path.strip('/')}/{LOCK}".lstrip("/")

    def _acquire_s3(self) -> None:
        from botocore.exceptions import ClientError

        client, bucket, key = self._client()
        for _ in range(2):
            try:
                client.put_object(Bucket=bucket, Key=key, Body=json.dumps(_me()).encode(), IfNoneMatch="*")
                self._s3 = (bucket, key)
                self._beat = self._started = time.time()
                return
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") not in (
                    "PreconditionFailed",
                    "ConditionalRequestConflict",
                ):
                    raise LockError(
                        f"s3://{bucket}/{key}: cannot create the study lock "
                        f"({e.response.get('Error', {}).get('Code')})"
                    ) from None
            try:
                info = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read() or b"{}")
            except (ClientError, ValueError):
                info = {}
            if not _stale(info):
                raise LockError(f"{self.busy} ({_holder(info)}); lock s3://{bucket}/{key}")
            client.delete_object(Bucket=bucket, Key=key)
        raise LockError(f"could not take the lock s3://{bucket}/{key}")

    def acquire(self) -> StudyLock:
        if os.environ.get("STUDY_LOCK") != "none":
            (self._acquire_s3 if "://" in self.root else self._acquire_local)()
        return self

    def __enter__(self) -> StudyLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def check_free(self) -> None:
        """Raise :meth:`acquire`'s :class:`LockError` if another driver holds the lock, writing nothing (a
        refused command leaves an existing study as it was)."""
        if os.environ.get("STUDY_LOCK") == "none":
            return
        if "://" in self.root:
            from botocore.exceptions import ClientError

            client, bucket, key = self._client()
            try:
                info = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read() or b"{}")
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return
                raise LockError(
                    f"s3://{bucket}/{key}: cannot read the study lock "
                    f"({e.response.get('Error', {}).get('Code')})"
                ) from None
            except ValueError:
                info = {}
            if not _stale(info):
                raise LockError(f"{self.busy} ({_holder(info)}); lock s3://{bucket}/{key}")
            return
        import fcntl

        path = Path(self.root) / LOCK
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # dropped by the close below
        except BlockingIOError:
            raise LockError(f"{self.busy} ({_holder(_read_holder(fd))}); lock {path}") from None
        finally:
            os.close(fd)

    def stores_only_the_lock(self) -> bool:
        """Whether the study's folder holds nothing but the lock's file: what a driver killed after taking the
        lock and before writing its study leaves (no study to resume; :meth:`check_free` says it is free)."""
        if "://" in self.root:
            from botocore.exceptions import ClientError

            client, bucket, key = self._client()
            try:
                listed = client.list_objects_v2(Bucket=bucket, Prefix=key[: -len(LOCK)], MaxKeys=2)
            except ClientError:
                return False
            return [o["Key"] for o in listed.get("Contents", [])] == [key]
        try:
            return [p.name for p in Path(self.root).iterdir()] == [LOCK]
        except OSError:
            return False

    def heartbeat(self) -> None:
        """Refresh an object-storage lock (every :data:`HEARTBEAT_S`); no-op locally.  A client is made
        for each (a held lock keeps plain data only: the run contract holding it is pickled by Tune)."""
        if self._s3 is not None and time.time() - self._beat > HEARTBEAT_S:
            client, bucket, key = self._client()
            client.put_object(
                Bucket=bucket, Key=key, Body=json.dumps({**_me(), "started": self._started}).encode()
            )
            self._beat = time.time()

    def release(self) -> None:
        """Drop the lock; the folders :meth:`acquire` created go too if nothing was written into them (a
        driver refused once it held the lock leaves no study folder behind)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(Path(self.root) / LOCK)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
            self._remove_made()
        if self._s3 is not None:
            with contextlib.suppress(Exception):  # a lock left behind goes stale by its heartbeat
                client, bucket, key = self._client()
                client.delete_object(Bucket=bucket, Key=key)
            self._s3 = None
