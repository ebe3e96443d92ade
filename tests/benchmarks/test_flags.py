"""The benchmark scripts' size flags: a flag bounded by a :mod:`study.limits` constant accepts that
constant and refuses one more, naming it (warmup.py's --batch stopped at 1,000 while its message
named MAX_BENCH_BATCH, 4,096)."""

from __future__ import annotations

import sys

import pytest

from study import limits
from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import warmup  # noqa: E402


@pytest.mark.parametrize(
    "parse, argv, flag, name",
    [
        (warmup.parse_args, ["--data", "synthetic:300"], "--batch", "MAX_BENCH_BATCH"),
        (gpu_check.parse_args, ["--device", "cpu", "--parts", "bench"], "--batch", "MAX_BENCH_BATCH"),
        (gpu_check.parse_args, ["--device", "cpu", "--parts", "bench"], "--epochs", "MAX_EPOCHS"),
    ],
    ids=lambda v: getattr(v, "__module__", v) if callable(v) else None,
)
def test_a_flag_bounded_by_a_limit_accepts_it_and_refuses_one_more(parse, argv, flag, name, capsys):
    cap = getattr(limits, name)
    assert getattr(parse([*argv, flag, str(cap)]), flag.lstrip("-")) == cap
    with pytest.raises(SystemExit) as exit_:
        parse([*argv, flag, str(cap + 1)])
    assert exit_.value.code == 2
    assert f"argument {flag}: must be <= {cap} ({name}), got {cap + 1}" in capsys.readouterr().err


def test_min_accuracy_accepts_zero():
    """gpu_check's --min-accuracy 0 is what --small uses; an accuracy's range starts at 0."""
    assert (
        gpu_check.parse_args(["--device", "cpu", "--parts", "bench", "--min-accuracy", "0"]).min_accuracy == 0
    )
