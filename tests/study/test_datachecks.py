"""A data source is checked before anything starts (study.datachecks), each refusal one line, the
quick checks without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from study.datachecks import check_data, check_sizes
from study.errors import UsageError
from tests.helpers import REPO_ROOT

CHECK = """
import sys
from study.datachecks import check_data
from study.errors import UsageError
try:
    check_data("--data", sys.argv[1])
except UsageError as e:
    print(e)
print("torch" in sys.modules)
"""


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ("/nonexistent/cifar", "--data: /nonexistent/cifar: no such file or directory"),
        ("imagenet:/x", "--data: imagenet:/x: unknown data source kind 'imagenet'"),
        ("synthetic:0", "--data: synthetic:N needs 1 <= N <= "),
    ],
)
def test_a_bad_source_is_one_line_and_torch_is_never_imported(data, line):
    r = subprocess.run(
        [sys.executable, "-c", CHECK, data], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    refusal, torch_imported = r.stdout.splitlines()
    assert refusal.startswith(line) and torch_imported == "False", r.stdout + r.stderr


def test_a_good_folder_gives_its_image_counts(tmp_path):
    from PIL import Image

    for split, n in (("train", 3), ("test", 2)):
        for label in ("cat", "dog"):
            (tmp_path / split / label).mkdir(parents=True)
            for k in range(n):
                Image.new("RGB", (32, 32)).save(tmp_path / split / label / f"{k}.png")
    assert check_data("--data", str(tmp_path)) == (6, 4)


def test_a_batch_larger_than_the_training_images_is_refused_before_loading():
    with pytest.raises(
        UsageError,
        match=r"^batch_size: .*the 100 training images of synthetic:100 less 20 held out for validation",
    ):
        check_sizes(
            "synthetic:100",
            sizes=(100, 20),
            subset=None,
            validation=20,
            batch=81,
            workers=1,
            where=lambda field: field and f"{field}: ",
        )
