"""The data layer: sources, errors, content-keyed cache, subsets, synthetic data, device pipeline."""

from __future__ import annotations

import shutil
import sys
import tarfile
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from study.data import (
    CIFAR_MEAN,
    CIFAR_STD,
    DataError,
    DeviceData,
    Splits,
    augment,
    epoch_plan,
    load_splits,
    make_synthetic,
    stratified_subset,
)
from study.data import decode as decode_mod
from tests.data_helpers import image_array, jpeg_bytes, make_cifar_python, make_tar, make_tree, write_image


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def load(spec, cache, **kw) -> Splits:
    return load_splits(str(spec), cache_dir=cache, **kw)


def error_of(spec, cache, **kw) -> str:
    with pytest.raises(DataError) as info:
        load(spec, cache, **kw)
    msg = str(info.value)
    assert "\n" not in msg and msg.strip() == msg
    return msg


def as_chw(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(arr)).permute(2, 0, 1)


# ---------------------------------------------------------------- image folders


def test_tree_loads_images_labels_and_sorted_classes(tmp_path, cache):
    written = make_tree(tmp_path / "d", classes=("frog", "cat", "dog"), n_train=3, n_test=2)
    s = load(tmp_path / "d", cache)
    assert s.classes == ("cat", "dog", "frog")
    assert s.train_images.dtype == torch.uint8 and s.train_images.shape == (9, 3, 32, 32)
    assert s.train_labels.dtype == torch.int64 and s.train_labels.tolist() == [0] * 3 + [1] * 3 + [2] * 3
    assert s.test_labels.tolist() == [0, 0, 1, 1, 2, 2]
    # PNG is lossless: the tensors are exactly the pixels written, in (class, name) order
    assert torch.equal(s.train_images[0], as_chw(written["train/cat/00.png"]))
    assert torch.equal(s.train_images[8], as_chw(written["train/frog/02.png"]))
    assert torch.equal(s.test_images[3], as_chw(written["test/dog/01.png"]))
    assert "image folder" in s.source and str(tmp_path / "d") in s.source


@pytest.mark.parametrize(
    "mode,fmt,wrapper",
    [
        ("w:gz", tarfile.PAX_FORMAT, None),
        ("w", tarfile.USTAR_FORMAT, None),
        ("w:gz", tarfile.GNU_FORMAT, "wrap"),
        ("w:bz2", tarfile.PAX_FORMAT, "cifar"),
        ("w:xz", tarfile.USTAR_FORMAT, None),
    ],
    ids=["tgz-pax", "tar-ustar", "tgz-gnu-wrapped", "bz2-wrapped", "xz"],
)
def test_archive_equals_directory_tree(tmp_path, cache, mode, fmt, wrapper):
    make_tree(tmp_path / "d", ext="jpg")
    tree = load(tmp_path / "d", cache)
    arch = load(make_tar(tmp_path / "d", tmp_path / "d.tar.x", wrapper=wrapper, mode=mode, format=fmt), cache)
    for field in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(tree, field), getattr(arch, field)), field
    assert arch.classes == tree.classes == ("cat", "dog", "frog")
    assert "image archive" in arch.source


def test_jpeg_decoding_matches_pil(tmp_path, cache):
    arr = image_array(7)
    for split in ("train", "test"):
        for cls in ("a", "b"):  # two classes: a one-class source is refused
            (tmp_path / "d" / split / cls).mkdir(parents=True)
            (tmp_path / "d" / split / cls / "0.jpg").write_bytes(jpeg_bytes(arr))
    from PIL import Image

    ref = np.asarray(Image.open(tmp_path / "d" / "train" / "a" / "0.jpg").convert("RGB"))
    s = load(tmp_path / "d", cache)
    assert torch.equal(s.train_images[0], as_chw(ref))


def test_formats_torchvision_cannot_read_fall_back_to_pil(tmp_path, cache):
    written = make_tree(tmp_path / "d", ext="bmp", n_train=1, n_test=1)
    s = load(tmp_path / "d", cache)
    assert torch.equal(s.train_images[2], as_chw(written["train/frog/00.bmp"]))


def test_hidden_and_non_image_files_are_ignored(tmp_path, cache):
    make_tree(tmp_path / "d")
    (tmp_path / "d" / "train" / "cat" / "notes.txt").write_text("hello")
    (tmp_path / "d" / "train" / "cat" / ".hidden.png").write_bytes(b"junk")
    (tmp_path / "d" / "README.md").write_text("readme")
    s = load(tmp_path / "d", cache)
    assert len(s.train_labels) == 12


# ---------------------------------------------------------------- errors (one line, naming what is wrong)


def test_error_missing_path(tmp_path, cache):
    missing = tmp_path / "nope.tar.gz"
    assert error_of(missing, cache) == (
        f"{missing}: no such file or directory (use synthetic[:N_TRAIN], cifar10[:ROOT], "
        "an image-folder directory or a .tar/.tar.gz/.tgz archive of one)"
    )


def test_error_unknown_spec(cache):
    msg = error_of("imagenet:train", cache)
    assert msg.startswith("imagenet:train: unknown data source kind 'imagenet'")
    assert "synthetic" in msg and "cifar10" in msg


def test_error_bad_synthetic_size(cache):
    assert error_of("synthetic:lots", cache) == (
        "synthetic:lots: N_TRAIN must be an integer from 1 to 200000 (MAX_SYNTHETIC_TRAIN), got 'lots'"
    )


def test_error_empty_spec(cache):
    assert error_of("", cache).startswith("empty data source")


@pytest.mark.parametrize("as_archive", [False, True], ids=["tree", "archive"])
def test_error_no_train_and_test(tmp_path, cache, as_archive):
    write_image(tmp_path / "d" / "images" / "cat" / "0.png", image_array(0))
    write_image(tmp_path / "d" / "other" / "cat" / "0.png", image_array(0))
    src = make_tar(tmp_path / "d", tmp_path / "d.tgz") if as_archive else tmp_path / "d"
    assert error_of(src, cache) == (
        f"{src}: no train/ and test/ folders (expected train/<class>/<image> and test/<class>/<image>)"
    )


def test_error_missing_test_split_in_wrapped_archive(tmp_path, cache):
    make_tree(tmp_path / "d", n_test=0)
    src = make_tar(tmp_path / "d", tmp_path / "d.tgz", wrapper="top")
    assert error_of(src, cache).startswith(f"{src}: no top/test/ folder (expected")


@pytest.mark.parametrize("as_archive", [False, True], ids=["tree", "archive"])
def test_error_class_folders_differ(tmp_path, cache, as_archive):
    make_tree(tmp_path / "d", classes={"train": ("cat", "dog", "frog"), "test": ("cat", "dog", "yak")})
    src = make_tar(tmp_path / "d", tmp_path / "d.tar", mode="w") if as_archive else tmp_path / "d"
    assert error_of(src, cache) == (
        f"{src}: class folders differ between train/ and test/ (only in train: frog; only in test: yak)"
    )


def test_error_empty_class_folder(tmp_path, cache):
    make_tree(tmp_path / "d")
    (tmp_path / "d" / "test" / "emu").mkdir()
    (tmp_path / "d" / "train" / "emu").mkdir()
    assert error_of(tmp_path / "d", cache) == f"{tmp_path / 'd'}: train/emu/ holds no image files"


def test_error_image_outside_class_folder(tmp_path, cache):
    make_tree(tmp_path / "d")
    write_image(tmp_path / "d" / "test" / "stray.png", image_array(1))
    msg = error_of(tmp_path / "d", cache)
    assert msg.startswith(f"{tmp_path / 'd'}: test/stray.png: image outside a class folder")


@pytest.mark.parametrize("name", ["bad.jpg", "bad.png"])
@pytest.mark.parametrize("as_archive", [False, True], ids=["tree", "archive"])
def test_error_undecodable_file(tmp_path, cache, name, as_archive):
    make_tree(tmp_path / "d", ext="jpg")
    (tmp_path / "d" / "train" / "dog" / name).write_bytes(b"\xff\xd8\xff this is not really an image")
    src = make_tar(tmp_path / "d", tmp_path / "d.tgz", wrapper="w") if as_archive else tmp_path / "d"
    member = f"w/train/dog/{name}" if as_archive else f"train/dog/{name}"
    assert error_of(src, cache).startswith(f"{src}: {member}: cannot decode image (")


@pytest.mark.parametrize(
    "size,channels,expected",
    [
        ((16, 24), 3, "image is 16x24 with 3 channel(s)"),
        ((32, 32), 1, "image is 32x32 with 1 channel(s)"),
        ((32, 32), 4, "image is 32x32 with 4 channel(s)"),
    ],
)
def test_error_wrong_image_size(tmp_path, cache, size, channels, expected):
    make_tree(tmp_path / "d")
    write_image(tmp_path / "d" / "test" / "cat" / "odd.png", image_array(3, size=size, channels=channels))
    assert error_of(tmp_path / "d", cache) == (
        f"{tmp_path / 'd'}: test/cat/odd.png: {expected}, expected 32x32 with 3 (RGB)"
    )


def test_error_wrong_jpeg_size_in_batched_decode(tmp_path, cache):
    make_tree(tmp_path / "d", ext="jpg")
    (tmp_path / "d" / "train" / "cat" / "big.jpg").write_bytes(jpeg_bytes(image_array(4, size=(40, 30))))
    assert error_of(tmp_path / "d", cache) == (
        f"{tmp_path / 'd'}: train/cat/big.jpg: image is 40x30 with 3 channel(s), expected 32x32 with 3 (RGB)"
    )


def test_error_not_a_tar_archive(tmp_path, cache):
    junk = tmp_path / "data.tar"
    junk.write_bytes(bytes(range(256)) * 8)
    assert (
        error_of(junk, cache)
        == f"{junk}: not a tar archive or corrupt at byte 0 (no tar header at the start)"
    )


def test_error_corrupt_gzip(tmp_path, cache):
    make_tree(tmp_path / "d")
    arch = make_tar(tmp_path / "d", tmp_path / "d.tgz")
    arch.write_bytes(arch.read_bytes()[:200])
    assert error_of(arch, cache).startswith(f"{arch}: cannot decompress archive (")


def test_error_bad_subset(cache):
    assert (
        error_of("synthetic", cache, subset=0) == "subset must be a positive number of training images, got 0"
    )


# ---------------------------------------------------------------- cifar10 (python version)


def test_cifar10_reads_python_batches_without_download(tmp_path, cache, monkeypatch):
    monkeypatch.setenv(
        "STUDY_CIFAR10_URL", "http://127.0.0.1:9/cifar-10-python.tar.gz"
    )  # a download would fail
    tr_x, tr_y, te_x, te_y = make_cifar_python(tmp_path / "root")
    s = load(f"cifar10:{tmp_path / 'root'}", cache)
    assert s.classes == tuple("abcdefghij")
    assert torch.equal(s.train_images, torch.from_numpy(tr_x).view(-1, 3, 32, 32))
    assert s.train_labels.tolist() == tr_y.tolist() and s.train_labels.dtype == torch.int64
    assert torch.equal(s.test_images, torch.from_numpy(te_x).view(-1, 3, 32, 32))
    assert s.test_labels.tolist() == te_y.tolist()
    assert "CIFAR-10" in s.source


def test_cifar10_download_failure_is_one_line(tmp_path, cache, monkeypatch):
    monkeypatch.setenv(
        "STUDY_CIFAR10_URL", "http://127.0.0.1:9/cifar-10-python.tar.gz"
    )  # nothing listens there
    # a mistyped ROOT is refused before anything is created (the folder tree was the bug)
    assert error_of(f"cifar10:{tmp_path / 'c'}", cache) == (
        f"cifar10:{tmp_path / 'c'}: {tmp_path / 'c'} is not a folder (create it to download CIFAR-10 into it)"
    )
    assert not (tmp_path / "c").exists()
    (tmp_path / "c").mkdir()
    msg = error_of(f"cifar10:{tmp_path / 'c'}", cache)
    assert list((tmp_path / "c").iterdir()) == [], "a failed download leaves no partial file behind"
    assert msg.startswith(
        f"cifar10: {tmp_path / 'c' / 'cifar-10-batches-py'} is missing and downloading "
        f"CIFAR-10 into {tmp_path / 'c'} failed (no network?): "
    )
    # default root lives under the cache dir
    msg = error_of("cifar10", cache)
    assert f"into {cache / 'cifar10'} failed" in msg
    assert not (cache / "cifar10").exists(), "a failed download leaves no empty folder behind"


def test_cifar10_refuses_foreign_pickles(tmp_path, cache):
    make_cifar_python(tmp_path / "root")
    evil = tmp_path / "root" / "cifar-10-batches-py" / "test_batch"
    evil.write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    assert error_of(f"cifar10:{tmp_path / 'root'}", cache) == (
        f"{evil}: not a CIFAR-10 python batch file (refusing to load os.system)"
    )


# ---------------------------------------------------------------- cache


def counting_decoder(monkeypatch):
    calls = []
    real = decode_mod.decode_images

    def wrapped(*a, **k):
        calls.append(len(a[1]))
        return real(*a, **k)

    monkeypatch.setattr(decode_mod, "decode_images", wrapped)
    return calls


def forbid_decoding(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("decoded again despite the cache")

    monkeypatch.setattr(decode_mod, "decode_images", boom)


@pytest.mark.parametrize("as_archive", [False, True], ids=["tree", "archive"])
def test_second_load_uses_the_cache(tmp_path, cache, monkeypatch, as_archive):
    make_tree(tmp_path / "d", ext="jpg")
    src = make_tar(tmp_path / "d", tmp_path / "d.tgz") if as_archive else tmp_path / "d"
    calls = counting_decoder(monkeypatch)
    first = load(src, cache)
    assert calls == [12, 6]
    files = list(cache.glob("*.pt"))
    assert len(files) == 1 and not list(cache.glob("*.tmp"))
    forbid_decoding(monkeypatch)
    second = load(src, cache)
    assert torch.equal(first.train_images, second.train_images) and first.classes == second.classes
    assert torch.equal(first.test_labels, second.test_labels) and second.source == first.source


def test_cache_key_follows_content(tmp_path, cache, monkeypatch):
    make_tree(tmp_path / "d")
    before = load(tmp_path / "d", cache)
    key_before = {p.name for p in cache.glob("*.pt")}
    write_image(tmp_path / "d" / "train" / "dog" / "01.png", image_array(99))
    calls = counting_decoder(monkeypatch)
    after = load(tmp_path / "d", cache)
    assert calls == [12, 6]  # decoded again
    keys = {p.name for p in cache.glob("*.pt")}
    assert len(keys) == 2 and key_before < keys
    changed = (before.train_images != after.train_images).flatten(1).any(1)
    assert changed.tolist() == [i == 5 for i in range(12)]
    assert torch.equal(after.train_images[5], as_chw(image_array(99)))


def test_renaming_a_file_changes_the_key(tmp_path, cache):
    make_tree(tmp_path / "d")
    load(tmp_path / "d", cache)
    (tmp_path / "d" / "train" / "cat" / "00.png").rename(tmp_path / "d" / "train" / "cat" / "zz.png")
    s = load(tmp_path / "d", cache)
    assert len(list(cache.glob("*.pt"))) == 2
    assert torch.equal(s.train_images[3], as_chw(image_array(0)))  # now sorted last in its class


def test_corrupt_cache_file_is_rebuilt(tmp_path, cache, monkeypatch):
    make_tree(tmp_path / "d")
    first = load(tmp_path / "d", cache)
    (path,) = cache.glob("*.pt")
    path.write_bytes(b"truncated")
    calls = counting_decoder(monkeypatch)
    again = load(tmp_path / "d", cache)
    assert calls == [12, 6] and torch.equal(first.train_images, again.train_images)
    assert path.stat().st_size > 1000


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl locks")
def test_concurrent_load_waits_for_the_builder_then_uses_its_cache(tmp_path, cache, monkeypatch):
    import fcntl

    make_tree(tmp_path / "d")
    load(tmp_path / "d", tmp_path / "elsewhere")
    (built,) = (tmp_path / "elsewhere").glob("*.pt")
    cache.mkdir()
    lock = open(cache / f"{built.name}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # "another trial" is decoding the same source
    forbid_decoding(monkeypatch)
    result = {}
    waiter = threading.Thread(target=lambda: result.update(splits=load(tmp_path / "d", cache)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # blocked on the lock, not decoding
    shutil.copy(built, cache / built.name)  # the other trial finishes its cache file
    lock.close()
    waiter.join(30)
    assert result["splits"].train_images.shape == (12, 3, 32, 32)


def test_default_cache_dir_from_environment(tmp_path, monkeypatch):
    make_tree(tmp_path / "d")
    monkeypatch.setenv("STUDY_CACHE_DIR", str(tmp_path / "envcache"))
    load_splits(str(tmp_path / "d"))
    assert len(list((tmp_path / "envcache").glob("imagefolder-*.pt"))) == 1


def test_unwritable_cache_still_loads(tmp_path, monkeypatch):
    make_tree(tmp_path / "d")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    s = load_splits(str(tmp_path / "d"), cache_dir=blocker / "sub")
    assert s.train_images.shape == (12, 3, 32, 32)


def test_progress_lines(tmp_path, cache, monkeypatch):
    import study.data.imagefolder as imagefolder

    make_tree(tmp_path / "d")
    monkeypatch.setattr(imagefolder, "PROGRESS_MIN_IMAGES", 1)  # as if it were a large source
    lines: list[str] = []
    load_splits(str(tmp_path / "d"), cache_dir=cache, progress=lines.append)
    assert lines[0] == f"decoding 12 train images of {tmp_path / 'd'}" and "cached in" in lines[-1]
    lines.clear()
    load_splits(str(tmp_path / "d"), cache_dir=cache, progress=lines.append)
    assert lines == []


def test_parallel_decoding_equals_serial(tmp_path):
    arrays = [image_array(i) for i in range(40)]
    blobs = [jpeg_bytes(a) for a in arrays]
    buf = b"".join(blobs)
    items, off = [], 0
    for i, b in enumerate(blobs):
        items.append((f"f{i}.jpg", off, len(b)))
        off += len(b)
    monkey_chunk = 7
    old = decode_mod._CHUNK
    decode_mod._CHUNK = monkey_chunk
    try:
        seen = []
        one = decode_mod.decode_images(
            buf, items, source="s", workers=1, progress=lambda d, n: seen.append((d, n))
        )
        two = decode_mod.decode_images(buf, items, source="s", workers=3)
    finally:
        decode_mod._CHUNK = old
    assert torch.equal(one, two) and one.shape == (40, 3, 32, 32)
    assert seen == [(7, 40), (14, 40), (21, 40), (28, 40), (35, 40), (40, 40)]


# ---------------------------------------------------------------- subsets and synthetic data


def test_subset_is_deterministic_and_stratified(cache):
    a = load("synthetic", cache, subset=50, seed=1)
    b = load("synthetic", cache, subset=50, seed=1)
    c = load("synthetic", cache, subset=50, seed=2)
    assert torch.equal(a.train_images, b.train_images) and torch.equal(a.test_labels, b.test_labels)
    assert not torch.equal(a.train_images, c.train_images)
    assert torch.bincount(a.train_labels, minlength=10).tolist() == [5] * 10
    # test keeps max(k // 5, 100) = 100 images, stratified too
    assert torch.bincount(a.test_labels, minlength=10).tolist() == [10] * 10
    assert a.source == "synthetic (2000 train / 500 test), subset 50 train / 100 test (seed 1)"
    # a subset is a subset: every kept image occurs in the full split
    full = load("synthetic", cache)
    flat = full.train_images.flatten(1)
    assert all((flat == img.flatten()).all(1).any() for img in a.train_images)


def test_subset_test_size_rule(cache):
    assert len(load("synthetic", cache, subset=1000).test_labels) == 200  # k // 5
    assert len(load("synthetic:3000", cache, subset=3000).test_labels) == 500  # all of the test split
    assert len(load("synthetic", cache, subset=2000).train_labels) == 2000  # k == N keeps all
    # k > N is refused: training on fewer images than the recorded subset was the bug
    assert error_of("synthetic", cache, subset=2001) == (
        "synthetic: subset 2001 is more than the 2000 training images of this source"
    )


def test_stratified_subset_with_uneven_classes():
    labels = torch.tensor([0] * 2 + [1] * 10 + [2] * 10)
    keep = stratified_subset(labels, k=12, generator=torch.Generator().manual_seed(0))
    assert keep.tolist() == sorted(set(keep.tolist())) and len(keep) == 12
    assert torch.bincount(labels[keep]).tolist() == [2, 5, 5]


def test_synthetic_is_deterministic_and_balanced(cache):
    a, b = make_synthetic(seed=3), make_synthetic(seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], make_synthetic(seed=4)[0])
    s = load("synthetic", cache)
    assert s.train_images.shape == (2000, 3, 32, 32) and s.test_images.shape == (500, 3, 32, 32)
    assert s.train_images.dtype == torch.uint8 and s.train_labels.dtype == torch.int64
    assert torch.bincount(s.train_labels).tolist() == [200] * 10 and len(s.classes) == 10
    assert torch.equal(s.train_images, make_synthetic()[0])  # the spec's data do not depend on seed=
    small = load("synthetic:300", cache)
    assert len(small.train_labels) == 300 and torch.equal(small.test_images, s.test_images)


def test_synthetic_class_is_in_colour_and_in_space():
    tr_x, tr_y, te_x, te_y = (t.float() if t.dtype == torch.uint8 else t for t in make_synthetic())
    # global colour statistics alone: nearest class mean of the per-image channel means
    col_tr, col_te = tr_x.mean((2, 3)), te_x.mean((2, 3))
    centres = torch.stack([col_tr[tr_y == k].mean(0) for k in range(10)])
    colour_acc = (torch.cdist(col_te, centres).argmin(1) == te_y).float().mean()
    # spatial structure alone: per-image colour removed, correlation with class templates
    sp_tr = tr_x - tr_x.mean((2, 3), keepdim=True)
    sp_te = (te_x - te_x.mean((2, 3), keepdim=True)).flatten(1)
    templates = torch.stack([sp_tr[tr_y == k].mean(0) for k in range(10)]).flatten(1)
    spatial_acc = ((sp_te @ templates.T).argmax(1) == te_y).float().mean()
    assert colour_acc > 0.35 and spatial_acc > 0.35  # chance is 0.10


# ---------------------------------------------------------------- device pipeline


def numbered(n: int) -> DeviceData:
    """n random images whose label is their index, so batches reveal which samples they hold."""
    g = torch.Generator().manual_seed(0)
    return DeviceData(torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g), torch.arange(n))


def normalised(x: torch.Tensor) -> torch.Tensor:
    mean, std = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1), torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return (x.float() / 255 - mean) / std


def test_eval_batches_are_sequential_normalised_and_complete():
    d = numbered(23)
    batches = list(d.batches(batch_size=10, train=False))
    assert [len(y) for _, y in batches] == [10, 10, 3] == [len(x) for x, _ in batches]
    assert d.num_batches(batch_size=10, train=False) == 3
    x = torch.cat([b[0] for b in batches])
    assert x.dtype == torch.float32 and x.shape == (23, 3, 32, 32)
    assert torch.cat([b[1] for b in batches]).tolist() == list(range(23))
    assert batches[0][1].dtype == torch.int64
    torch.testing.assert_close(x, normalised(d.images), rtol=0, atol=1e-5)


def test_train_epoch_sees_every_sample_once():
    d = numbered(40)
    ys = torch.cat([y for _, y in d.batches(batch_size=8, epoch=0, seed=0, train=True)])
    assert sorted(ys.tolist()) == list(range(40)) and ys.tolist() != list(range(40))
    d = numbered(43)  # last incomplete batch dropped: 5 steps of 8, no repeats
    ys = [y for _, y in d.batches(batch_size=8, epoch=0, seed=0, train=True)]
    assert len(ys) == 5 == d.num_batches(batch_size=8, train=True)
    assert len(set(torch.cat(ys).tolist())) == 40


def test_epochs_and_seeds_differ_but_repeat_exactly():
    d = numbered(32)

    def epoch(e, s):
        return [(x, y) for x, y in d.batches(batch_size=8, epoch=e, seed=s, train=True)]

    a, again, b, other_seed = epoch(0, 0), epoch(0, 0), epoch(1, 0), epoch(0, 1)
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, again))
    order = lambda ep: torch.cat([y for _, y in ep]).tolist()  # noqa: E731
    assert order(a) != order(b) and order(a) != order(other_seed)


def test_crop_and_flip_match_a_manual_augmentation():
    d = numbered(64)
    plan = epoch_plan(64, seed=5, epoch=2)
    x, y = next(d.batches(batch_size=64, epoch=2, seed=5, train=True))
    assert y.tolist() == plan.order.tolist()
    assert plan.flips.any() and not plan.flips.all()
    assert (
        (plan.offsets != 4).any(1).float().mean() > 0.5
        and plan.offsets.min() >= 0
        and plan.offsets.max() <= 8
    )
    manual = []
    for i, idx in enumerate(plan.order.tolist()):
        img = F.pad(d.images[idx], (4, 4, 4, 4))
        r, c = plan.offsets[i].tolist()
        img = img[:, r : r + 32, c : c + 32]
        manual.append(img.flip(-1) if plan.flips[i] else img)
    manual = torch.stack(manual)
    torch.testing.assert_close(x, normalised(manual), rtol=0, atol=1e-5)
    assert not torch.allclose(x, normalised(d.images[plan.order]))  # augmentation did change pixels


def test_augment_shifts_and_mirrors():
    img = torch.arange(2 * 32 * 32, dtype=torch.int64).view(1, 2, 32, 32) + 1
    same = augment(img, offsets=torch.tensor([[4, 4]]), flips=torch.tensor([False]))
    assert torch.equal(same, img)
    mirrored = augment(img, offsets=torch.tensor([[4, 4]]), flips=torch.tensor([True]))
    assert torch.equal(mirrored, img.flip(-1))
    shifted = augment(img, offsets=torch.tensor([[0, 8]]), flips=torch.tensor([False]))
    assert torch.equal(shifted[0, :, 4:, :28], img[0, :, :28, 4:])  # content moved down 4, left 4
    assert (shifted[0, :, :4] == 0).all() and (shifted[0, :, :, 28:] == 0).all()  # zero padding


def test_two_ranks_concatenate_to_one_rank_with_double_batch():
    d = numbered(50)
    one = list(d.batches(batch_size=8, epoch=3, seed=7, train=True))
    r0 = list(d.batches(batch_size=4, epoch=3, seed=7, train=True, rank=0, world_size=2))
    r1 = list(d.batches(batch_size=4, epoch=3, seed=7, train=True, rank=1, world_size=2))
    assert len(one) == len(r0) == len(r1) == 6 == d.num_batches(batch_size=4, train=True, world_size=2)
    for (x, y), (x0, y0), (x1, y1) in zip(one, r0, r1):
        assert torch.equal(torch.cat([y0, y1]), y)
        assert torch.equal(torch.cat([x0, x1]), x)
    assert set(torch.cat([y for _, y in r0]).tolist()).isdisjoint(torch.cat([y for _, y in r1]).tolist())


def test_eval_shards_cover_the_split_once():
    d = numbered(23)
    seen = []
    for rank in range(3):
        got = list(d.batches(batch_size=4, train=False, rank=rank, world_size=3))
        assert len(got) == d.num_batches(batch_size=4, train=False, rank=rank, world_size=3)
        seen += torch.cat([y for _, y in got]).tolist()
    assert sorted(seen) == list(range(23))


def test_pipeline_argument_errors():
    d = numbered(8)
    with pytest.raises(ValueError, match="needs epoch= and seed="):
        next(d.batches(batch_size=4, train=True))
    with pytest.raises(ValueError, match="rank 2, world_size 2"):
        d.num_batches(batch_size=4, train=True, rank=2, world_size=2)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        next(d.batches(batch_size=0, train=False))
    with pytest.raises(ValueError, match="uint8"):
        DeviceData(torch.zeros(2, 3, 32, 32), torch.zeros(2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_loop_has_no_host_sync():
    d = DeviceData(
        torch.randint(0, 256, (256, 3, 32, 32), dtype=torch.uint8), torch.arange(256), device="cuda"
    )
    it = d.batches(batch_size=32, epoch=0, seed=0, train=True)
    next(it)  # the per-epoch plan upload happens before the loop
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, _ in it:
            x.sum()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert x.device.type == "cuda" and x.shape == (32, 3, 32, 32)
