"""``study train``'s warm-up flags (issue 43): --warmup FRACTION, --warmup-epochs E, --warmup-steps N,
one at most, each bounded as the study file's (its one home, TrainConfig), refused in one line, exit 2."""

import pytest

FLAGS = [("--warmup", "0.1"), ("--warmup-epochs", "0.5"), ("--warmup-steps", "3")]
PAIRS = [(a, b) for a in FLAGS for b in FLAGS if a[0] < b[0]]


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a[0]}+{b[0]}" for a, b in PAIRS])
def test_two_warmup_flags_are_refused_in_one_line(study_in_process, tmp_path, a, b):
    code, out, err, _ = study_in_process("train", "--data", "synthetic:20", *a, *b, "--out", tmp_path / "o")
    assert code == 2 and len(err) == 1 and a[0] in err[0] and b[0] in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--warmup-epochs", "3", "--epochs", "2"], "--warmup-epochs"),
        (["--warmup-epochs", "-1"], "--warmup-epochs"),
        (["--warmup-steps", "-1"], "--warmup-steps"),
        (["--warmup-steps", "2.5"], "--warmup-steps"),
        (["--warmup", "1"], "--warmup"),
    ],
)
def test_a_warmup_flag_out_of_bounds_is_refused_in_one_line(study_in_process, tmp_path, argv, flag):
    code, out, err, _ = study_in_process("train", "--data", "synthetic:20", *argv, "--out", tmp_path / "o")
    assert code == 2 and len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "o").exists()


def test_help_names_the_three_forms_and_the_papers_default(study_in_process):
    code, out, err, _ = study_in_process("train", "--help")
    text = " ".join(out.split())
    assert (
        code == 0
        and "--warmup FRACTION" in text
        and "--warmup-epochs E" in text
        and "--warmup-steps N" in text
    )
    assert "paper's 0.05" in text
