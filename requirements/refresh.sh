#!/usr/bin/env bash
# Regenerates the lock files from pyproject.toml (run after changing a dependency):
#   pip install uv && requirements/refresh.sh
# test.txt: every package of `pip install -e '.[test]'` (the test extra holds every other
# extra's packages too), main.txt: those of `pip install -e .`, at the same versions.
# Inputs: pyproject.toml's ranges and requirements/pins.txt (the torch/torchvision pair
# that imports together from PyPI, and the Ray version the suite tests).  The lock is for
# CPython 3.11 on x86_64 Linux, the machines this project is tested on.
set -euo pipefail
cd "$(dirname "$0")/.."
common=(--python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-header --annotation-style line -q)
uv pip compile pyproject.toml --extra test -c requirements/pins.txt "${common[@]}" -o requirements/test.txt "$@"
uv pip compile pyproject.toml -c requirements/test.txt "${common[@]}" -o requirements/main.txt "$@"
