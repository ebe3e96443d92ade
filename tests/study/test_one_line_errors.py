"""An error is always one line (issue 45, finding 5): user text quoted in an error (an
override's key or value, a study-file value, a data path, --name, an unknown option) has its
line breaks and other control or format characters escaped as ``repr`` escapes them, so
stderr holds exactly one printable line and the exit status is 2."""

from __future__ import annotations

import inspect

import pytest
import yaml

from study import errors
from study.errors import one_line, printable

#: what would end, split or restyle a terminal line: \n, \r, Windows' \r\n, escape, NUL, the
#: separators str.splitlines() also breaks on (\v, \f, \x1c, \x85, \u2028, \u2029), a right-to-left override
BREAKERS = "\n\r\r\n\x1b[31m\x00\x0b\x0c\x1c\x85\u2028\u2029\u202e"
DOC = {
    "name": "ol",
    "data": "synthetic:100",
    "epochs": 1,
    "batch_size": 25,
    "training": {"head_images": 4},
    "model": {"hidden": 16, "layers": 1, "intermediate": 16, "num_heads": 2},
    "models": [{"encoding": "quadratic"}],
    "resources": {"cpus_per_trial": 1},
}


def test_printable_escapes_every_breaker_as_repr_does():
    for c in BREAKERS:
        assert printable(f"a{c}b") == "a" + repr(c)[1:-1] + "b"
    assert printable("plain, 'quoted', é → …") == "plain, 'quoted', é → …"  # kept as is
    assert printable(printable(BREAKERS)) == printable(BREAKERS)  # an escaped text stays as it is
    assert one_line(f"a \n\t b{BREAKERS}c").isprintable()


@pytest.mark.parametrize(
    "cls", [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.StudyError)]
)
def test_every_project_error_is_one_printable_line(cls):
    params = list(inspect.signature(cls).parameters.values())
    e = cls(*[1 if p.annotation == "int" else f"x{BREAKERS}y" for p in params])
    assert str(e).isprintable() and len(str(e).splitlines()) == 1, repr(str(e))


def routes(tmp_path):
    """(what, study argv) of each way user text reaches an error of `study run`, each holding every
    breaker."""
    good = tmp_path / "ol.yaml"
    good.write_text(yaml.safe_dump(DOC))
    bad_name, bad_data = tmp_path / "name.yaml", tmp_path / "data.yaml"
    bad_name.write_text(yaml.safe_dump({**DOC, "name": f"a{BREAKERS}b"}))
    bad_data.write_text(yaml.safe_dump({**DOC, "data": f"/nonexistent{BREAKERS}x"}))
    storage = ["--storage", str(tmp_path / "st")]
    return [
        ("override key", [good, f"ep{BREAKERS}ochs=1", *storage]),
        ("override value", [good, f"epochs=1{BREAKERS}bogus: 2", *storage]),
        ("override string value", [good, f"name=a{BREAKERS}touch x", *storage]),
        ("study-file value", [bad_name, *storage]),
        ("study-file data path", [bad_data, *storage]),
        ("--data", [good, "--data", f"/nonexistent{BREAKERS}x", *storage]),
        ("--name", [good, "--name", f"a{BREAKERS}b", *storage]),
        ("unknown option", [good, f"--bo{BREAKERS}gus", *storage]),
    ]


def test_user_text_in_an_error_is_one_line(study_in_process, tmp_path):
    """Each route through `study run` (in this process: no interpreter start per case): one
    printable stderr line, exit 2, nothing written."""
    for what, argv in routes(tmp_path):
        before = sorted(tmp_path.rglob("*"))
        code, out, err, _ = study_in_process("run", *argv)
        assert code == 2 and out == "", (what, code, out, err)
        assert len(err) == 1 and err[0].isprintable(), (what, err)
        assert err[0].startswith(("study run: error: ", "study: error: unrecognized arguments: --bo")), (
            what,
            err,
        )
        assert sorted(tmp_path.rglob("*")) == before, what


def test_the_python_api_raises_one_line(tmp_path, monkeypatch):
    import study
    from study.errors import UsageError

    monkeypatch.chdir(tmp_path)
    f = tmp_path / "ol.yaml"
    f.write_text(yaml.safe_dump(DOC))
    for kwargs in (
        {"overrides": [f"epochs=1{BREAKERS}x: 2"]},
        {"name": f"a{BREAKERS}b"},
        {"data": f"/nonexistent{BREAKERS}x"},
    ):
        with pytest.raises(UsageError) as info:
            study.run(f, storage=str(tmp_path / "st"), **kwargs)
        assert str(info.value).isprintable(), (kwargs, str(info.value))
