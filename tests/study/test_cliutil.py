"""study.cliutil's argparse types: a bounded number accepts exactly its range."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from study.cliutil import BoundedFloat
from study.errors import EXIT_STORAGE
from tests.helpers import cli_env


@pytest.mark.parametrize("low, high", [(0, 1), (1e-6, 1e6), (0.1, 86_400.0)])
def test_a_bounded_float_accepts_both_bounds_and_refuses_just_outside(low, high):
    number = BoundedFloat(low, high, "LIMIT")
    assert number(repr(low)) == low and number(repr(high)) == high
    for outside in (low / 2 if low else -1e-9, high * 1.001):
        with pytest.raises(
            argparse.ArgumentTypeError, match=re.escape(f"must be from {low:g} to {high:g} (LIMIT)")
        ):
            number(repr(outside))


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "x", ""])
@pytest.mark.parametrize("low, kind", [(0, "finite"), (1e-6, "positive")])
def test_a_bounded_float_refuses_what_is_not_a_number_of_its_kind(text, low, kind):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"must be a {kind} number, got {text!r}")):
        BoundedFloat(low, 1, "LIMIT")(text)


@pytest.mark.parametrize("module", ["study", "analysis"])
def test_a_file_system_fault_no_check_foresaw_is_one_line_with_the_storage_status(module, tmp_path):
    """Standard output on a full device (/dev/full): an OSError traceback before, and Python's exit
    flush failing again after it."""
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", module, "schema"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=cli_env(),
            timeout=300,
        )
    assert r.returncode == EXIT_STORAGE, r.stderr
    assert r.stderr == f"{module} schema: error: storage: No space left on device\n"
