"""study train's size refusals name what left too few training images."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "flags, expect",
    [
        (["--validation", "0.99"], "the 64 training images of synthetic:64 less 63 held out for validation"),
        (["--subset", "20", "--validation", "0.5"], "subset 20 less 10 held out for validation"),
        (["--subset", "12"], "subset 12: no training step"),
    ],
)
def test_a_batch_larger_than_what_trains_names_the_validation_split_that_took_the_images(
    study_in_process, tmp_path, flags, expect
):
    """As a study file's refusal says it: ``--validation 0.99`` left 1 image, and the refusal only
    said '16 images per step is more than the 1 training images of synthetic:64'."""
    model = ["--hidden", "16", "--layers", "1", "--num-heads", "4", "--intermediate", "16"]
    argv = ["train", "--data", "synthetic:64", *model, "--batch-size", "16", *flags, "--out", tmp_path / "o"]
    code, _, err, _ = study_in_process(*argv)
    assert code == 2 and len(err) == 1, err
    assert f"--batch-size: 16 images per step is more than {expect}" in err[0], err
    assert not (tmp_path / "o").exists()
