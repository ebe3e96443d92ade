#!/usr/bin/env bash
# Usage: tests/ray-range.sh VERSION [VENV]     e.g.  tests/ray-range.sh 2.50.0
# Checks the project on one Ray release before the range `ray[tune]>=...` in pyproject.toml
# is changed: only the lock's Ray (constraints.txt) is tested otherwise.  Installs the
# project into its own venv (default .venv-ray-VERSION) from the lock with its `ray==` pin
# set to VERSION, then runs the smoke study (its console: the project's lines only, no Ray log
# line, no Python warning), the resume tests and the local Ray's socket tests (loopback only,
# the token).  Takes minutes; the last line is `ray VERSION: PASS` or `ray VERSION: FAIL (<which>)`
# (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: tests/ray-range.sh VERSION [VENV]}
venv=${2:-.venv-ray-$version}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the lock, with only its Ray pin changed
sed "s/^ray==[^ ]*/ray==$version/" constraints.txt > "$tmp/constraints.txt"
# the test extra pins ray[default]==<the lock's Ray>, which no other Ray satisfies, so its
# requirements are installed from a copy with that one pin set to VERSION (pyproject.toml
# is left as it is)
python3 - "$version" > "$tmp/test-extra.txt" <<'EOF'
import re, sys, tomllib
for req in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]:
    print(re.sub(r"^ray\[default\]==\S+", f"ray[default]=={sys.argv[1]}", req))
EOF
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --isolated --disable-pip-version-check -c "$tmp/constraints.txt" -e . -r "$tmp/test-extra.txt"
"$venv/bin/python" -c "import ray, sys; print('installed ray', ray.__version__); sys.exit(ray.__version__ != '$version')"

failed=()
echo "== study run search_spaces/smoke.yaml"
SECONDS=0
"$venv/bin/study" run search_spaces/smoke.yaml --storage "$tmp/storage" > "$tmp/smoke.out" 2>&1 || failed+=(smoke)
cat "$tmp/smoke.out"
# a quiet console: a Python warning (`…: FutureWarning: Tip: …`) or a Ray log line is a failure
if grep -En '\b\w*Warning: |\bTip: |\b(INFO|WARNING|ERROR)\b\s+[[:alnum:]_.]+\.py:[0-9]+ -- |\(pid=' "$tmp/smoke.out"; then
    failed+=(smoke-console)
fi
echo "== smoke: ${SECONDS}s"
# one pytest run per line (the local Ray's socket tests share one Ray)
while read -r tests; do
    echo "== pytest $tests"
    SECONDS=0
    # shellcheck disable=SC2086 # a line may carry options (-k)
    "$venv/bin/python" -m pytest -q -p no:cacheprovider $tests < /dev/null || failed+=("${tests#tests/}")
    echo "== ${tests#tests/}: ${SECONDS}s"
done <<'EOF'
tests/study/tuning/test_runner.py::test_interrupt_then_resume_keeps_the_study_that_started
tests/study/tuning/test_runner.py::test_asha_decisions_survive_a_lost_driver
tests/study/tuning/test_reliability.py::test_killed_driver_then_resume_runs_nothing_twice
tests/study/tuning/test_reliability.py::test_killed_trial_resumes_from_its_checkpoint_and_queries_meanwhile_never_see_half_written_parts
tests/study/tuning/test_cluster.py -k test_local_ray_
EOF

if [ ${#failed[@]} -eq 0 ]; then
    echo "ray $version: PASS"
else
    echo "ray $version: FAIL (${failed[*]})"
    exit 1
fi
