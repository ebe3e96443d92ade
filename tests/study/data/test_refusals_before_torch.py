"""A data source refused from its arguments, its files' metadata or Pillow's reading of its images is
refused in one line, exit 2, before torch is imported and in well under a second of CPU (issue 45,
finding 2: 2.5-3.4 s and ~700 MB each when torch decoded the images first), and leaves nothing in
``$STUDY_CACHE_DIR`` (finding 3: a subset larger than the source was refused after the decoded source
was cached).  Every case runs in one fresh interpreter that never imports torch: each command in a
forked child of it, whose CPU time is counted with the interpreter's start-up and ``study.cli`` import."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.data_helpers import image_array, make_cifar_python, make_tar, make_tree, write_image
from tests.helpers import TINY, cli_env

#: runs each case (argv, cwd, cache folder) in a fork of one torch-free interpreter; prints one JSON line
#: per case: exit status, stderr, whether torch was imported, CPU seconds (start-up and import included)
RUNNER = r"""
import json, os, resource, sys
def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
from study.cli import main
started = cpu()
for case in json.loads(sys.argv[1]):
    err = os.path.join(case["cwd"], "stderr.txt")
    pid = os.fork()
    if pid == 0:  # (a forked child's CPU time starts at 0)
        os.chdir(case["cwd"])
        os.environ["STUDY_CACHE_DIR"] = case["cache"]
        fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            code = main(case["argv"])
        except SystemExit as e:
            code = e.code
        sys.stderr.flush()
        with open(os.path.join(case["cwd"], "probe.json"), "w") as f:
            json.dump({"code": code, "torch": "torch" in sys.modules, "cpu": started + cpu()}, f)
        os._exit(0)
    os.waitpid(pid, 0)
    with open(os.path.join(case["cwd"], "probe.json")) as f:
        probe = json.load(f)
    with open(err) as f:
        probe["stderr"] = f.read()
    print(json.dumps({"id": case["id"], **probe}), flush=True)
"""


def _bad_tree(root: Path, bad: str) -> Path:
    """A good tree with one more training image, ``bad``: grey, palette, RGBA, zero-byte or damaged."""
    make_tree(root)
    path = root / "train" / "cat" / "bad.png"
    if bad == "grey":
        write_image(path, image_array(9, channels=1))
    elif bad == "palette":
        Image.fromarray(image_array(9)).convert("P").save(path)
    elif bad == "rgba":
        write_image(path, image_array(9, channels=4))
    elif bad == "zero-byte":
        path.write_bytes(b"")
    elif bad == "damaged":  # cut short
        path.write_bytes((root / "train" / "cat" / "00.png").read_bytes()[:200])
    return root


BAD_IMAGES = ("grey", "palette", "rgba", "zero-byte", "damaged")
#: id -> (argv after `study`, what the refusal names); {x} are paths made in the case's folder
CASES = {
    **{
        f"{bad}-{form}": (
            ["train", "--data", f"{{{bad}-{form}}}", "--out", "out", "--epochs", "1"],
            "bad.png",
        )
        for bad in BAD_IMAGES
        for form in ("tree", "tar")
    },
    "grey-evaluate": (["evaluate", "model.pt", "--data", "{grey-tree}"], "bad.png"),
    "grey-run": (["run", "{grey-study}", "--storage", "st"], "bad.png"),
    # refused after decoding on the landed code (the cache entry stayed: finding 3)
    "subset-over-source": (
        ["train", "--data", "{good-tree}", "--subset", "5000", "--out", "out"],
        "subset 5000",
    ),
    "subset-over-archive": (["train", "--data", "{good-tar}", "--subset", "13", "--out", "out"], "subset 13"),
    "validation-equal-to-training": (
        ["train", "--data", "{good-tree}", "--validation", "12", "--out", "out"],
        "--validation: 12 held-out",
    ),
    "validation-equal-to-subset": (
        ["train", "--data", "{good-tar}", "--subset", "10", "--validation", "10", "--out", "out"],
        "--validation: 10 held-out",
    ),
    "batch-over-training": (
        ["train", "--data", "{good-tree}", "--batch-size", "13", "--out", "out"],
        "--batch-size: 13 images per step",
    ),
    "batch-over-synthetic": (
        ["train", "--data", "synthetic:10", "--validation", "2", "--batch-size", "9", "--out", "out"],
        "--batch-size: 9 images per step",
    ),
    "subset-over-study-source": (["run", "{subset-study}", "--storage", "st"], "subset 5000"),
    "evaluate-subset-over-source": (
        ["evaluate", "model.pt", "--data", "{good-tree}", "--subset", "13"],
        "subset 13",
    ),
    "cifar10-download-fails": (["train", "--data", "cifar10:", "--out", "out"], "downloading CIFAR-10"),
    "cifar10-pickle-refused": (
        ["train", "--data", "cifar10:{cifar}", "--out", "out"],
        "refusing to load os.system",
    ),
    # a 1 MB gzip declaring and holding a 1 GiB image: refused at its header (3.2 s CPU decompressing it
    # before)
    "member-over-image-limit": (
        ["train", "--data", "{bomb}", "--out", "out"],
        "train/a/zeros.png: 1073741824 bytes, more than the limit of 16777216",
    ),
}


def _bomb(path: Path) -> Path:
    """A gzip'd tar whose image member declares and holds 1 GiB of zeros: 1,024 gzip streams of 1 MiB each."""
    info = tarfile.TarInfo("train/a/zeros.png")
    info.size = 2**30
    mib = gzip.compress(bytes(2**20))
    with open(path, "wb") as f:
        f.write(gzip.compress(info.tobuf(format=tarfile.USTAR_FORMAT)))
        f.write(mib * 1024)
        f.write(gzip.compress(bytes(1024)))
    return path


def _sources(base: Path) -> dict[str, str]:
    made = {}
    for bad in BAD_IMAGES:
        tree = _bad_tree(base / f"{bad}-tree", bad)
        made[f"{bad}-tree"] = str(tree)
        made[f"{bad}-tar"] = str(make_tar(tree, base / f"{bad}.tar.gz"))
    make_tree(base / "good-tree")
    made["good-tree"] = str(base / "good-tree")
    made["good-tar"] = str(make_tar(base / "good-tree", base / "good.tar"))
    make_cifar_python(base / "cifar")
    (base / "cifar" / "cifar-10-batches-py" / "test_batch").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    made["cifar"] = str(base / "cifar")
    for name, doc in (
        ("grey-study", {"data": made["grey-tree"]}),
        ("subset-study", {"data": made["good-tree"], "subset": 5000}),
    ):
        (base / f"{name}.yaml").write_text(
            yaml.safe_dump({"name": name, "epochs": 1, "batch_size": 2, "model": TINY, **doc})
        )
        made[name] = str(base / f"{name}.yaml")
    (base / "model.pt").write_bytes(b"not read: the data is refused first")
    made["bomb"] = str(_bomb(base / "bomb.tar.gz"))
    return made


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("refusals")
    made = _sources(base / "sources")
    cases = []
    for case, (argv, _) in CASES.items():
        cwd = base / case
        cwd.mkdir()
        (cwd / "model.pt").write_bytes((base / "sources" / "model.pt").read_bytes())
        cases.append(
            {
                "id": case,
                "cwd": str(cwd),
                "cache": str(cwd / "cache"),
                "argv": [a.format(**made) for a in argv],
            }
        )
    # an unreachable mirror: a CIFAR-10 download fails at once, and never downloads anything
    return outcomes_in_forks(
        cases, base=base, env={"STUDY_CIFAR10_URL": "http://127.0.0.1:9/cifar-10-python.tar.gz"}
    )


def outcomes_in_forks(cases: list[dict], *, base: Path, env: dict | None = None) -> dict[str, dict]:
    """Each case run by :data:`RUNNER` in a fork of one torch-free interpreter: its outcome by id."""
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(env),
    )
    assert r.returncode == 0, r.stderr
    return {o["id"]: {**o, "cwd": base / o["id"]} for o in map(json.loads, r.stdout.splitlines())}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_source_is_one_line_before_torch_and_leaves_no_cache_entry(outcomes, case):
    o = outcomes[case]
    lines = o["stderr"].splitlines()
    command = CASES[case][0][0]
    assert o["code"] == 2 and len(lines) == 1 and lines[0].startswith(f"study {command}: error: "), o
    assert CASES[case][1] in lines[0], lines[0]
    assert o["torch"] is False, o
    assert o["cpu"] < 1.0, o
    cache = o["cwd"] / "cache"
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))
    assert not (o["cwd"] / "out").exists() and not (o["cwd"] / "st").exists()


# ------------------------------------------------- the Pillow check refuses what the decoder refuses
def _encoded(kind: str) -> bytes:
    rgb = Image.fromarray(image_array(5))
    frames = {"append_images": [rgb.rotate(90)], "save_all": True}
    made = {
        "png-rgb": (rgb, "PNG", {}),
        "png-grey": (rgb.convert("L"), "PNG", {}),
        "png-grey-alpha": (rgb.convert("LA"), "PNG", {}),
        "png-palette": (rgb.convert("P"), "PNG", {}),
        "png-rgba": (rgb.convert("RGBA"), "PNG", {}),
        "png-1bit": (rgb.convert("1"), "PNG", {}),
        "png-rgb-transparent": (rgb, "PNG", {"transparency": (0, 0, 0)}),
        "apng": (rgb, "PNG", frames),
        "jpeg-rgb": (rgb, "JPEG", {}),
        "jpeg-grey": (rgb.convert("L"), "JPEG", {}),
        "jpeg-cmyk": (rgb.convert("CMYK"), "JPEG", {}),
        "gif": (rgb, "GIF", {}),
        "gif-grey": (rgb.convert("L"), "GIF", {}),
        "gif-animated": (rgb, "GIF", frames),
        "webp": (rgb, "WEBP", {"lossless": True}),
        "webp-rgba": (rgb.convert("RGBA"), "WEBP", {"lossless": True}),
        "webp-animated": (rgb, "WEBP", {**frames, "lossless": True}),
        "bmp-rgb": (rgb, "BMP", {}),
        "bmp-palette": (rgb.convert("P"), "BMP", {}),
        "tiff-rgb": (rgb, "TIFF", {}),
        "tiff-rgba": (rgb.convert("RGBA"), "TIFF", {}),
        "ppm": (rgb, "PPM", {}),
        "png-64x32": (rgb.resize((64, 32)), "PNG", {}),
        "jpeg-16x16": (rgb.resize((16, 16)), "JPEG", {}),
    }
    if kind in made:
        im, fmt, kw = made[kind]
        buf = io.BytesIO()
        im.save(buf, format=fmt, **kw)
        return buf.getvalue()
    good = _encoded("png-rgb" if kind.startswith("png") else "jpeg-rgb")
    return {
        "png-cut": good[: len(good) // 2],
        "jpeg-cut": good[: len(good) // 2],
        "garbage": b"GIF87a?" * 9,
        "zero-byte": b"",
    }[kind]


FORMS = [
    "png-rgb",
    "png-grey",
    "png-grey-alpha",
    "png-palette",
    "png-rgba",
    "png-1bit",
    "png-rgb-transparent",
    "apng",
    "jpeg-rgb",
    "jpeg-grey",
    "jpeg-cmyk",
    "gif",
    "gif-grey",
    "gif-animated",
    "webp",
    "webp-rgba",
    "webp-animated",
    "bmp-rgb",
    "bmp-palette",
    "tiff-rgb",
    "tiff-rgba",
    "ppm",
    "png-64x32",
    "jpeg-16x16",
    "png-cut",
    "jpeg-cut",
    "garbage",
    "zero-byte",
]
EXTENSION = {
    "png": "png",
    "apng": "png",
    "jpeg": "jpg",
    "gif": "gif",
    "webp": "webp",
    "bmp": "bmp",
    "tiff": "tif",
    "ppm": "ppm",
    "garbage": "gif",
    "zero": "png",
}


@pytest.mark.parametrize("form", FORMS)
def test_the_pillow_check_refuses_exactly_what_decoding_refuses(tmp_path, form):
    """check_source (Pillow, no torch) and load_splits (the tensor decoder) agree on every image form:
    a check that refused more would refuse a source that trains; one that refused less, pay for torch."""
    from study.data import DataError, load_splits
    from study.data.sources import check_source

    make_tree(tmp_path / "src", n_train=1, n_test=1, classes=("a", "b"))
    (tmp_path / "src" / "train" / "a" / f"x.{EXTENSION[form.split('-')[0]]}").write_bytes(_encoded(form))
    outcome = {}
    for name, check in (
        ("pillow", check_source),
        ("decoder", lambda d: load_splits(d, cache_dir=tmp_path / "c")),
    ):
        try:
            check(str(tmp_path / "src"))
            outcome[name] = "accepted"
        except DataError as e:
            outcome[name] = str(e)
    assert outcome["pillow"] == outcome["decoder"] or "damaged image" in outcome["decoder"], outcome
