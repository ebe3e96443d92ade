"""The project uses its libraries through their public API: no import of a private
module (``ray._private``, ``ray.train._internal``, ``torch._dynamo``, ...), no
private attribute of a library reached through its module, no private keyword argument
(``ray.init(_node_ip_address=...)``, also when the keywords are a dict the code assembles and
unpacks with ``**``), no assignment to an attribute of a library's module, class or object
(a patch), and no filter of a library's log messages or warnings by their text.  The scanner
is checked on sources that do each of these, so it cannot pass by finding nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

PACKAGES = ("study", "analysis", "benchmarks")
#: the libraries whose internals the project must not touch
LIBRARIES = {
    "ray",
    "optuna",
    "torch",
    "torchvision",
    "pyarrow",
    "pandas",
    "numpy",
    "seaborn",
    "matplotlib",
    "pydantic",
    "yaml",
    "duckdb",
    "tqdm",
}


def _private(dotted: str) -> bool:
    return any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in dotted.split(".")
    )


def _keyword_dicts(tree: ast.AST) -> list[tuple[ast.expr, str]]:
    """(dict, how) for every dict whose keys become keyword arguments: a dict display or
    ``dict(...)`` unpacked with ``**`` in a call, bound to a name that a call unpacks in the
    same scope, or returned by a function (how ``ray_init_kwargs`` handed ``ray.init`` its keywords)."""
    found: list[tuple[ast.expr, str]] = []

    def is_dict(e: ast.expr) -> bool:
        return isinstance(e, ast.Dict) or (
            isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "dict"
        )

    def own_nodes(scope: ast.AST) -> list[ast.AST]:
        """The nodes of ``scope``, not those of the functions defined in it (their own scopes)."""
        nodes, todo = [], list(ast.iter_child_nodes(scope))
        while todo:
            n = todo.pop()
            nodes.append(n)
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                todo += ast.iter_child_nodes(n)
        return nodes

    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        nodes = own_nodes(scope)
        unpacked = {
            k.value.id
            for n in nodes
            if isinstance(n, ast.Call)
            for k in n.keywords
            if k.arg is None and isinstance(k.value, ast.Name)
        }
        for n in nodes:
            if isinstance(n, ast.Call):
                found += [
                    (k.value, "unpacked with **") for k in n.keywords if k.arg is None and is_dict(k.value)
                ]
            elif (
                isinstance(n, ast.Assign)
                and is_dict(n.value)
                and any(isinstance(t, ast.Name) and t.id in unpacked for t in n.targets)
            ):
                found.append((n.value, "unpacked with ** later"))
            elif isinstance(n, ast.Return) and n.value is not None and is_dict(n.value) and scope is not tree:
                found.append((n.value, f"returned by {scope.name}"))
    return found


def _keys(d: ast.expr) -> list[str]:
    """The string keys of a dict display (nested ``**{...}`` included) or of a ``dict(...)`` call."""
    if isinstance(d, ast.Call):
        nested = [k.value for k in d.keywords if k.arg is None and isinstance(k.value, ast.Dict)]
        return [k.arg for k in d.keywords if k.arg is not None] + [key for n in nested for key in _keys(n)]
    keys = []
    for k, v in zip(d.keys, d.values):
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            keys.append(k.value)
        elif k is None and isinstance(v, ast.Dict):
            keys += _keys(v)
    return keys


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
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        )
        for t in targets:
            if isinstance(t, ast.Attribute) and root(t) in library_names:
                found.append(
                    f"{where}:{node.lineno}: assigns {t.attr} of the library object {root(t)} (a patch)"
                )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and root(node.args[0]) in library_names
        ):
            found.append(f"{where}:{node.lineno}: {node.func.id} on the library object {root(node.args[0])}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "addFilter"
        ):
            found.append(f"{where}:{node.lineno}: a filter on a logger (log lines judged by their text)")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "filterwarnings"
            and (len(node.args) > 1 or any(k.arg == "message" for k in node.keywords))
        ):
            found.append(f"{where}:{node.lineno}: a warning filter on the warning's text")
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Attribute) and b.attr == "Filter" for b in node.bases
        ):
            found.append(f"{where}:{node.lineno}: a logging.Filter subclass")
        if isinstance(node, ast.Call):
            found += [
                f"{where}:{node.lineno}: passes the private keyword {k.arg}"
                for k in node.keywords
                if k.arg is not None and _private(k.arg)
            ]
    # a dict's private keys are string literals ('_name'): a source without one is not walked again
    for d, how in _keyword_dicts(tree) if re.search(r"""['"]_(?!_)""", source) else []:
        found += [
            f"{where}:{d.lineno}: the private keyword {k} in a dict {how}" for k in _keys(d) if _private(k)
        ]
    return found


def _sources() -> list[Path]:
    here = REPO_ROOT
    return sorted(p for pkg in PACKAGES for p in (here / pkg).rglob("*.py"))


def test_the_packages_use_only_public_library_api():
    found = [v for path in _sources() for v in violations(path.read_text(), str(path.name))]
    assert len(_sources()) > 50
    assert found == [], "\n".join(found)


def test_the_tests_import_no_private_library_module():
    """The tests patch and reach into their own code, but a library's private module (an import a
    release can move) stays out of them too: they check the project as its users run it."""
    tests = sorted((REPO_ROOT / "tests").rglob("*.py"))
    found = [
        v
        for path in tests
        for v in violations(path.read_text(), str(path.relative_to(REPO_ROOT)))
        if "imports" in v
    ]
    assert len(tests) > 50
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "source, words",
    [
        ("from ray.train._internal.storage import get_fs_and_path", "private ray.train._internal.storage"),
        ("import ray\nray._private.worker._global_node.get_logs_dir_path()", "private attribute _private"),
        ("import torch\ntorch._dynamo.reset()", "private attribute _dynamo"),
        ("from ray._raylet import GcsClient", "private ray._raylet"),
        (
            "from ray.tune.search.search_generator import SearchGenerator\nSearchGenerator.set_state = print",
            "assigns set_state",
        ),
        ("import optuna\noptuna.logging.set_verbosity = print", "assigns set_verbosity"),
        ("import ray.tune as tune\nsetattr(tune.Tuner, 'fit', print)", "setattr on the library object tune"),
        ("import logging\nclass Quiet(logging.Filter):\n    pass", "logging.Filter subclass"),
        (
            "import warnings\nwarnings.filterwarnings('ignore', message='Detected pickle protocol')",
            "a warning filter on the warning's text",
        ),
        (
            "import logging\n"
            "logging.getLogger('ray.tune').addFilter(lambda r: 'restore' not in r.getMessage())",
            "a filter on a logger",
        ),
        (
            "import ray\nray.init(address='local', _node_ip_address='127.0.0.2')",
            "private keyword _node_ip_address",
        ),
        ("import ray\nray.init(**{'address': 'local', '_temp_dir': '/tmp/r'})", "private keyword _temp_dir"),
        (
            "import ray\nray.init(**dict(address='local', _system_config={}))",
            "private keyword _system_config",
        ),
        (
            "import ray\nkw = {'num_cpus': 1, **{'_plasma_directory': '/x'}}\nray.init(**kw)",
            "private keyword _plasma_directory in a dict unpacked",
        ),
        (
            "def ray_init_kwargs(address):\n    kwargs = dict(log_to_driver=False)\n"
            "    return {**kwargs, 'address': address, '_node_ip_address': '127.0.0.2'}",
            "private keyword _node_ip_address in a dict returned by ray_init_kwargs",
        ),
        ("import pandas as pd\npd.DataFrame({'m': [1]}).assign(_m=1)", "private keyword _m"),
    ],
)
def test_the_scanner_finds_each_kind_of_internal_use(source, words):
    found = violations(source)
    assert len(found) >= 1 and any(words in v for v in found), found


def test_the_scanner_leaves_public_use_and_own_objects_alone():
    source = (
        "import ray\nfrom ray import tune\nimport torch\n"
        "ray.init(); tune.Tuner(lambda c: None)\ntorch.compiler.reset()\n"
        "class Own:\n    pass\nOwn.x = 1\nspec = Own()\nobject.__setattr__(spec, 'name', 'n')\n"
    )
    assert violations(source) == []


def test_the_scanner_leaves_dunder_keywords_and_data_dicts_alone():
    """Only keyword arguments are judged: pydantic's public ``__base__`` and a dict of data that
    never becomes keywords pass; a function returning a dict with a private key does not (its
    dict may become a call's keywords)."""
    source = (
        "from pydantic import create_model, BaseModel\nM = create_model('M', __base__=BaseModel)\n"
        "formulas = {'_scaled_dot_product_flash_attention_for_cpu': len}\n"
    )
    assert violations(source) == []
    returned = "def state(self):\n    return {**self.__dict__, '_storage': None}\n"
    assert len(violations(source + returned)) == 1
