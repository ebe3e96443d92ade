"""The signing key file (``study.tuning.integrity.load_key``): made once, whole, by
whichever process comes first; every process reads the same non-empty key."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from study.errors import IntegrityError


def _key(config_home: str, start, out) -> None:
    import os

    os.environ["XDG_CONFIG_HOME"] = config_home
    os.environ.pop("STUDY_HMAC_KEY", None)
    from study.tuning.integrity import load_key

    start.wait()
    try:
        out.put(load_key().decode())
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put(f"error: {e}")


@pytest.mark.parametrize("round_", range(3))
def test_processes_racing_for_the_first_key_all_read_the_same_whole_key(tmp_path, round_):
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_key, args=(str(tmp_path), start, out)) for _ in range(12)]
    for p in procs:
        p.start()
    start.set()
    keys = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
    assert len(set(keys)) == 1 and len(keys[0]) == 64, keys
    key_file = tmp_path / "attention-cnn-study" / "hmac.key"
    assert key_file.read_text() == keys[0] and (key_file.stat().st_mode & 0o777) == 0o600
    assert [f.name for f in key_file.parent.iterdir()] == ["hmac.key"]  # no temporary file left


def test_an_empty_key_file_is_refused_naming_it(tmp_path, monkeypatch):
    from study.tuning.integrity import load_key

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("STUDY_HMAC_KEY", raising=False)
    f = tmp_path / "attention-cnn-study" / "hmac.key"
    f.parent.mkdir(parents=True)
    f.write_text("")
    with pytest.raises(IntegrityError, match="hmac.key: the signing key file is empty"):
        load_key()
