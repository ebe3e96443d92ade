"""The documentation: a short README that maps docs/, links that resolve (files and
headings), and no pointer to a document outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300

#: written in two pieces so that this file does not contain what it looks for
OUTSIDE = ("DESIGN" + ".md", "../" + "shared")
#: the only lines allowed to name the data folder beside the repository: the default
#: data of two study files, and a test of the label it gets (data inputs, not documents)
DATA_PATH = "../" + "shared/data/cifar10-jpeg.tar.gz"
ALLOWED = {
    ("search_spaces/locality.yaml", f"data: {DATA_PATH}"),
    ("search_spaces/repro_cpu.yaml", f"data: {DATA_PATH}"),
    (
        "tests/analysis/figures/test_table1.py",
        f'{{**SA, "encoding": "learned", "pos_dim": 400, **FULL, "data": "{DATA_PATH}"}}',
    ),
}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]{2,}|`", "", heading).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+://|mailto:", t)]


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, (
        f"README.md has {n} lines (at most {MAX_README_LINES}: move the rest to docs/)"
    )


def test_readme_maps_every_document_of_docs():
    linked = {(README.parent / t.split("#", 1)[0]).resolve() for t in _links(README)}
    unlinked = [
        p.relative_to(ROOT).as_posix() for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked
    ]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_readme_shows_an_image_that_exists():
    images = [t for t in LINK.findall(README.read_text()) if t.lower().endswith((".png", ".jpg", ".svg"))]
    assert images, "README.md shows no figure"


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(doc):
    """Every relative link of README.md and docs/**.md (documents and images) names a
    file of the repository, and its #anchor a heading of that file."""
    broken = []
    for target in _links(doc):
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.is_file() or not path.is_relative_to(ROOT):
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT).as_posix()}")
    assert not broken, f"{doc.relative_to(ROOT).as_posix()}: {broken}"


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        files = [f for f in out.stdout.decode().split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.SubprocessError):
        pass
    skip = {".git", ".venv", "results", "__pycache__", ".pytest_cache"}
    files = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in skip]
        files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    return files


def test_no_file_points_outside_the_repository():
    """No tracked file refers to the design notes or documents beside the repository:
    the project's design notes are docs/design.md.  The data path beside the repository
    is allowed only on the lines listed in ALLOWED."""
    found = []
    for rel in _tracked_files():
        path = ROOT / rel
        if not path.is_file():
            continue
        data = path.read_bytes()
        if not any(word.encode() in data for word in OUTSIDE):
            continue
        for no, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if any(word in line for word in OUTSIDE) and (rel, line.strip()) not in ALLOWED:
                found.append(f"{rel}:{no}: {line.strip()}")
    assert not found, "references outside the repository:\n" + "\n".join(found)
