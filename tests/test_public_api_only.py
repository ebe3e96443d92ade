"""The project uses its libraries through their public API: no import of a private
module (``ray._private``, ``ray.train._internal``, ``torch._dynamo``, ...), no
private attribute of a library reached through its module, no assignment to an
attribute of a library's module, class or object (a patch), and no filter of a
library's log messages or warnings by their text.  The scanner is checked on sources that do
each of these, so it cannot pass by finding nothing."""

from __future__ import annotations

from tests.helpers import REPO_ROOT

import ast
from pathlib import Path

import pytest

PACKAGES = ("study", "analysis", "benchmarks")
#: the libraries whose internals the project must not touch
LIBRARIES = {"ray", "optuna", "torch", "torchvision", "pyarrow", "pandas", "numpy", "seaborn", "matplotlib",
             "pydantic", "yaml", "duckdb", "tqdm"}


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
               for part in dotted.split("."))


def violations(source: str, where: str = "<source>") -> list[str]:
    """Every use of a library's internals in ``source``, one line each."""
    tree = ast.parse(source)
    found: list[str] = []
    library_names: set[str] = set()  # names bound to a library's modules, classes or functions

    def lib(module: str) -> bool:
        return module.split(".")[0] in LIBRARIES

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if lib(a.name):
                    library_names.add((a.asname or a.name).split(".")[0])
                    if _private(a.name):
                        found.append(f"{where}:{node.lineno}: imports the private module {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and lib(node.module):
            for a in node.names:
                library_names.add(a.asname or a.name)
                if _private(node.module) or _private(a.name):
                    found.append(f"{where}:{node.lineno}: imports {a.name} from the private {node.module}")

    def root(expr: ast.expr) -> str | None:
        while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
            expr = expr.func if isinstance(expr, ast.Call) else expr.value
        return expr.id if isinstance(expr, ast.Name) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and root(node) in library_names:
            found.append(f"{where}:{node.lineno}: reaches the private attribute {node.attr} of {root(node)}")
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            if isinstance(t, ast.Attribute) and root(t) in library_names:
                found.append(f"{where}:{node.lineno}: assigns {t.attr} of the library object {root(t)} (a patch)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and node.args and root(node.args[0]) in library_names:
            found.append(f"{where}:{node.lineno}: {node.func.id} on the library object {root(node.args[0])}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "addFilter":
            found.append(f"{where}:{node.lineno}: a filter on a logger (log lines judged by their text)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "filterwarnings" \
                and (len(node.args) > 1 or any(k.arg == "message" for k in node.keywords)):
            found.append(f"{where}:{node.lineno}: a warning filter on the warning's text")
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Attribute) and b.attr == "Filter" for b in node.bases):
            found.append(f"{where}:{node.lineno}: a logging.Filter subclass")
    return found


def _sources() -> list[Path]:
    here = REPO_ROOT
    return sorted(p for pkg in PACKAGES for p in (here / pkg).rglob("*.py"))


def test_the_packages_use_only_public_library_api():
    found = [v for path in _sources() for v in violations(path.read_text(), str(path.name))]
    assert len(_sources()) > 50
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("source, words", [
    ("from ray.train._internal.storage import get_fs_and_path", "private ray.train._internal.storage"),
    ("import ray\nray._private.worker._global_node.get_logs_dir_path()", "private attribute _private"),
    ("import torch\ntorch._dynamo.reset()", "private attribute _dynamo"),
    ("from ray._raylet import GcsClient", "private ray._raylet"),
    ("from ray.tune.search.search_generator import SearchGenerator\nSearchGenerator.set_state = print",
     "assigns set_state"),
    ("import optuna\noptuna.logging.set_verbosity = print", "assigns set_verbosity"),
    ("import ray.tune as tune\nsetattr(tune.Tuner, 'fit', print)", "setattr on the library object tune"),
    ("import logging\nclass Quiet(logging.Filter):\n    pass", "logging.Filter subclass"),
    ("import warnings\nwarnings.filterwarnings('ignore', message='Detected pickle protocol')",
     "a warning filter on the warning's text"),
    ("import logging\nlogging.getLogger('ray.tune').addFilter(lambda r: 'restore' not in r.getMessage())",
     "a filter on a logger"),
])
def test_the_scanner_finds_each_kind_of_internal_use(source, words):
    found = violations(source)
    assert len(found) >= 1 and any(words in v for v in found), found


def test_the_scanner_leaves_public_use_and_own_objects_alone():
    source = ("import ray\nfrom ray import tune\nimport torch\n"
              "ray.init(); tune.Tuner(lambda c: None)\ntorch.compiler.reset()\n"
              "class Own:\n    pass\nOwn.x = 1\nspec = Own()\nobject.__setattr__(spec, 'name', 'n')\n")
    assert violations(source) == []
