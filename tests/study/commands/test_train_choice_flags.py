"""``study train``'s flags of a field with a fixed set of values (a ``Literal`` of TrainConfig):
``--help`` shows the values and a value outside them is refused by the model, in the words a study
file's refusal uses (its one home), one line, exit 2, nothing written."""

import typing

import pytest

from study.trial.config import TrainConfig

CHOICE_FIELDS = {
    name: typing.get_args(info.annotation)
    for name, info in TrainConfig.model_fields.items()
    if typing.get_origin(info.annotation) is typing.Literal
}


def test_the_choice_fields_are_found():
    assert {"schedule", "autoaugment"} <= set(CHOICE_FIELDS)


@pytest.mark.parametrize("field", sorted(CHOICE_FIELDS))
def test_a_value_outside_the_fields_choices_is_refused_by_the_model(study_in_process, tmp_path, field):
    flag = "--" + field.replace("_", "-")
    code, out, err, _ = study_in_process(
        "train", "--data", "synthetic:20", flag, "bogus", "--out", tmp_path / "o"
    )
    values = ", ".join(CHOICE_FIELDS[field])
    assert code == 2 and err == [f"study train: error: {flag}: must be one of {values}, got 'bogus'"], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field", sorted(CHOICE_FIELDS))
def test_help_shows_the_fields_choices(study_in_process, field):
    code, out, err, _ = study_in_process("train", "--help")
    assert code == 0 and all(v in out for v in CHOICE_FIELDS[field]), out


@pytest.mark.parametrize(
    "flags", [["--encoding", "gpsa"], ["--num-heads", "4"], ["--pos-dim", "7"], ["--locality-strength", "5"]]
)
def test_an_attention_flag_with_the_resnet_baseline_is_refused(study_in_process, tmp_path, flags):
    """``--arch resnet18`` has no attention: the flag was dropped without a word and the run trained
    a ResNet18 as if it had been honoured."""
    small = ["--data", "synthetic:32", "--epochs", "1", "--batch-size", "16", "--out", tmp_path / "o"]
    code, _, err, _ = study_in_process("train", "--arch", "resnet18", *flags, *small)
    assert code == 2 and len(err) == 1, err
    assert f"{flags[0]}: applies only to --arch sa" in err[0], err
    assert not (tmp_path / "o").exists()
