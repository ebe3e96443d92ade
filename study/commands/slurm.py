"""``study slurm``: an sbatch script running a study on one Ray node per allocated node
(why each step of :data:`SCRIPT` is as it is: its comments).  torch and Ray are not imported here."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from study.cliutil import package_version
from study.driver import check_writable, checked_name, resolved_storage
from study.errors import UsageError
from study.limits import MAX_NAME_LENGTH
from study.results.storage import STORAGE_ENV, is_remote, study_exists, study_root

PROG = "study slurm"

#: the script's default sbatch options; the user's (after ``--``) come later and win
DEFAULT_SBATCH = ("--ntasks-per-node=1", "--requeue", "--open-mode=append", "--signal=B:USR1@120")

#: options of ours sbatch must not be given: they would break one Ray node per node
REFUSED_SBATCH = ("--ntasks-per-node", "--array", "--wrap", "-a")
#: sbatch's short options that take a value (getopt: the rest of the word is it, ``-a5`` is ``-a 5``);
#: the others (``-H -O -Q -s -v -V -W -h``) are flags and may be bundled (``-Qa5``)
SBATCH_SHORT_WITH_VALUE = frozenset("AaBbCcDdeFGiJkLMmNnopqStwx")
#: sbatch long options that are also the beginning of a refused one: getopt_long takes an
#: exact name before a unique prefix (``--ntasks`` is itself, ``--ntasks-per-n`` is ``--ntasks-per-node``)
SBATCH_EXACT_PREFIXES = frozenset({"--ntasks"})

SCRIPT = r"""#!/bin/bash
#SBATCH --job-name={job_name}
{sbatch_lines}
# Written by `study slurm` ({version}); see docs/clusters.md "SLURM".
# One Ray node per allocated node (head here, on the job's first node; the others by
# srun), then the study's driver here; all of Ray stops with the driver.
set -u
PYTHON={python}
STORAGE={storage}
NAME={name}
RUN=({run_args})
RAY_LOGS={ray_logs}

export RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
# `ray start` gives a node 30 s (fixed in Ray) to register with the GCS; a loaded node can miss
# that: a node whose `ray start` fails is started again, this many times in all
STARTS="${{STUDY_SLURM_RAY_STARTS:-3}}"
export RAY_AUTH_TOKEN="$("$PYTHON" -c 'import secrets; print(secrets.token_hex(32))')"  # this job's own
RAY="$(dirname "$PYTHON")/ray"
[ -x "$RAY" ] || RAY=ray

say() {{ echo "study slurm [$(date +%H:%M:%S) ${{SLURMD_NODENAME:-$(hostname)}}]: $*" >&2; }}

free_ports() {{  # N free ephemeral ports of this node: outside Ray's worker range 10002-19999
  "$PYTHON" -c '
import socket, sys
held, ports = [], []
while len(ports) < int(sys.argv[1]):
    s = socket.socket()
    s.bind(("", 0))
    held.append(s)
    if not 10002 <= s.getsockname()[1] <= 19999:
        ports.append(s.getsockname()[1])
print(" ".join(map(str, ports)))' "$1"
}}

node_ip() {{  # the address SLURM reaches this node at (NodeAddr), resolved
  local addr
  addr="$(scontrol show node "${{SLURMD_NODENAME:-$(hostname)}}" -o 2>/dev/null | tr ' ' '\n' |
    sed -n 's/^NodeAddr=//p')"
  "$PYTHON" -c 'import socket, sys; print(socket.gethostbyname(sys.argv[1]))' "${{addr:-$(hostname)}}"
}}

node_gpus() {{  # the GPUs SLURM gave this step (CUDA_VISIBLE_DEVICES), 0 without
  local v="${{CUDA_VISIBLE_DEVICES:-}}"
  if [ -z "$v" ] || [ "$v" = "NoDevFileFound" ]; then echo 0; else echo "$v" | tr ',' '\n' | grep -c .; fi
}}

kill_marked() {{  # kill_marked SIGNAL SESSION: this node's Ray processes (the session `ray start` leads), by
  # PID; prints how many. Builtins only: a loaded node must not fork once per process here
  local sig=$1 sid=$2 p stat rest killed=0
  [ -n "$sid" ] || {{ echo 0; return; }}
  for p in /proc/[0-9]*; do
    p=${{p#/proc/}}
    read -r stat < "/proc/$p/stat" 2>/dev/null || continue
    rest=${{stat##*) }}; read -r -a rest <<< "$rest"  # state ppid pgrp session ...
    if [ "${{rest[3]}}" = "$sid" ] && [ "${{rest[0]}}" != Z ]; then
      kill "-$sig" "$p" 2>/dev/null && killed=$((killed + 1))
    fi
  done
  echo "$killed"
}}

ray_node() {{  # ray_node head|worker [HEAD_ADDRESS]: one Ray node, started again while `ray start` fails
  # (at most $STARTS starts, none once the job stops it)
  local start=1 status=0 tmp stopping="" ray_pid=""
  tmp="${{STUDY_RAY_TMP:-/tmp}}/ray-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}-${{SLURM_NODEID:-0}}"
  trap '' TERM INT
  trap 'stopping=1; kill_marked KILL "$ray_pid" >/dev/null' USR2
  while :; do
    ray_start "$tmp" "$@" && status=0 || status=$?
    [ "$status" != 0 ] && [ -z "$stopping" ] && [ "$start" -lt "$STARTS" ] || break
    start=$((start + 1))
    say "starting the Ray $1 node again (start $start of $STARTS)"
  done
  rm -rf "$tmp"
  return "$status"
}}

ray_start() {{  # ray_start TMP head|worker [HEAD_ADDRESS]: one `ray start` in the foreground, then clean-up
  local tmp=$1 role=$2 ports ip cpus gpus status=0
  shift
  rm -rf "$tmp" && mkdir -p "$tmp"
  ip="$(node_ip)"
  cpus="${{SLURM_CPUS_PER_TASK:-${{SLURM_CPUS_ON_NODE:-1}}}}"
  gpus="$(node_gpus)"
  read -r -a ports <<< "$(free_ports 6)"
  local args=(--block --disable-usage-stats --temp-dir "$tmp" --node-ip-address "$ip"
              --num-cpus "$cpus" --num-gpus "$gpus"
              --node-manager-port "${{ports[0]}}" --object-manager-port "${{ports[1]}}"
              --dashboard-agent-listen-port "${{ports[2]}}" --dashboard-agent-grpc-port "${{ports[3]}}"
              --metrics-export-port "${{ports[4]}}" --runtime-env-agent-port "${{ports[5]}}")
  if [ "$role" = head ]; then
    args+=(--head --port "$HEAD_PORT" --dashboard-port "$DASHBOARD_PORT"
      --ray-client-server-port "$CLIENT_PORT")
  else
    args+=(--address "$2")
  fi
  say "Ray $role node at $ip: $cpus CPUs, $gpus GPUs, temp dir $tmp"
  # Ray outlives SLURM's job-wide SIGTERM until the driver has stopped the study (docs/clusters.md, SLURM):
  # SIGTERM, SIGINT, SIGUSR2 blocked, in a session of its own; SIGKILL by PID stops it (SIGUSR2, set in
  # ray_node, or the end here).
  "$PYTHON" -c "$SHIELD" "$RAY" start "${{args[@]}}" \
    > "$tmp/ray-start.log" 2>&1 &
  ray_pid=$!
  while kill -0 "$ray_pid" 2>/dev/null; do wait "$ray_pid" 2>/dev/null || status=$?; done
  if [ -z "$stopping" ]; then  # not stopped by this script: say why
    say "ray start exited with status $status:"; tail -n 20 "$tmp/ray-start.log" >&2
  fi
  local left; left="$(kill_marked KILL "$ray_pid")"
  [ "$left" = 0 ] || say "killed $left Ray processes left on this node"
  if [ -n "$RAY_LOGS" ]; then
    local dest="$RAY_LOGS/${{SLURMD_NODENAME:-node$SLURM_NODEID}}"
    [ "$start" = 1 ] || dest="$dest.start$start"  # a failed start's logs are kept
    mkdir -p "$dest" && cp "$tmp/ray-start.log" "$dest/" 2>/dev/null
    [ ! -d "$tmp/session_latest/logs" ] || cp -rL "$tmp/session_latest/logs/." "$dest/" 2>/dev/null
  fi
  return "$status"
}}
SHIELD='import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM, signal.SIGINT, signal.SIGUSR2}})
os.setsid()  # a session of its own: every Ray process of this node, orphans included, is found by it
os.execvp(sys.argv[1], sys.argv[1:])'
export -f say free_ports node_ip node_gpus kill_marked ray_node ray_start
export PYTHON RAY RAY_LOGS SHIELD STARTS

# ---- the head, here on the job's first node
read -r HEAD_PORT DASHBOARD_PORT CLIENT_PORT <<< "$(free_ports 3)"
export HEAD_PORT DASHBOARD_PORT CLIENT_PORT
HEAD_IP="$(node_ip)"
HEAD="$HEAD_IP:$HEAD_PORT"
[ -z "$RAY_LOGS" ] || RAY_LOGS="$RAY_LOGS/ray-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}"
say "job $SLURM_JOB_ID (restart ${{SLURM_RESTART_COUNT:-0}}) on ${{SLURM_JOB_NUM_NODES:-1}} node(s):\
 $SLURM_JOB_NODELIST; Ray head $HEAD"

signalled="" driver="" wait_pid=""
on_signal() {{  # SIGTERM/SIGINT: to the driver, which takes a copy within 2 s of SLURM's own as the same
  # request; SIGUSR1 (time limit near): the same, then requeue (docs/clusters.md, SLURM)
  signalled=$1
  say "SIG$1 received: stopping the study"
  [ -z "$driver" ] || kill -TERM "$driver" 2>/dev/null
  [ -z "$wait_pid" ] || kill -TERM "$wait_pid" 2>/dev/null
}}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal USR1' USR1

ray_node head &
head_pid=$!
workers_pid=""
nodes=${{SLURM_JOB_NUM_NODES:-1}}
status=0
"$PYTHON" -m study.commands.slurm wait "$HEAD" 1 "${{STUDY_SLURM_JOIN_TIMEOUT:-600}}" "$head_pid" &
wait_pid=$!
while kill -0 "$wait_pid" 2>/dev/null; do wait "$wait_pid"; done
wait "$wait_pid" 2>/dev/null; joined=$?
if [ "$joined" = 0 ] && [ -z "$signalled" ] && [ "$nodes" -gt 1 ]; then
  srun --overlap --nodes=$((nodes - 1)) --ntasks=$((nodes - 1)) --ntasks-per-node=1 \
       --exclude="$SLURMD_NODENAME" --kill-on-bad-exit=0 \
       --cpus-per-task="${{SLURM_CPUS_PER_TASK:-${{SLURM_CPUS_ON_NODE:-1}}}}" \
       bash -c "ray_node worker $HEAD" &
  workers_pid=$!
  "$PYTHON" -m study.commands.slurm wait "$HEAD" "$nodes" "${{STUDY_SLURM_JOIN_TIMEOUT:-600}}" "$head_pid" &
  wait_pid=$!
  while kill -0 "$wait_pid" 2>/dev/null; do wait "$wait_pid"; done
  wait "$wait_pid" 2>/dev/null; joined=$?
fi

if [ -n "$signalled" ]; then
  say "stopped before the study started"
  status=143
elif [ "$joined" != 0 ]; then
  say "the Ray nodes did not come up (exit $joined); nothing was run"
  status=4
else
  if "$PYTHON" -m study status "$NAME" --storage "$STORAGE" >/dev/null 2>&1; then
    say "study $NAME exists in $STORAGE: study resume"
    "$PYTHON" -m study resume "$NAME" --storage "$STORAGE" --shared-storage --address "$HEAD" &
  else
    say "study run ${{RUN[0]}} --name $NAME"
    "$PYTHON" -m study run "${{RUN[@]}}" --name "$NAME" --storage "$STORAGE" --shared-storage \
      --address "$HEAD" &
  fi
  driver=$!
  [ -z "$signalled" ] || kill -TERM "$driver" 2>/dev/null
  while kill -0 "$driver" 2>/dev/null; do wait "$driver"; done
  wait "$driver" 2>/dev/null; status=$?
  say "the study's driver exited with status $status"
fi

# ---- stop every Ray node (SIGUSR2: each node's clean-up; srun passes it to the other nodes)
[ -z "$workers_pid" ] || kill -USR2 "$workers_pid" 2>/dev/null
kill -USR2 "$head_pid" 2>/dev/null
for pid in $workers_pid $head_pid; do
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
done
say "Ray stopped on every node"

if [ "$signalled" = USR1 ]; then
  say "time limit near: requeueing job $SLURM_JOB_ID (the next run resumes the study)"
  trap '' TERM INT  # SLURM ends this run of the job now
  scontrol requeue "$SLURM_JOB_ID" ||
    say "scontrol requeue failed: continue with \`study slurm $NAME --resume\`"
fi
exit "$status"
"""


def register(sub) -> None:
    p = sub.add_parser(
        "slurm",
        usage="study slurm [options] FILE [-- SBATCH_OPTION ...]",
        help="write or submit an sbatch script that runs a study on a SLURM allocation",
        description="Print an sbatch script (or submit it with --submit) that starts one Ray node per "
        "allocated node (the head on the first; `srun` for the others; the allocation's CPUs and GPUs; "
        "token authentication; node-local temp dirs), runs `study run FILE --address HEAD --storage STORAGE "
        "--shared-storage` against it (`study resume` once the study exists: a requeued job), and stops "
        "every Ray process of the job when the study ends. sbatch options go after `--`, e.g. "
        "`study slurm FILE --storage /nfs/studies --submit -- --nodes=2 --cpus-per-task=16 --gpus-per-task=1 "
        "--time=24:00:00`.",
        epilog="SIGTERM (scancel, preemption) stops the study cleanly (trials `interrupted`); SIGUSR1, which "
        "the script asks for 2 minutes before the time limit, does the same and requeues the job. Exit "
        "status of the job: the driver's (0, 1 a trial failed, 2 bad input, 3 storage, 4 Ray did not come "
        "up, 143 stopped).",
    )
    p.add_argument("file", help="study file (with --resume: the name of an existing study)")
    p.add_argument(
        "--storage",
        help="s3://bucket/prefix or a folder every node mounts at the same path (default: $STUDY_STORAGE)",
    )
    p.add_argument("--name", help="study name (default: the file's `name` or stem)")
    p.add_argument("--data", help="override the file's data source (a path every node sees)")
    p.add_argument(
        "--resume", action="store_true", help="continue the existing study FILE names (study resume)"
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="the Python of this project's environment on the nodes (default: this one)",
    )
    p.add_argument(
        "--ray-logs",
        help="folder (every node sees it) to copy each node's Ray logs to when the job ends, as "
        "DIR/ray-JOBID-RESTART/NODE (default: the folder sbatch was run from); '' keeps them nowhere",
    )
    p.add_argument("--submit", action="store_true", help="submit the script with sbatch and print the job id")
    p.set_defaults(func=run_slurm)  # args.sbatch: what follows the first `--` (study.cli.main)


def _sbatch_options(opts: list[str]) -> list[str]:
    """The user's sbatch options, each read as sbatch reads it (getopt_long: bundled short
    options with attached values, unique prefixes of long ones) and refused in one line
    if it is, or may be, one the script sets (:data:`REFUSED_SBATCH`)."""
    for o in opts:
        if any(ord(c) < 32 or ord(c) == 127 for c in o):
            raise UsageError(
                f"sbatch options: {o!r} holds a control character (a line break ends an #SBATCH line)"
            )
        if not o.startswith("-") or o in ("-", "--"):
            raise UsageError(f"sbatch options: {o!r} is not an option (give them after `--`, as --key=value)")
        if refused := _refused_sbatch(o):
            read = "" if o.split("=", 1)[0] == refused else f"; sbatch reads {o[:60]!r} as {refused}"
            raise UsageError(
                f"sbatch options: {refused} is set by the script (one Ray node per node, one study "
                f"per job{read})"
            )
    return opts


def _refused_sbatch(option: str) -> str | None:
    """The refused option sbatch would read ``option`` as (or might: an ambiguous prefix), else None."""
    if option.startswith("--"):
        name = option.split("=", 1)[0]
        if name in REFUSED_SBATCH:
            return name
        if name in SBATCH_EXACT_PREFIXES:
            return None
        return next((r for r in REFUSED_SBATCH if r.startswith("--") and r.startswith(name)), None)
    for letter in option[1:]:  # a bundle of short options: flags, then at most one that takes the rest
        if f"-{letter}" in REFUSED_SBATCH:
            return f"-{letter}"
        if letter in SBATCH_SHORT_WITH_VALUE:
            return None
    return None


def sbatch_quote(word: str) -> str:
    """``word`` as one argument of an ``#SBATCH`` line: sbatch splits the line at blanks,
    honours quotes and backslashes and ends it at an unescaped ``#``; a backslash before
    every other character keeps the word whole (and reads the same to ``shlex.split``)."""
    return re.sub(r"[^A-Za-z0-9_@%+=:,./-]", r"\\\g<0>", word)


def _storage(value: str | None) -> str:
    """``--storage`` (or ``$STUDY_STORAGE``) as ``study run`` checks it: malformed, a regular
    file or an unwritable folder is exit 2; an object store that does not answer, exit 3."""
    if value is None and not os.environ.get(STORAGE_ENV):
        shared = "s3://… or a folder every node mounts"
        raise UsageError(f"--storage: required ({shared}), or set ${STORAGE_ENV}")
    storage = resolved_storage(value)
    check_writable(storage)
    return storage if is_remote(storage) else str(Path(storage).resolve())


def script_for(args: argparse.Namespace) -> str:
    """The sbatch script for ``args`` (checked), every value quoted for bash (``shlex.quote``)
    and, in ``#SBATCH`` lines, for sbatch (:func:`sbatch_quote`)."""
    from study.spec.studyfile import load_spec, valid_name

    storage = _storage(args.storage)
    sbatch = _sbatch_options(args.sbatch)
    # NAME: a name as `study run` makes them (no '/' or leading '.'), a folder directly under storage
    if args.resume:
        if args.name or args.data:
            raise UsageError("--resume continues a stored study as it is: no --name or --data")
        name = args.file
        if not valid_name(name):
            raise UsageError(
                f"NAME: a study name is 1 to {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', not "
                f"starting with '.'; got {name[:120]!r}"
            )
        root = study_root(storage, name)
        if not is_remote(storage) and Path(root).resolve().parent != Path(storage):
            raise UsageError(f"NAME: {root} leads out of {storage} (a link): not a study of this storage")
        if not study_exists(root):
            raise UsageError(f"no study {name!r} in {storage}")
        run_args = [name]  # not used: the study exists, so the job runs `study resume NAME`
    else:  # the file validated against no particular machine; an existing study of its name is refused
        # a SpecError: exit 2
        spec = load_spec(args.file, data=args.data, gpus_available=None, cpus_available=None)
        name = checked_name(args.name if args.name is not None else spec.study.name)
        if study_exists(study_root(storage, name)):
            raise UsageError(
                f"--name: study {name!r} already exists in {storage} (continue it with "
                f"`study slurm {name} --resume` or pick another --name)"
            )
        run_args = [str(Path(args.file).resolve())] + (["--data", args.data] if args.data else [])
    q = shlex.quote
    ray_logs = (
        '"${SLURM_SUBMIT_DIR:-$PWD}"'
        if args.ray_logs is None  # default: the folder sbatch ran from
        else q(str(Path(args.ray_logs).resolve()) if args.ray_logs else "")
    )
    lines = "\n".join(f"#SBATCH {sbatch_quote(o)}" for o in (*DEFAULT_SBATCH, *sbatch))
    return SCRIPT.format(
        job_name=sbatch_quote(f"study-{name}"),
        sbatch_lines=lines,
        version=package_version(),
        python=q(args.python),
        storage=q(storage),
        name=q(name),
        run_args=" ".join(q(a) for a in run_args),
        ray_logs=ray_logs,
    )


def run_slurm(args: argparse.Namespace) -> int:
    script = script_for(args)
    if not args.submit:
        sys.stdout.write(script)
        return 0
    try:
        r = subprocess.run(["sbatch", "--parsable"], input=script, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageError(
            "--submit: sbatch is not on PATH (run this on a SLURM login node, or print the script)"
        ) from None
    if r.returncode != 0:
        print(f"{PROG}: error: sbatch: {' '.join(r.stderr.split())}", file=sys.stderr)
        return 1
    print(r.stdout.strip().split(";")[0])
    return 0


def wait_for_nodes(head: str, nodes: int, timeout: float, head_pid: int) -> int:
    """Inside the job: wait until the Ray cluster at ``head`` has ``nodes`` alive nodes
    (0), the head's ``ray start`` (``head_pid``) died (1), or ``timeout`` passed (2)."""
    import ray

    deadline = time.time() + timeout
    alive: list[str] = []
    try:
        while time.time() < deadline:
            if not os.path.exists(f"/proc/{head_pid}"):
                print(f"{PROG}: the Ray head exited before {nodes} node(s) joined", file=sys.stderr)
                return 1
            with contextlib.suppress(Exception):  # not up yet: OSError, or Ray's ConnectionError/RuntimeError
                if not ray.is_initialized():
                    host, port = head.rsplit(":", 1)
                    socket.create_connection((host, int(port)), timeout=5).close()  # the GCS listens
                    ray.init(address=head, log_to_driver=False, logging_level="ERROR")
                alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive"))
                if len(alive) >= nodes:
                    print(f"{PROG}: {len(alive)} Ray node(s) up: {' '.join(alive)}", file=sys.stderr)
                    return 0
            time.sleep(1)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    print(f"{PROG}: {len(alive)} of {nodes} Ray node(s) up after {timeout:.0f} s", file=sys.stderr)
    return 2


# the sbatch script: python -m study.commands.slurm wait HEAD NODES TIMEOUT HEAD_PID
if __name__ == "__main__":
    if sys.argv[1:2] != ["wait"] or len(sys.argv) != 6:
        sys.exit(f"usage: python -m {__spec__.name} wait HEAD NODES TIMEOUT HEAD_PID")
    sys.exit(wait_for_nodes(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
