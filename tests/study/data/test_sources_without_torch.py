"""A malformed data source (an image folder's or archive's layout, an image header) is
refused in one line, exit 2, before torch is imported and in well under a second of CPU
(it took 4-10 s and ~700 MB each when torch was imported first): ``study run``,
``study plan`` and ``study train``."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.data_helpers import image_array, make_tar, make_tree, write_image
from tests.helpers import TINY, cli_env

#: the command in a fresh interpreter; on exit it says whether torch was imported and its CPU seconds
PROBE = """
import atexit, resource, sys
def said():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"PROBE torch={'torch' in sys.modules} cpu={ru.ru_utime + ru.ru_stime:.3f}", file=sys.stderr)
atexit.register(said)
from study.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _one_class(root: Path) -> Path:
    make_tree(root / "src", classes=("cat",))
    return root / "src"


def _no_test(root: Path) -> Path:
    make_tree(root / "src")
    import shutil

    shutil.rmtree(root / "src" / "test")
    return root / "src"


def _big_image(root: Path) -> Path:
    make_tree(root / "src")
    write_image(root / "src" / "train" / "cat" / "big.png", image_array(7, size=(64, 64)))
    return root / "src"


def _not_a_tar(root: Path) -> Path:
    (root / "src.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    return root / "src.tar.gz"


def _tar_without_test(root: Path) -> Path:
    return make_tar(_no_test(root), root / "src.tar.gz")


def _tar_with_a_big_image(root: Path) -> Path:
    return make_tar(_big_image(root), root / "src.tar")


def _tar_of_two_wrappers(root: Path) -> Path:
    make_tree(root / "a")
    with tarfile.open(root / "src.tar", "w") as tf:
        for p in sorted((root / "a").rglob("*")):
            rel = p.relative_to(root / "a").as_posix()
            tf.add(p, arcname=f"one/{rel}", recursive=False)
            tf.add(p, arcname=f"two/{rel}", recursive=False)
    return root / "src.tar"


SOURCES = [
    _one_class,
    _no_test,
    _big_image,
    _not_a_tar,
    _tar_without_test,
    _tar_with_a_big_image,
    _tar_of_two_wrappers,
]


@pytest.mark.parametrize("command", ["run", "plan", "train"])
@pytest.mark.parametrize("source", SOURCES, ids=lambda f: f.__name__.strip("_"))
def test_a_malformed_source_is_refused_before_torch_is_imported(tmp_path, source, command):
    data = source(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "s", "data": str(data), "epochs": 1, "batch_size": 2, "model": TINY})
    )
    args = {
        "run": ["run", str(spec), "--storage", str(tmp_path / "st")],
        "plan": ["plan", str(spec)],
        "train": ["train", "--data", str(data), "--out", str(tmp_path / "out"), "--epochs", "1"],
    }[command]
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(None),
        cwd=tmp_path,
    )
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 2 and lines[0].startswith(f"study {command}: error: "), (
        r.stderr
    )
    assert str(data) in lines[0] or data.name in lines[0], lines[0]
    probe = dict(kv.split("=") for kv in lines[1].split()[1:])
    assert probe["torch"] == "False", r.stderr
    assert float(probe["cpu"]) < 1.0, r.stderr
    assert not (tmp_path / "st").exists() and not (tmp_path / "out").exists()
