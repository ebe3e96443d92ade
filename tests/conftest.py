import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from study.models.encodings import PAPER_ENCODINGS, REGISTRY, variants

# (encoding, isotropic) pairs: every attention variant of the paper (the tests of its
# layer, study.models.attention.RelativeSelfAttention, and its fast paths)
VARIANTS = [("quadratic", True), ("quadratic", False), ("learned", None), ("learned_content", None)]
VARIANT_IDS = ["quadratic-iso", "quadratic-noniso", "learned", "learned_content"]

assert {e for e, _ in VARIANTS} == set(PAPER_ENCODINGS)

#: (id, ModelConfig overrides) of every form of every registered encoding, the paper's and
#: today's (study.models.encodings): tests of the model, training and tables use these
ENCODING_VARIANTS = variants()
ENCODING_VARIANT_IDS = [vid for vid, _ in ENCODING_VARIANTS]

assert {v["encoding"] for _, v in ENCODING_VARIANTS} == set(REGISTRY)


_USER_DIRS = {}


def pytest_configure(config):
    """Each pytest process (each ``pytest-xdist`` worker) keeps the per-user files the
    code writes (the HMAC key under ``$XDG_CONFIG_HOME``; the data and Optuna caches
    under ``$STUDY_CACHE_DIR``) in a folder of its own, inherited by the CLI processes
    and Ray workers it starts: the suite never writes into the user's home, and two
    workers never create one key file or cache entry at once.  Tests that need their
    own set theirs with ``monkeypatch``."""
    base = tempfile.mkdtemp(prefix="study-tests-")
    _USER_DIRS["base"] = base
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("STUDY_CACHE_DIR", "cache")):
        os.environ[var] = os.path.join(base, sub)
    # Each xdist worker's share of the CPUs, for torch here and (by OMP_NUM_THREADS) in the
    # CLI processes it starts: torch's default, a thread per core in every worker, puts
    # workers x cores OpenMP threads on the cores, whose spin-waits slowed a one-thread
    # epoch of `study train` from 18 s to 111 s beside the other worker (measured).
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


#: each test file's seconds in a measured run (tests/file_seconds.py writes it)
FILE_SECONDS = json.loads((Path(__file__).with_name("file_seconds.json")).read_text())


def pytest_collection_modifyitems(config, items):
    """The longest test files first, each file's tests in their order.  ``-n`` runs each file whole
    on one worker (``--dist loadfile``, ``--no-loadscope-reorder``) in this order: pytest-xdist's own
    order, most tests first, started the Ray files (few tests, minutes each) last, and the suite
    waited ten minutes on one of them after the others had ended.  A file not measured yet goes
    first, with the longest."""
    longest = max(FILE_SECONDS.values(), default=0.0)
    seconds = {item.nodeid.split("::")[0] for item in items}
    seconds = {f: FILE_SECONDS.get(f, longest) for f in seconds}
    items.sort(key=lambda item: -seconds[item.nodeid.split("::")[0]])


def pytest_unconfigure(config):
    base = _USER_DIRS.pop("base", None)
    if base:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=VARIANTS, ids=VARIANT_IDS)
def variant(request):
    """The paper's (encoding, isotropic) pairs."""
    return request.param


@pytest.fixture(params=[v for _, v in ENCODING_VARIANTS], ids=ENCODING_VARIANT_IDS)
def encoding_variant(request):
    """ModelConfig overrides of one form of one registered encoding (every encoding)."""
    return dict(request.param)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def s3():
    """A local S3-compatible server (moto, 127.0.0.1, free port) with a bucket
    ``studies``; its ``AWS_ENDPOINT_URL`` and dummy credentials are in this process's
    environment (and so in the CLI processes tests start) while the module runs.  One
    per module and per xdist worker (``--dist loadfile`` keeps a module on one worker)."""
    pytest.importorskip("moto")
    from tests.s3_server import LocalS3

    with LocalS3() as server:
        server.make_bucket("studies")
        saved = {k: os.environ.get(k) for k in server.env}
        os.environ.update(server.env)  # this process reads the bucket too
        try:
            yield server
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs (needs root and mount permission: skipped elsewhere)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: " + r.stderr.decode().strip())
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.fixture
def study_in_process(capsys, monkeypatch, tmp_path):
    """``study ARGS`` in this process (refusals, and commands that need no Ray: ``train``,
    ``models``, ``theorem``): ``run(*args)`` gives (exit status, stdout, stderr lines, CPU
    seconds of the thread that ran it: threads and objects an earlier test left in this worker do
    not count); starting Ray fails the test."""
    import gc
    import time

    from study.cli import main
    from study.tuning import runner

    def no_ray(*a, **k):
        raise AssertionError("a refused study started Ray")

    monkeypatch.setattr(runner, "init_ray", no_ray)
    monkeypatch.setenv("STUDY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)

    def run(*args):
        capsys.readouterr()
        # objects earlier tests left in this worker are frozen (gc.freeze: constant time), so a
        # collection the command triggers scans only its own: a full one over 6 M objects takes
        # 0.6 s of CPU here, more than a refusal's budget
        gc.freeze()
        t0 = time.thread_time()
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
        finally:
            gc.unfreeze()
        cpu = time.thread_time() - t0
        out, err = capsys.readouterr()
        return code, out, err.strip().splitlines(), cpu

    return run


@pytest.fixture
def study_here(study_in_process):
    """``study ARGS`` in this process, as ``subprocess.run`` reports a CLI run (no interpreter
    start-up per call): ``run(*args)`` gives ``.returncode``, ``.stdout``, ``.stderr``."""
    from types import SimpleNamespace

    def run(*args):
        code, out, err, _ = study_in_process(*args)
        return SimpleNamespace(returncode=code or 0, stdout=out, stderr="\n".join(err))

    return run
