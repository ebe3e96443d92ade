"""Where studies live: the default storage, study folders, the studies under a storage.
No torch, no Ray: bookkeeping commands start fast."""

from __future__ import annotations

import datetime
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from study.errors import StorageError, StudyError
from study.results.filesystem import is_remote, local_path_problem
from study.results.metafile import MetaFileError, read_object

STORAGE_ENV = "STUDY_STORAGE"
META_FILE = "study.json"


def default_storage() -> str:
    """``$STUDY_STORAGE`` if set, else ``results`` (a set but empty ``$STUDY_STORAGE`` is
    returned as it is, and refused by :func:`resolve_storage`)."""
    return os.environ.get(STORAGE_ENV, "results")


#: object stores a storage URI may name (pyarrow's file systems, which Ray Tune uses too)
REMOTE_SCHEMES = ("s3", "gs", "gcs")
#: schemes a user may mean but the study cannot store to (refused by name, with what to use)
_OTHER_SCHEMES = (
    "file",
    "hdfs",
    "viewfs",
    "az",
    "abfs",
    "abfss",
    "adl",
    "wasb",
    "wasbs",
    "s3a",
    "s3n",
    "http",
    "https",
    "ftp",
    "sftp",
    "ssh",
    "memory",
    "mock",
    "hf",
)
_USE = "use a folder, s3://bucket/prefix or gs://bucket/prefix"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~=+,-]")
_SCHEME_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def _shown(text: str) -> str:
    """``text`` for an error line: credentials of a ``scheme://user:secret@…`` hidden."""
    return repr(re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", text))


def storage_problem(storage: str) -> str | None:
    """Why ``storage`` cannot be a storage (one line), or None: a folder or
    ``s3://``/``gs://``/``gcs://bucket/prefix`` and nothing else (the endpoint, region and
    credentials come from the environment)."""
    text = str(storage)
    if not text.strip():
        return f"must be a folder or a URI ({_USE}), got {text!r}"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return f"{_shown(text)} contains a control character"
    if text != text.strip():
        return f"{_shown(text)} starts or ends with a blank"
    if "://" not in text:
        if (m := _SCHEME_PREFIX.match(text)) and m.group(1).lower() in REMOTE_SCHEMES + _OTHER_SCHEMES:
            return f"{_shown(text)} is not a URI of the form scheme://bucket/prefix ({_USE})"
        return local_path_problem(text)
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    if scheme == "file":
        return f"{_shown(text)}: give the folder itself, not a file:// URI ({_USE})"
    if scheme not in REMOTE_SCHEMES:
        return f"unsupported storage scheme {scheme!r} in {_shown(text)} ({_USE})"
    where = _shown(text)
    if "?" in rest:
        return (
            f"{where} has a query string; a storage URI is {scheme}://bucket/prefix only (the endpoint and "
            "region come from the environment: AWS_ENDPOINT_URL, AWS_REGION)"
        )
    if "#" in rest:
        return f"{where} has a fragment ('#'); a storage URI is {scheme}://bucket/prefix only"
    if any(c.isspace() for c in rest):
        return f"{where} contains a blank (a storage URI is {scheme}://bucket/prefix, without blanks)"
    bucket, _, prefix = rest.partition("/")
    if "@" in bucket:
        return (
            f"{where} holds credentials; they are never taken from a URI (use the environment: "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or your cloud's credential files)"
        )
    if ":" in bucket:
        return (
            f"{where} names a port; a storage URI names a bucket (the endpoint comes from AWS_ENDPOINT_URL)"
        )
    if not bucket:
        return f"{where} names no bucket ({scheme}://bucket/prefix)"
    if not _BUCKET.fullmatch(bucket) or ".." in bucket or (scheme == "s3" and "_" in bucket):
        return (
            f"{where}: {bucket[:80]!r} is not a valid bucket name (3 to 63 lower-case letters, digits, "
            f"'.' or '-'{', or _' if scheme != 's3' else ''}, starting and ending with a letter or digit)"
        )
    for part in prefix.rstrip("/").split("/") if prefix.rstrip("/") else ():
        if part in ("", ".", ".."):
            return f"{where}: the prefix has an empty, '.' or '..' part"
        bad = next((c for c in part if not _KEY_CHARS.fullmatch(c)), None)
        if bad is not None:
            return (
                f"{where}: character {bad!r} in the prefix (use letters, digits and . _ ~ = + , - "
                "between '/')"
            )
    return None


def resolve_storage(storage: str | None) -> str:
    """``--storage`` when given, else :func:`default_storage`, without a URI's trailing ``/``:
    ``ValueError`` naming where a malformed one came from."""
    value = default_storage() if storage is None else storage
    if problem := storage_problem(value):
        raise ValueError(f"--storage: {problem}" if storage is not None else f"${STORAGE_ENV}: {problem}")
    if is_remote(value):
        scheme, rest = value.split("://", 1)
        return f"{scheme.lower()}://{rest.rstrip('/')}"
    return value


# ---------------------------------------------------------------------------- reaching a store
#: seconds one connection may take, one request may stall, and the whole reachability
#: check (every command checks an object store once before it uses it)
CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 3.0
REACH_TIMEOUT_S = 8.0
_ATTEMPTS = 2


def _custom_s3() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def endpoint(uri: str) -> str:
    """The endpoint an object-storage URI is served from (what an error line names)."""
    if uri.split("://", 1)[0].lower() == "s3":
        return _custom_s3() or "https://s3.amazonaws.com (AWS)"
    return "https://storage.googleapis.com"


def _bounded_fs(uri: str):
    """``pyarrow.fs.FileSystem.from_uri(uri)`` with the bounded waits above."""
    scheme, rest = uri.split("://", 1)
    path = rest.strip("/")
    if scheme.lower() == "s3":
        custom = _custom_s3()
        if custom:
            u = urlsplit(custom if "://" in custom else f"https://{custom}")
            where = {"endpoint_override": u.netloc + u.path.rstrip("/"), "scheme": u.scheme or "https"}
        else:  # from_uri asks AWS for the bucket's region unless an endpoint is set; so do we
            where = {"region": pafs.resolve_s3_region(path.split("/", 1)[0])}
        return pafs.S3FileSystem(
            connect_timeout=CONNECT_TIMEOUT_S,
            request_timeout=REQUEST_TIMEOUT_S,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=_ATTEMPTS),
            **where,
        ), path
    return pafs.GcsFileSystem(retry_time_limit=datetime.timedelta(seconds=REQUEST_TIMEOUT_S)), path


class StorageUnreachable(StorageError, OSError):
    """An object store that did not answer (or refused) within the bounded wait (exit 3)."""

    verbatim = True  # names the URI and the endpoint

    def __init__(self, message: str):
        StudyError.__init__(self, message)
        self.path, self.reason = None, message


class NoBucket(ValueError):
    """The URI's bucket does not exist at its endpoint (bad input, not a failure)."""


def _bounded(uri: str, work, *, timeout: float = REACH_TIMEOUT_S):
    """``work(fs, path)`` on :func:`_bounded_fs` of ``uri`` in a helper thread, given up after
    ``timeout`` seconds: an object store's client may retry longer than its own time-outs say
    (credential look-ups, name resolution), and a command must never hang on it."""
    box: dict = {}

    def target():
        try:
            box["value"] = work(*_bounded_fs(uri))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=target, name="storage-reach", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise StorageUnreachable(f"cannot reach {uri} at {endpoint(uri)}: no answer within {timeout:.0f} s")
    e = box.get("error")
    if isinstance(e, (OSError, ValueError)) and not isinstance(
        e, (NoBucket, StorageUnreachable, FileNotFoundError)
    ):
        raise StorageUnreachable(f"cannot reach {uri} at {endpoint(uri)}: {_reason(e)}") from None
    if e is not None:
        raise e
    return box.get("value")


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    for marker in ("Details: ", "last message of "):
        text = text.split(marker, 1)[-1]
    return text[:240]


def check_reachable(uri: str, *, timeout: float = REACH_TIMEOUT_S) -> None:
    """Refuse an object store that cannot be used within ``timeout`` seconds (a folder is not checked)."""
    if not is_remote(uri):
        return

    def work(fs, path):
        bucket = path.split("/", 1)[0]
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise NoBucket(f"no bucket {bucket!r} at {endpoint(uri)} ({uri})")
        fs.get_file_info(path)

    _bounded(uri, work, timeout=timeout)


def check_study_target(target: str, storage: str | None) -> None:
    """A study's NAME (under ``storage``) or PATH: the storage is well formed and reachable."""
    value = resolve_storage(storage)
    if is_remote(target):
        if problem := storage_problem(target):
            raise ValueError(problem)
        check_reachable(resolve_storage(target))
    elif is_remote(value) and not Path(target).exists():
        check_reachable(value)


def file_in_the_way(path: str | os.PathLike) -> Path | None:
    """The nearest existing ancestor of ``path`` if it is not a folder, else None."""
    parent = next((p for p in Path(path).absolute().parents if p.exists()), None)
    return None if parent is None or parent.is_dir() else parent


def study_root(storage: str, name: str) -> str:
    return f"{storage.rstrip('/')}/{name}" if is_remote(storage) else str(Path(storage).resolve() / name)


def list_studies(storage: str) -> list[str]:
    """Names of the folders holding a ``study.json`` (a damaged one too: listed as broken)
    directly under ``storage``; an unlistable store raises (never an empty list: "no
    studies" must mean there are none)."""
    if is_remote(storage):

        def work(fs, base):
            infos = fs.get_file_info(pafs.FileSelector(base, recursive=False, allow_not_found=True))
            names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
            metas = fs.get_file_info([f"{base}/{n}/{META_FILE}" for n in names])
            return sorted(n for n, m in zip(names, metas) if m.type == pafs.FileType.File)

        return _bounded(storage, work)
    names = []
    for p in Path(storage).iterdir() if Path(storage).is_dir() else ():
        try:
            if p.is_dir() and os.path.lexists(p / META_FILE):
                names.append(p.name)
        except OSError:  # a folder we may not enter: not listed, as `ls` would say
            continue
    return sorted(names)


def resolve(root: str, meta: dict) -> dict:
    """``meta`` with its paths under ``root`` (where the study is now): ``study.json``
    stores them relative to the study folder, so a moved or copied study resumes there."""
    return {
        **meta,
        "root": root,
        "tables": f"{root}/tables",
        "ddp_storage": f"{root}/ddp",
        "optuna_journal": f"{root}/{meta.get('optuna_journal') or 'optuna.journal'}",
    }


def study_exists(root: str) -> bool:
    """Whether anything is stored under a study's folder (:class:`StorageUnreachable` if it
    cannot be read)."""
    if is_remote(root):  # _bounded raises StorageUnreachable itself
        return _bounded(
            root, lambda fs, path: bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))
        )
    try:
        return Path(root).exists() and any(Path(root).iterdir())
    except OSError as e:
        raise StorageUnreachable(f"cannot read {root}: {' '.join(str(e).split())[:300]}") from None


#: fields of ``study.json`` (written by ``study.tuning.runner``) and their types
META_FIELDS = {
    "name": str,
    "file": str,
    "raw": dict,
    "num_trials": int,
    "cpus_per_trial": (int, float),
    "gpus_per_trial": (int, float),
    "workers_per_trial": int,
    "max_failures": int,
    "selection_metric": str,
    "optuna_journal": str,
    "tables": str,
    "ddp_storage": str,
    "overrides": list,
}


def read_meta(root: str) -> dict | None:
    """``root``'s ``study.json``, paths resolved under ``root``; None when it has none, a
    :class:`study.results.metafile.MetaFileError` when damaged."""
    path = f"{root.rstrip('/')}/{META_FILE}"
    try:
        return resolve(root, read_object(path, fields=META_FIELDS))
    except FileNotFoundError:
        return None
    except OSError as e:  # permissions, a loop of symlinks, an unreachable store
        raise MetaFileError(path, f"cannot be read ({e.strerror or e})") from None
