"""Trust boundary of ``study resume``: Ray's pickles are verified before Ray reads them.

Ray Tune restores a study from files it pickled itself (``tuner.pkl``, the trial
states inside ``experiment_state-*.json``, searcher/callback state, ``error.pkl``).
Unpickling runs whatever code a file names, so anyone who can write the storage
could run code on the machine that resumes.  The driver therefore signs every
such file it leaves behind with HMAC-SHA256 (manifest ``.study-hmac.json`` in the
study folder) under a key that is NOT in the storage: ``$STUDY_HMAC_KEY`` (set it
on every node of a cluster) or the user's key file
``~/.config/attention-cnn-study/hmac.key`` (created on first use, mode 0600).
``study resume`` checks every such file against the manifest first and refuses
with one line on a missing, changed or unsigned file.

Limits: files are signed as the running driver finds them after each Tune save
(about every second), so a writer acting *while* the driver runs is not detected,
and a driver killed between a save and its signature leaves a state that resume
refuses (``--trust-storage`` then skips the check, for storage you trust).

A trial's records (``error.pkl``, ``params.pkl``: Tune reads them back only to
report; the project's own record is the ``runs`` row) that are empty, cut short,
unsigned or changed are set aside as ``error.pkl.unsigned`` with a warning, never
unpickled: a full disk, or a driver that stopped before signing, must not make a
study unresumable.

Tune's top-level state files are also kept as last good copies under
``.last-good/``: a state file left empty or cut short by a full disk (an empty
file, JSON that does not parse, a pickle whose opcodes stop before their end,
read with ``pickletools`` without executing anything; the format is told by the
content: Tune's ``search_gen_state-*.json`` is a pickle, the project's
``searcher-state-*.pkl`` JSON), or one Tune saved
after the driver's last signature (a killed driver), is replaced by its signed last
good copy on resume (a warning names it; the unsigned content is never unpickled);
without one the resume is refused with one line naming the file — Tune itself
would log the error and start the study over, retraining interrupted trials from
scratch.  ``--trust-storage`` skips the HMAC checks but not this one.
``tuner.pkl`` is written once, when the study starts: a changed one is always
refused (a cut-short one is restored like the others).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from study.atomicio import write_atomic
from study.errors import IntegrityError

MANIFEST = ".study-hmac.json"
LAST_GOOD = ".last-good"
KEY_ENV = "STUDY_HMAC_KEY"
#: written by the project itself (JSON / Parquet, never unpickled): not signed
OURS = {"study.json", "study.yaml", MANIFEST, ".study.lock", ".study-reserve", "tables", "trials", LAST_GOOD}
#: written when the study starts, never in Tune's save loop: a mismatch is refused, not repaired
WRITTEN_ONCE = {"tuner.pkl", "trainable.pkl"}
JSON_STATE = "experiment_state"  # the one state file that is JSON (the others are pickles)
#: a trial's records Tune only reads back to report (the project's own record is the
#: ``runs`` row): one left empty or cut short by a full disk, or never signed because
#: the driver stopped first, is set aside (never unpickled) instead of refusing the study
RECORDS = ("error.pkl", "params.pkl")
SET_ASIDE = ".unsigned"


def key_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "attention-cnn-study" / "hmac.key"


def load_key() -> bytes:
    """The signing key: ``$STUDY_HMAC_KEY``, else the user's key file (created once, 0600).

    The file appears whole or not at all: the key is written to a private temporary
    file that is then hard-linked into place (``link`` fails if another process got
    there first, whose key every process then reads), so a process racing the first
    one never reads an empty or partial key.  An empty key file is refused."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode()
    path = key_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process created it first: its key is the key
        finally:
            tmp.unlink(missing_ok=True)
    key = path.read_text().strip().encode()
    if not key:
        raise IntegrityError(f"{path}: the signing key file is empty (delete it to make a new key; studies "
                             f"signed with the old key then need --trust-storage once)")
    return key


class _Storage:
    """Listing / reading / writing under a study root, locally or via pyarrow (S3)."""

    def __init__(self, root: str):
        import pyarrow.fs as pafs

        self.root = root
        if "://" in root:
            self.fs, self.base = pafs.FileSystem.from_uri(root)
        else:
            self.fs, self.base = pafs.LocalFileSystem(), str(Path(root))

    def files(self) -> dict[str, tuple[int, int]]:
        """Ray's files to sign: relative path -> (size, mtime ns)."""
        import pyarrow.fs as pafs

        out = {}
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.base, recursive=True))
        except FileNotFoundError:
            return out
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(self.base):].lstrip("/")
            parts = rel.split("/")
            if parts[0] in OURS or parts[0].startswith(".damaged-") or any(p.startswith(".tmp") for p in parts):
                continue
            if rel.endswith(".pkl") or (len(parts) == 1 and rel.endswith(".json")):
                out[rel] = (info.size, info.mtime_ns or 0)
        return out

    def read(self, rel: str) -> bytes:
        with self.fs.open_input_stream(f"{self.base}/{rel}") as f:
            return f.read()

    def write(self, rel: str, data: bytes) -> None:
        write_atomic(f"{self.base}/{rel}", data, filesystem=self.fs if "://" in self.root else None)

    def last_good(self) -> list[str]:
        """Relative paths of the last good copies (``.last-good/…``)."""
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/{LAST_GOOD}", allow_not_found=True))
        except FileNotFoundError:
            return []
        return [f"{LAST_GOOD}/{i.base_name}" for i in infos if i.type == pafs.FileType.File]

    def delete(self, rel: str) -> None:
        self.fs.delete_file(f"{self.base}/{rel}")

    def exists(self, rel: str) -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(f"{self.base}/{rel}").type == pafs.FileType.File


def _mac(key: bytes, rel: str, data: bytes) -> str:
    return hmac.new(key, rel.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def _is_state(rel: str) -> bool:
    """Tune's top-level state files (kept as last good copies)."""
    return "/" not in rel


def _is_record(rel: str) -> bool:
    """A trial's record (:data:`RECORDS`), in its trial folder."""
    return "/" in rel and rel.rsplit("/", 1)[1] in RECORDS


def _intact(rel: str, data: bytes) -> bool:
    """Not cut short: non-empty; JSON parses; a pickle's opcodes run to its STOP (read
    by ``pickletools``, which executes nothing)."""
    if not data:
        return False
    # by content, not name: Tune's search_gen_state-*.json is a pickle, the project's
    # searcher-state-*.pkl is JSON
    if data[:1] == b"\x80":  # pickle protocol 2+
        return _complete_pickle(data)
    if rel.startswith(JSON_STATE) or data.lstrip()[:1] in (b"{", b"["):
        return _valid_json(data)
    if rel.endswith(".pkl"):
        return _complete_pickle(data)
    return True


def _complete_pickle(data: bytes) -> bool:
    import pickletools

    try:
        for _ in pickletools.genops(data):
            pass
    except Exception:  # noqa: BLE001 - truncated or not a pickle
        return False
    return True


def _valid_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


class Signer:
    """Signs Ray's files under ``root`` whenever they change (called by the driver
    after Tune's saves); keeps last good copies of the experiment state."""

    def __init__(self, *, root: str):
        self.store = _Storage(root)
        self.key = load_key()
        self.seen: dict[str, tuple[int, int]] = {}
        self.manifest: dict[str, str] = self._read_manifest()

    def _read_manifest(self) -> dict[str, str]:
        try:
            data = json.loads(self.store.read(MANIFEST))
        except (FileNotFoundError, OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def sign(self) -> None:
        files = self.store.files()
        changed = {rel: st for rel, st in files.items() if self.seen.get(rel) != st}
        gone = set(self.manifest) - set(files) - {f"{LAST_GOOD}/{r}" for r in files}
        if not changed and not any(not r.startswith(LAST_GOOD) for r in gone):
            return
        for rel, st in changed.items():
            try:
                data = self.store.read(rel)
            except FileNotFoundError:
                continue
            if (_is_state(rel) or _is_record(rel)) and not _intact(rel, data):
                continue  # a half-written or empty state or record is never signed
            self.manifest[rel] = _mac(self.key, rel, data)
            if _is_state(rel):
                self.store.write(f"{LAST_GOOD}/{rel}", data)
                self.manifest[f"{LAST_GOOD}/{rel}"] = self.manifest[rel]
            self.seen[rel] = st
        for rel in gone:
            if not rel.startswith(LAST_GOOD):
                self.manifest.pop(rel, None)
        self.store.write(MANIFEST, json.dumps(self.manifest, indent=1, sort_keys=True).encode())


def verify(root: str, *, trust: bool = False) -> list[str]:
    """Check Ray's files under ``root`` before Tune unpickles them.  A top-level state
    file left empty or cut short (full disk, killed driver), or not matching its
    signature, is replaced by its signed last good copy (one note per repair, naming
    the file); without one :class:`IntegrityError` (one line) refuses the resume, so
    Tune never starts the study over from an unreadable state.  ``trust``
    (``--trust-storage``): the HMAC checks are skipped, the damaged-state check is not
    (an intact last good copy is then used without its signature)."""
    store = _Storage(root)
    key = None if trust else load_key()
    try:
        manifest = json.loads(store.read(MANIFEST))
    except (FileNotFoundError, OSError):
        manifest = None
    except ValueError:
        if not trust:
            raise IntegrityError(f"{root}/{MANIFEST}: signature manifest is damaged; refusing to load Ray's state")
        manifest = None
    if not isinstance(manifest, dict):
        if not trust:
            raise IntegrityError(f"{root}: Ray's state files are not signed ({MANIFEST} missing); refusing to "
                                 "unpickle them (see README 'Trust boundary'; --trust-storage skips this check)")
        manifest = {}

    def signed(rel: str, data: bytes, mac_of: str) -> bool:
        expected = manifest.get(mac_of)
        return trust or (expected is not None and hmac.compare_digest(_mac(key, rel, data), expected))

    notes = []
    for rel in sorted(store.files()):
        data = store.read(rel)
        if _is_record(rel) and (not _intact(rel, data) or not signed(rel, data, rel)):
            # written on a full disk, or after the driver's last signature: set aside,
            # never unpickled (Tune reads it back only to report the error)
            store.write(rel + SET_ASIDE, data)
            store.delete(rel)
            why = "damaged" if not _intact(rel, data) else "not signed by this study's driver"
            notes.append(f"{root}/{rel}: {why} (written while the storage was full, or after the driver "
                         f"stopped?); set aside as {rel.rsplit('/', 1)[1]}{SET_ASIDE}, never unpickled")
            continue
        if _is_state(rel) and (not _intact(rel, data) or (rel not in WRITTEN_ONCE and not signed(rel, data, rel))):
            # a top-level state left empty or cut short by a full disk, or written by
            # Tune after the driver's last signature (driver killed): restored from its
            # own signed last good copy, else (an experiment state of a later session
            # that never got one) the newest good one, the damaged file set aside
            note = _restore(store, rel, data, manifest, signed, trust=trust)
            if note is not None:
                notes.append(f"{root}/{note}")
                continue
            if not _intact(rel, data):
                raise IntegrityError(f"{root}/{rel}: Ray's state file is damaged ({len(data)} bytes) and no "
                                     f"intact {'' if trust else 'signed '}copy exists; refusing to resume "
                                     "(Tune would start the study over)")
        if trust:
            continue
        if manifest.get(rel) is None:
            raise IntegrityError(f"{root}/{rel}: not signed by this study's driver; refusing to unpickle it")
        if not signed(rel, data, rel):
            raise IntegrityError(f"{root}/{rel}: HMAC mismatch (changed since the driver wrote it, or signed "
                                 "with another key); refusing to unpickle it")
    return notes


def _restore(store: _Storage, rel: str, data: bytes, manifest: dict, signed, *, trust: bool) -> str | None:
    """Put back the last good copy of the state file ``rel`` (for an experiment state,
    of the newest session that has one); returns the note, or None without a copy."""
    copies = {g.split("/", 1)[1] for g in manifest if g.startswith(f"{LAST_GOOD}/")}
    if trust:  # without signatures: the copies on disk
        copies |= {r.split("/", 1)[1] for r in store.last_good()}
    candidates = [rel]
    if rel.startswith(JSON_STATE):
        candidates += sorted((c for c in copies if c.startswith(JSON_STATE) and c != rel), reverse=True)
    for name in candidates:
        good = f"{LAST_GOOD}/{name}"
        if name not in copies or not store.exists(good):
            continue
        saved = store.read(good)
        if not _intact(name, saved) or not signed(name, saved, good):
            continue
        if name != rel:
            store.write(f".damaged-{rel}", data)
            store.delete(rel)
        store.write(name, saved)
        return f"{rel} was damaged or unsigned ({len(data)} bytes); restored the last good copy of {name}"
    return None
