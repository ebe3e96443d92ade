#!/usr/bin/env bash
# The system programs the test suite needs beyond Python, installed with apt-get
# (Debian/Ubuntu) where missing; the README's test command and .ci/run call it.
#
#   package        program(s) checked             tests that need it
#   chromium       chromium | chromium-browser    tests/analysis/test_report.py (the served report in headless Chromium)
#   iproute2       ss                             tests/study/tuning/test_cluster.py (the local Ray's listening sockets)
#   slurmctld      slurmctld                      tests/study/commands/test_slurm.py (a single-node SLURM on loopback)
#   slurmd         slurmd                         tests/study/commands/test_slurm.py
#   slurm-client   sbatch                         tests/study/commands/test_slurm.py
#   munge          munged                         tests/study/commands/test_slurm.py
#
# Idempotent and quiet: nothing is printed, and apt-get is not run, when every
# program is there; otherwise one line says what it installed.  Where it cannot
# install (not root and no password-less sudo, no apt-get, apt-get fails) it prints
# ONE line naming what is missing and the tests that will fail, and exits 0 so that
# the rest of the suite still runs.
#
#   tests/install-system-deps.sh           install what is missing
#   tests/install-system-deps.sh --check   install nothing: one line per package,
#                                          "present PACKAGE PROGRAM" or "missing PACKAGE
#                                          (TESTS)"; exit 1 if any is missing
set -u

# package, the programs any one of which it provides, the tests that need it
PACKAGES=(chromium iproute2 slurmctld slurmd slurm-client munge)
declare -A PROGRAMS=([chromium]="chromium chromium-browser" [iproute2]="ss" [slurmctld]="slurmctld"
                     [slurmd]="slurmd" [slurm-client]="sbatch" [munge]="munged")
declare -A TESTS=([chromium]="tests/analysis/test_report.py" [iproute2]="tests/study/tuning/test_cluster.py"
                  [slurmctld]="tests/study/commands/test_slurm.py" [slurmd]="tests/study/commands/test_slurm.py"
                  [slurm-client]="tests/study/commands/test_slurm.py" [munge]="tests/study/commands/test_slurm.py")
me=tests/install-system-deps.sh

# the program of a package found on PATH or in the sbin folders (daemons live there,
# often off a user's PATH); prints it, or fails
program_of() {
    local prog dir
    for prog in ${PROGRAMS[$1]}; do
        command -v "$prog" 2>/dev/null && return 0
        for dir in /usr/local/sbin /usr/sbin /sbin; do
            [ -x "$dir/$prog" ] && { echo "$dir/$prog"; return 0; }
        done
    done
    return 1
}

missing() {
    local pkg
    for pkg in "${PACKAGES[@]}"; do program_of "$pkg" >/dev/null || echo "$pkg"; done
}

# the distinct test files that need these packages, space-separated
tests_of() {
    local pkg out=" "
    for pkg in "$@"; do [[ "$out" == *" ${TESTS[$pkg]} "* ]] || out+="${TESTS[$pkg]} "; done
    out=${out# }; echo "${out% }"
}

if [ "${1:-}" = "--check" ]; then
    rc=0
    for pkg in "${PACKAGES[@]}"; do
        if prog=$(program_of "$pkg"); then echo "present $pkg $prog"
        else echo "missing $pkg ($(tests_of "$pkg"))"; rc=1; fi
    done
    exit $rc
elif [ $# -gt 0 ]; then
    echo "usage: $me [--check]" >&2
    exit 2
fi

need=($(missing))
[ ${#need[@]} -eq 0 ] && exit 0

cannot() {  # one line, exit 0: the suite runs, the tests that need these fail
    echo "$me: $1: cannot install ${need[*]} (as root: apt-get install -y ${need[*]}); the tests that need them will fail: $(tests_of "${need[@]}")"
    exit 0
}

command -v apt-get >/dev/null 2>&1 || cannot "no apt-get"
as_root=()
if [ "$(id -u 2>/dev/null)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then as_root=(sudo -n)
    else cannot "not root (and no password-less sudo)"; fi
fi
export DEBIAN_FRONTEND=noninteractive
apt=("${as_root[@]}" apt-get -qq -o DPkg::Lock::Timeout=300)
# apt-get's own words on failure: the last line of its standard error
err=$( { "${apt[@]}" update >/dev/null && "${apt[@]}" install -y "${need[@]}" >/dev/null; } 2>&1 ) \
    || cannot "apt-get failed (${err##*$'\n'})"

still=($(missing))
[ ${#still[@]} -eq 0 ] || { need=("${still[@]}"); cannot "apt-get ran, yet no program of theirs is on PATH or in /usr/sbin"; }
echo "$me: installed ${need[*]}"
exit 0
