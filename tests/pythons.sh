#!/usr/bin/env bash
# Usage: tests/pythons.sh
# Runs the tar-archive reader's tests (tests/study/data/test_archive.py: stdlib tarfile, no torch)
# under every Python of pyenv that pyproject.toml's requires-python admits, since what tarfile
# does inside changes between releases.  Each Python gets a small venv (.venv-pyXY, .venv for
# the one it was made with) holding only pytest, numpy and Pillow at the lock's versions.
# Prints `python X.Y.Z: PASS` or `python X.Y.Z: FAIL` per Python; exit 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
pins=$(grep -Eio '^(pytest|numpy|pillow)==[^ ]+' constraints.txt)
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
failed=0
for python in "$root"/versions/3.*/bin/python; do
    version=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || continue
    venv=.venv-py$(echo "$version" | cut -d. -f1,2 | tr -d .)
    if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c 'import platform; print(platform.python_version())')" = "$version" ]; then
        venv=.venv
    elif [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv" && "$venv/bin/pip" install -q --isolated --disable-pip-version-check $pins \
            || { echo "python $version: FAIL (cannot make $venv)"; failed=1; continue; }
    fi
    # --noconftest: tests/conftest.py imports torch, which these venvs do not have
    if "$venv/bin/python" -m pytest --noconftest -o addopts= -p no:cacheprovider -q tests/study/data/test_archive.py; then
        echo "python $version: PASS"
    else
        echo "python $version: FAIL"
        failed=1
    fi
done
exit $failed
