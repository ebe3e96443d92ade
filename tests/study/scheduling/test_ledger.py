"""The driver's view of a trial's ledger (study/scheduling/ledger.py): its fields, and where a
running epoch stands as the trial's clock saves it."""

from __future__ import annotations

import pytest

from study.scheduling.ledger import ledger_fields, ledger_probe, trial_ledger
from tests.study.scheduling.rayfree import ray_modules_after


def test_a_trials_ledger_is_in_the_studys_trials_folder(tmp_path):
    book = trial_ledger(str(tmp_path), "c001-s002")
    assert book.uri == f"{tmp_path}/trials/c001-s002.json"


def test_a_missing_or_damaged_ledger_reads_as_no_fields(tmp_path):
    """Before the first attempt, or damaged: no cause and no count (the scheduler's count stands)."""
    (tmp_path / "trials").mkdir()
    assert ledger_fields(str(tmp_path), "c000-s000") == {}
    (tmp_path / "trials" / "c000-s000.json").write_text("{not json")
    assert ledger_fields(str(tmp_path), "c000-s000") == {}
    book = trial_ledger(str(tmp_path), "c001-s000")
    book.start()
    book.fail("ValueError: bad")
    fields = ledger_fields(str(tmp_path), "c001-s000")
    assert fields["attempts"] == 1 and fields["last_error"] == "ValueError: bad"


def test_the_ledger_says_where_a_running_epoch_stands_and_the_eta_reads_it(tmp_path):
    """The trial's clock saves (epoch, share done, seconds into it) while an epoch runs
    and clears them after; the progress's probe reads exactly that."""
    import time

    from study.trial.ledger import TrialLedger

    (tmp_path / "trials").mkdir()
    book = TrialLedger(uri=str(tmp_path / "trials" / "c000-s000.json"))
    book.start()
    probe = ledger_probe(str(tmp_path))
    assert probe("c000-s000") is None  # not in an epoch
    share = [0.25]
    with book.clock(before=0.0, period=0.02, epoch=1, fraction=lambda: share[0]):
        deadline = time.monotonic() + 10
        while probe("c000-s000") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        epoch, fraction, seconds = probe("c000-s000")
        assert (epoch, fraction) == (1, 0.25) and seconds > 0
    book.update(1.0)  # the epoch's own measure
    assert probe("c000-s000") is None
    assert probe("c009-s000") is None  # no ledger yet
    assert ledger_probe(None) is None  # no storage root: no probe


def test_a_trial_tells_its_clock_the_share_of_its_epoch_done(tmp_path):
    """What the trial loop hands the ledger's clock: 0 at the epoch's start, rising
    through training, all of it once the epoch's evaluation is done."""
    import contextlib

    import torch

    from study.models import ModelConfig
    from study.trial import TrainConfig, train_trial
    from study.trial.ledger import TrialLedger

    seen = []

    class Spy(TrialLedger):
        @contextlib.contextmanager
        def clock(self, *, epoch=None, fraction=None, **kw):
            seen.append((epoch, "start", fraction()))
            with super().clock(epoch=epoch, fraction=fraction, **kw):
                yield
            seen.append((epoch, "end", fraction()))

    cfg = TrainConfig(
        model=ModelConfig(hidden=16, layers=1, intermediate=16, num_heads=2),
        data="synthetic:200",
        epochs=2,
        batch_size=50,
        head_stats=False,
    )
    book = Spy(uri=str(tmp_path / "trial.json"))
    train_trial(cfg, trial_id="t", checkpoint_dir=tmp_path / "ckpt", device=torch.device("cpu"), ledger=book)
    assert [(e, w) for e, w, _ in seen] == [(0, "start"), (0, "end"), (1, "start"), (1, "end")]
    assert [f for _, w, f in seen if w == "start"] == [0.0, 0.0]
    assert all(f == pytest.approx(1.0) for _, w, f in seen if w == "end"), seen


def test_the_ledger_view_runs_without_ray(tmp_path):
    code = f"""
        from study.scheduling.ledger import ledger_fields, ledger_probe
        assert ledger_fields({str(tmp_path)!r}, "c000-s000") == {{}}
        assert ledger_probe({str(tmp_path)!r})("c000-s000") is None
    """
    assert ray_modules_after(code) == []
