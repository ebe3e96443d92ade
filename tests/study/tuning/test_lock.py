"""The study lock as the commands use it before anything heavy (issue 45, finding 4): a driver
refused once it holds the lock leaves no folder behind, and a study that exists is checked
for a holder without writing anything (docs/reliability.md "One driver per study")."""

from __future__ import annotations

import json
import os
import time

import pytest

from study.errors import LockError
from study.tuning.lock import LOCK, STALE_S, StudyLock


def test_release_removes_only_the_empty_folders_acquire_created(tmp_path):
    root = tmp_path / "storage" / "study"
    StudyLock(root=str(root), name="study").acquire().release()
    assert not (tmp_path / "storage").exists(), "a refused driver left its study folder"
    (tmp_path / "storage").mkdir()
    with StudyLock(root=str(root), name="study"):
        (root / "study.json").write_text("{}")  # the study started: its folder stays
    assert sorted(p.name for p in root.iterdir()) == ["study.json"]
    with StudyLock(root=str(tmp_path / "storage" / "other"), name="other"):
        pass
    assert sorted(p.name for p in (tmp_path / "storage").iterdir()) == ["study"], (
        "the storage it did not create"
    )


def test_a_second_lock_is_refused_naming_the_holder_and_leaves_its_folder(tmp_path):
    root = tmp_path / "study"
    with StudyLock(root=str(root), name="s"):
        with pytest.raises(LockError, match=f"already being run by another driver .pid {os.getpid()} on "):
            StudyLock(root=str(root), name="s").acquire()
        assert (root / LOCK).exists(), "the refused driver removed the holder's lock or folder"
    assert not root.exists()


def test_check_free_on_a_local_study_writes_nothing(tmp_path):
    root = tmp_path / "study"
    root.mkdir()
    StudyLock(root=str(root), name="s").check_free()  # no lock file: free, none created
    assert list(root.iterdir()) == []
    with StudyLock(root=str(root), name="s"):
        before = (root / LOCK).read_bytes()
        with pytest.raises(LockError, match=f"pid {os.getpid()} on .*; lock {root / LOCK}$"):
            StudyLock(root=str(root), name="s").check_free()
        assert (root / LOCK).read_bytes() == before
    (root / LOCK).write_text("{}")  # a lock file its dead holder left: free, and left as it is
    StudyLock(root=str(root), name="s").check_free()
    assert (root / LOCK).read_text() == "{}" and StudyLock(root=str(root), name="s").stores_only_the_lock()
    (root / "study.json").write_text("{}")
    assert not StudyLock(root=str(root), name="s").stores_only_the_lock()


def test_check_free_on_object_storage_writes_nothing(monkeypatch):
    """check_free and stores_only_the_lock on S3 (moto in this process): the same answers, nothing written."""
    moto = pytest.importorskip("moto")
    import boto3

    for k, v in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="study-bucket")
        root = "s3://study-bucket/studies/x"
        StudyLock(root=root, name="x").check_free()
        assert "Contents" not in s3.list_objects_v2(Bucket="study-bucket", Prefix="studies/x/")
        with StudyLock(root=root, name="x"):
            with pytest.raises(LockError, match=f"already being run by another driver .pid {os.getpid()} "):
                StudyLock(root=root, name="x").check_free()
            assert StudyLock(root=root, name="x").stores_only_the_lock()
            s3.put_object(Bucket="study-bucket", Key="studies/x/study.json", Body=b"{}")
            assert not StudyLock(root=root, name="x").stores_only_the_lock()
            s3.delete_object(Bucket="study-bucket", Key="studies/x/study.json")
        assert "Contents" not in s3.list_objects_v2(Bucket="study-bucket", Prefix="studies/x/")
        stale = {"pid": 1, "host": "elsewhere", "started": 0, "heartbeat": time.time() - 10 * STALE_S}
        s3.put_object(Bucket="study-bucket", Key=f"studies/x/{LOCK}", Body=json.dumps(stale).encode())
        StudyLock(root=root, name="x").check_free()  # a holder gone quiet is no holder
