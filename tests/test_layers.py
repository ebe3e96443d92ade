"""The code map as checked contracts (docs/design.md, "Where each concern lives"): the import
contracts of pyproject.toml's ``[tool.importlinter]`` hold (import-linter, pinned in the test
extra), no module reaches itself through its imports (grimp, the graph import-linter reads),
every module of a layered package has its layer, and the code map names each of them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.helpers import REPO_ROOT

CONFIG = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["id"]: c for c in CONFIG["contracts"]}
LAYERED = [c for c in CONTRACTS.values() if c["type"] == "layers"]
DESIGN = REPO_ROOT / "docs" / "design.md"


def lint_imports(*args: str, root: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """import-linter's command (installed beside this Python) on the packages under ``root``."""
    exe = Path(sys.executable).parent / "lint-imports"
    assert exe.exists(), (
        f"{exe} is missing: import-linter comes with the test extra (pip install -e '.[test]')"
    )
    return subprocess.run(
        [str(exe), "--no-cache", "--no-logo", *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*CONFIG["root_packages"], cache_dir=None)


@pytest.mark.parametrize("contract", sorted(CONTRACTS))
def test_the_import_contract_holds(contract):
    r = lint_imports("--contract", contract)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_contract_ignores_an_import():
    """An exception to the code map is written in the code, not hidden in the contracts."""
    assert {i: c["ignore_imports"] for i, c in CONTRACTS.items() if c.get("ignore_imports")} == {}


@pytest.mark.parametrize(
    ("module", "planted", "contract", "chain"),
    [
        ("study/errors.py", "analysis.io", "study-never-imports-analysis", "study.errors -> analysis.io"),
        (
            "study/scheduling/trials.py",
            "ray",
            "ray-only-where-a-study-runs",
            "study.scheduling.trials -> ray",
        ),
    ],
)
def test_an_import_against_the_design_breaks_its_contract(tmp_path, module, planted, contract, chain):
    """The contracts read this tree's packages: an import the design forbids, planted in a copy,
    is reported with its chain."""
    for package in CONFIG["root_packages"]:
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / module).open("a") as f:
        f.write(f"\nimport {planted}  # noqa: E402, F401\n")
    r = lint_imports("--contract", contract, root=tmp_path)
    assert r.returncode == 1 and chain in r.stdout, r.stdout + r.stderr


def test_no_module_reaches_itself_through_its_imports(graph):
    loops = sorted(
        " -> ".join([module, *graph.find_shortest_chain(importer=imported, imported=module)])
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if imported != module and graph.chain_exists(importer=imported, imported=module)
    )
    assert loops == [], "import loops:\n" + "\n".join(loops)


def layer_modules(contract: dict) -> set[str]:
    (container,) = contract["containers"]
    return {
        f"{container}.{tail.strip()}" for layer in contract["layers"] for tail in re.split(r"[|:]", layer)
    }


@pytest.mark.parametrize("contract", LAYERED, ids=[c["id"] for c in LAYERED])
def test_every_module_of_a_layered_package_has_its_layer(graph, contract):
    (container,) = contract["containers"]
    assert sorted(graph.find_children(container) - layer_modules(contract)) == []


def test_the_code_map_names_every_layered_module(graph):
    text = DESIGN.read_text()
    code_map = text[text.index("### Where each concern lives") :].split("\n## ", 1)[0]
    paths = {
        module.replace(".", "/") + ("/" if graph.find_children(module) else ".py")
        for contract in LAYERED
        for module in layer_modules(contract)
    }
    assert sorted(p for p in paths if f"`{p}`" not in code_map) == []
