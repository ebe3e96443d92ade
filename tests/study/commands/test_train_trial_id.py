"""An --out folder holds one trial: study train continues it under the id it was trained with."""

from __future__ import annotations

import hashlib
from pathlib import Path

TINY = ["--hidden", "16", "--layers", "1", "--num-heads", "4", "--intermediate", "16"]


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def test_another_trial_id_for_a_trained_out_folder_is_refused_and_none_continues_it(
    study_in_process, tmp_path
):
    """``--trial-id other`` on a folder trained as ``first`` exited 0 ("finished") and kept
    nothing under ``other``; without --trial-id the folder's own trial continues."""
    out = tmp_path / "o"
    argv = ["train", "--data", "synthetic:60", "--epochs", "1", "--batch-size", "20", *TINY, "--quiet"]
    code, _, err, _ = study_in_process(*argv, "--trial-id", "first", "--out", out)
    assert code == 0, err
    before = _tree(out)

    code, _, err, _ = study_in_process(*argv, "--trial-id", "other", "--out", out)
    assert code == 2 and len(err) == 1, err
    assert f"--trial-id: {out} holds trial 'first', not 'other'" in err[0], err
    assert _tree(out) == before

    code, _, err, _ = study_in_process(*argv, "--out", out)  # the folder's name would be 'o'
    assert code == 0, err
    assert sorted(p.stem for p in (out / "tables" / "runs").glob("*.parquet")) == ["first"]
