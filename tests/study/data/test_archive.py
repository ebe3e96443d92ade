"""The tar-archive reader (study/data/archive.py), without torch: every raw header is checked in
the bytes the reader decompressed itself, whatever tarfile does inside; each bound and each kind
of damage is one line.  ``bash tests/pythons.sh`` runs this file under every Python on the machine."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile

import pytest

from study import limits
from study.data.archive import read_images
from study.data.errors import DataError
from tests.data_helpers import make_tar, tar_bytes


def test_long_names_are_read_in_every_tar_format(tmp_path):
    long = "x" * 120  # > 100 chars: a GNU long-name header, a pax path record, or ustar's prefix field
    (tmp_path / "d" / "train" / long).mkdir(parents=True)
    (tmp_path / "d" / "train" / long / "a.png").write_bytes(b"abc")
    (tmp_path / "d" / "test").mkdir()
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        arch = make_tar(tmp_path / "d", tmp_path / f"{fmt}.tar", mode="w", format=fmt)
        with open(arch, "rb") as f:
            images = read_images(f, path=str(arch), keep=lambda name: name.endswith(".png"))
        assert {n: bytes(images.buffer[o : o + s]) for n, (o, s) in images.files.items()} == {
            f"train/{long}/a.png": b"abc"
        }, fmt
        assert sorted(images.dirs) == ["test", "train", f"train/{long}"], fmt


# ---------------------------------------------------------------- every bound, one line each
PNGS = {
    f"{split}/{c}/{i}.png": bytes([i]) * 100
    for split in ("train", "test")
    for c in ("a", "b")
    for i in range(2)
}


def read_error(raw: bytes) -> str:
    """The one-line refusal of the archive bytes ``raw`` by read_images."""
    with pytest.raises(DataError) as info:
        read_images(io.BufferedReader(io.BytesIO(raw)), path="a.tar", keep=lambda name: name.endswith(".png"))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("a.tar: "), msg
    return msg


def gnu_long_name_chain(n: int) -> bytes:
    """``n`` GNU long-name headers in a row before one member, then the end-of-archive marker."""
    blocks = tarfile.TarInfo("x" * 200).tobuf(format=tarfile.GNU_FORMAT)  # 'L' header, its body, the member
    long_name, member = blocks[:1024], blocks[1024:]
    return long_name * n + member + bytes(1024)


@pytest.mark.parametrize(
    "compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bzip2", "xz"]
)
def test_archive_decompression_bomb(monkeypatch, compress):
    monkeypatch.setattr(limits, "MAX_DECOMPRESSED_BYTES", 2**20)
    bomb = compress(tar_bytes({**PNGS, "train/a/zeros.png": bytes(4 * 2**20)}))
    assert len(bomb) < 2**16
    assert read_error(bomb) == (
        "a.tar: decompresses to more than 1048576 bytes (MAX_DECOMPRESSED_BYTES): "
        "refusing a possible decompression bomb"
    )


def test_plain_archive_over_the_decompressed_limit(monkeypatch):
    monkeypatch.setattr(limits, "MAX_DECOMPRESSED_BYTES", 2**20)
    raw = tar_bytes({**PNGS, "train/a/zeros.png": bytes(2 * 2**20)})
    assert read_error(raw) == "a.tar: archive is more than 1048576 bytes (MAX_DECOMPRESSED_BYTES)"


@pytest.mark.parametrize(
    "limit, members, expected",
    [
        ("MAX_SOURCE_FILES", PNGS, "a.tar: more than 3 archive members (MAX_SOURCE_FILES)"),
        (
            "MAX_IMAGE_FILE_BYTES",
            {"train/a/big.png": bytes(4)},
            "a.tar: train/a/big.png: 4 bytes, more than the limit of 3 (MAX_IMAGE_FILE_BYTES)",
        ),
        (
            "MAX_SOURCE_IMAGE_BYTES",
            {"train/a/0.png": bytes(2), "train/a/1.png": bytes(2)},
            "a.tar: its image files hold more than 3 bytes (MAX_SOURCE_IMAGE_BYTES)",
        ),
    ],
)
def test_archive_size_and_count_limits(monkeypatch, limit, members, expected):
    monkeypatch.setattr(limits, limit, 3)
    assert read_error(tar_bytes(members)) == expected


@pytest.mark.parametrize("compress", [None, gzip.compress], ids=["plain", "gzip"])
def test_a_member_over_the_image_limit_cut_short(monkeypatch, compress):
    """A compressed member over MAX_IMAGE_FILE_BYTES is refused at its header, its data never decompressed (a
    bomb's gigabytes): cut short, it is still refused by its size; a plain archive is read to the member's end
    (its bytes are on disk), so there a cut short one is refused as truncated, the first thing wrong."""
    monkeypatch.setattr(limits, "MAX_IMAGE_FILE_BYTES", 1000)
    raw = tar_bytes({"train/a/big.png": bytes(5000)}, fmt=tarfile.USTAR_FORMAT)[:3000]
    if compress is None:
        assert read_error(raw) == "a.tar: truncated tar archive (train/a/big.png is cut short)"
    else:
        assert read_error(compress(raw)) == (
            "a.tar: train/a/big.png: 5000 bytes, more than the limit of 1000 (MAX_IMAGE_FILE_BYTES)"
        )


@pytest.mark.parametrize(
    "name, needle",
    [
        (
            "/etc/x.png",
            "member '/etc/x.png' points outside the archive (absolute path or '..'): refusing the archive",
        ),
        (
            "../x.png",
            "member '../x.png' points outside the archive (absolute path or '..'): refusing the archive",
        ),
        (
            "train/../../x.png",
            "member 'train/../../x.png' points outside the archive (absolute path or '..'): "
            "refusing the archive",
        ),
        ("./train/a/0.png", "member './train/a/0.png' appears twice in the archive"),
    ],
    ids=["absolute", "dotdot", "dotdot_inside", "twice"],
)
def test_archive_member_outside_the_folder_or_twice(name, needle):
    assert read_error(tar_bytes({**PNGS, name: b"x"})) == f"a.tar: {needle}"


def test_archive_links_are_skipped_never_followed(tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"secret")
    raw = tar_bytes(
        PNGS,
        links={
            "train/a/sym.png": (tarfile.SYMTYPE, str(secret)),
            "train/a/hard.png": (tarfile.LNKTYPE, "train/a/0.png"),
            "train/a/up.png": (tarfile.SYMTYPE, "../../../secret.png"),
        },
    )
    images = read_images(
        io.BufferedReader(io.BytesIO(raw)), path="a.tar", keep=lambda name: name.endswith(".png")
    )
    assert sorted(images.files) == sorted(PNGS)
    assert b"secret" not in images.buffer


def test_archive_sparse_member_is_refused():
    info = tarfile.TarInfo("train/a/s.png")
    info.type = tarfile.GNUTYPE_SPARSE
    raw = tar_bytes(PNGS)[: -1024 * 2] + info.tobuf(format=tarfile.GNU_FORMAT) + bytes(1024)
    assert read_error(raw) == "a.tar: member 'train/a/s.png' is a sparse file: refusing the archive"


def test_archive_extended_header_bounds():
    raw = tar_bytes(PNGS, pax={"comment": "x" * 2**20})
    assert read_error(raw).startswith("a.tar: extended header at byte 0 of 10485")
    assert read_error(raw).endswith(" bytes, more than 1048576: refusing the archive")
    chain = io.BufferedReader(io.BytesIO(gnu_long_name_chain(8)))
    assert len(read_images(chain, path="a.tar", keep=bool).files) == 1
    assert read_error(gnu_long_name_chain(9)) == (
        "a.tar: extended header at byte 8192: more than 8 in a row before one member: refusing the archive"
    )


def test_damaged_archives():
    raw = tar_bytes(PNGS, fmt=tarfile.USTAR_FORMAT)
    assert read_error(raw[:300]) == "a.tar: not a tar archive (only 300 bytes)"
    assert read_error(raw[:700]) == "a.tar: truncated tar archive (train/a/0.png is cut short)"
    assert read_error(raw[: 1024 + 300]) == (
        "a.tar: truncated tar archive: no end-of-archive marker after 1 members "
        "at byte 1024 (the file was cut short?)"
    )
    garbled = raw[:1024] + bytes(range(256)) * 2 + raw[1536:]  # the second member's header
    assert read_error(garbled) == "a.tar: not a tar archive or corrupt at byte 1024"
    assert read_error(raw[:8192]) == (
        "a.tar: truncated tar archive: no end-of-archive marker after 8 members "
        "at byte 8192 (the file was cut short?)"
    )
    assert read_error(gzip.compress(raw)[:-30]) == (
        "a.tar: cannot decompress archive (compressed data ends early: truncated)"
    )
    assert read_error(b"BZh9" + bytes(range(200))) == "a.tar: cannot decompress archive (Invalid data stream)"


def test_compressed_archive_in_several_streams_with_zero_padding():
    raw = tar_bytes(PNGS)
    for compress in (gzip.compress, bz2.compress, lzma.compress):
        data = compress(raw[:2048]) + compress(raw[2048:]) + bytes(1000)
        images = read_images(
            io.BufferedReader(io.BytesIO(data)), path="a.tar", keep=lambda name: name.endswith(".png")
        )
        assert {n: bytes(images.buffer[o : o + s]) for n, (o, s) in images.files.items()} == PNGS, compress


# ------------------------------------------------------- raw headers, checked in the reader's own bytes
def read(raw: bytes):
    return read_images(
        io.BufferedReader(io.BytesIO(raw)), path="a.tar", keep=lambda name: name.endswith(".png")
    )


def patched(raw: bytes, off: int, field: slice, value: bytes) -> bytes:
    """``raw`` with ``value`` in ``field`` of the header at byte ``off``, its checksum made right again."""
    h = bytearray(raw[off : off + 512])
    h[field] = value
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return raw[:off] + bytes(h) + raw[off + 512 :]


def with_global_header(members: dict[str, bytes], records: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=records) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


LONG = {"train/a/" + "l" * 120 + ".png": b"long"}
#: (archive, how many headers it has by construction (a ustar member has one; a pax record set,
#: a GNU long name or long link, a global pax header add one each), its image members)
COUNTED = {
    "ustar": (lambda: tar_bytes(PNGS, fmt=tarfile.USTAR_FORMAT), 8, PNGS),
    "pax_records": (lambda: tar_bytes(PNGS, pax={"comment": "x"}), 16, PNGS),
    "pax_global": (lambda: with_global_header(PNGS, {"comment": "every member"}), 1 + 8, PNGS),
    "gnu_long_names": (
        lambda: tar_bytes(
            {**PNGS, **LONG}, fmt=tarfile.GNU_FORMAT, links={"train/a/l.png": (tarfile.SYMTYPE, "t" * 150)}
        ),
        8 + 2 + 2,
        {**PNGS, **LONG},
    ),
    "gzip_pax_long_names": (lambda: gzip.compress(tar_bytes({**PNGS, **LONG})), 8 + 2, {**PNGS, **LONG}),
}


@pytest.mark.parametrize("case", sorted(COUNTED))
def test_every_raw_header_is_checked(case):
    """The checks see each header of the archive (none, if tarfile parsed them where the
    reader cannot see), and the members come out whole."""
    make, headers, members = COUNTED[case]
    images = read(make())
    assert images.tar_headers == headers
    assert {n: bytes(images.buffer[o : o + s]) for n, (o, s) in images.files.items()} == members


#: (patched size field, what the refusal shows): what int(field, 8) or GNU base-256 would take
SIZES = [
    (b"00000000_12\0", "size b'00000000_12'"),
    (b"-0000000012\0", "size b'-0000000012'"),
    (b"+0000000012\0", "size b'+0000000012'"),
    (b"0000000 012\0", "size b'0000000 012'"),
    (b"\xff" * 12, "negative size"),
]
#: where the patched header is: (format, pax records, its offset)
WHERE = {
    "first_member": (tarfile.USTAR_FORMAT, None, 0),
    "third_member": (tarfile.USTAR_FORMAT, None, 2048),
    "member_after_a_pax_header": (tarfile.PAX_FORMAT, {"comment": "x"}, 2 * 2048 + 1024),
    "pax_header": (tarfile.PAX_FORMAT, {"comment": "x"}, 2 * 2048),
}


@pytest.mark.parametrize("where", sorted(WHERE))
@pytest.mark.parametrize(
    "field, shown", SIZES, ids=["underscore", "minus", "plus", "inner_space", "base256_negative"]
)
def test_size_field_read_leniently_is_refused(where, field, shown):
    fmt, pax, off = WHERE[where]
    raw = tar_bytes(PNGS, fmt=fmt, pax=pax)
    assert read(raw).tar_headers > 0
    assert (
        read_error(patched(raw, off, slice(124, 136), field))
        == f"a.tar: corrupt tar header at byte {off} ({shown})"
    )


def pax_body(records: bytes, *, later: bool = False) -> bytes:
    """A pax archive whose first (or third) extended header's body is ``records``, exactly."""
    off = 2 * 2048 if later else 0
    raw = patched(tar_bytes(PNGS, pax={"comment": "x"}), off, slice(124, 136), b"%011o\0" % len(records))
    return raw[: off + 512] + records.ljust(512, b"\0") + raw[off + 1024 :]


def record(text: bytes) -> bytes:
    """One pax record, ``"%d key=value\\n"``, its length counting its own digits."""
    length = 0
    while length != len(b"%d %s\n" % (length, text)):
        length = len(b"%d %s\n" % (length, text))
    return b"%d %s\n" % (length, text)


@pytest.mark.parametrize(
    "records, needle",
    [
        (b"abc comment=x\n", "corrupt pax header at byte {off} (record at 0)"),
        (b"9999 comment=x\n", "corrupt pax header at byte {off} (record length 9999)"),
        (record(b"commentxx"), "corrupt pax header at byte {off} (record without '=')"),
        (record(b"size=12abc"), "corrupt pax header at byte {off} (size '12abc')"),
        (record(b"size=-4096"), "corrupt pax header at byte {off} (size '-4096')"),
        (record(b"GNU.sparse.size=9"), "member at byte {off} is a sparse file: refusing the archive"),
    ],
    ids=[
        "length_not_a_number",
        "length_past_the_end",
        "no_equals",
        "size_not_a_number",
        "size_negative",
        "sparse_map",
    ],
)
@pytest.mark.parametrize("later", [False, True], ids=["first", "third"])
def test_malformed_pax_records_are_refused(records, needle, later):
    off = 2 * 2048 if later else 0
    assert read_error(pax_body(records, later=later)) == "a.tar: " + needle.format(off=off)


def test_a_global_size_record_is_refused():
    raw = with_global_header(PNGS, {"size": "100"})
    assert read_error(raw) == "a.tar: corrupt pax header at byte 0 (a global size record)"


@pytest.mark.parametrize("off", [0, 2048], ids=["first", "third"])
def test_a_header_tarfile_stops_at_is_not_the_end_of_the_archive(off):
    """A header whose mode is no number: tarfile ends the archive there (or refuses it, at the
    start); the end-of-archive marker is looked for where the reader's own walk says."""
    raw = patched(tar_bytes(PNGS, fmt=tarfile.USTAR_FORMAT), off, slice(100, 108), b"0000x44\0")
    where = " (no tar header at the start)" if off == 0 else ""
    assert read_error(raw) == f"a.tar: not a tar archive or corrupt at byte {off}{where}"


def test_a_folder_with_data_is_refused():
    info = tarfile.TarInfo("train/a")
    info.type, info.size = tarfile.DIRTYPE, 100
    raw = tar_bytes(PNGS, fmt=tarfile.USTAR_FORMAT)[: -1024 * 2] + info.tobuf(format=tarfile.USTAR_FORMAT)
    raw += bytes([7]) * 512 + bytes(1024)
    assert read_error(raw) == (
        "a.tar: corrupt tar header at byte 8192 (member 'train/a' is no regular file "
        "but has 100 bytes of data)"
    )


def test_an_extended_header_with_no_member_is_refused():
    raw = tar_bytes(PNGS, pax={"comment": "x"})
    assert read_error(raw[: 2 * 2048 + 1024] + bytes(1024)) == (
        "a.tar: extended header with no member before the end-of-archive marker at byte 5120: "
        "refusing the archive"
    )


def test_a_signed_checksum_is_accepted():
    """Some old tars summed the header as signed bytes (POSIX allows either reading)."""
    raw = bytearray(tar_bytes({"train/a/\u00e9.png": b"x"}, fmt=tarfile.USTAR_FORMAT))
    raw[148:156] = b" " * 8
    raw[148:156] = b"%06o\0 " % sum(b - 256 if b >= 128 else b for b in raw[:512])
    images = read(bytes(raw))
    assert list(images.files) == ["train/a/\u00e9.png"] and images.tar_headers == 1
    raw[148:156] = b"%06o\0 " % (int(raw[148:154], 8) + 1)
    assert (
        read_error(bytes(raw)) == "a.tar: not a tar archive or corrupt at byte 0 (no tar header at the start)"
    )
