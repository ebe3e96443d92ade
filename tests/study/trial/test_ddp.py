"""DDP: 2 gloo ranks with per-rank batch b equal 1 rank with batch 2b (docs/design.md §10)."""

import gc
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from study.models import ModelConfig
from study.trial import TrainConfig, train_trial
from study.trial.checkpoint import load_checkpoint

MODEL = ModelConfig(hidden=16, layers=2, intermediate=24, num_heads=2, dropout=0.0, attention_dropout=0.0)


def config(batch_size):
    # synthetic:60 -> 3 optimisation steps of a global batch of 20
    return TrainConfig(
        model=MODEL, data="synthetic:60", epochs=1, batch_size=batch_size, warmup=0.0, head_stats=False
    )


def _both_ranks_done() -> None:
    """Wait for the other rank before this one tears its group down.  A rank that destroys
    its gloo group and exits while the other still finishes its trial (rank 0 writes the
    checkpoint) aborted at exit ("terminate called without an active exception",
    SIGABRT) in about one run in six; a monitored barrier fails in a minute, naming the
    missing rank, instead of hanging if the other rank died."""
    dist.monitored_barrier(timeout=timedelta(seconds=60))


def _rank(rank, world, init_file, ckpt):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    gc.disable()  # what the trial leaves alive must not depend on when the collector runs
    try:
        train_trial(config(10), trial_id="ddp", checkpoint_dir=ckpt, device=torch.device("cpu"))
        # The DDP wrapper holds the gloo group; left to the cycle collector (a reference
        # cycle through the trial's frames) the group outlives destroy_process_group and
        # the rank aborts at exit (SIGABRT) about one run in six.
        alive = [o for o in gc.get_objects() if isinstance(o, nn.parallel.DistributedDataParallel)]
        assert not alive, (
            f"rank {rank}: {len(alive)} DistributedDataParallel wrapper(s) alive after the trial"
        )
        _both_ranks_done()
    finally:
        gc.enable()
        dist.destroy_process_group()


def test_two_gloo_ranks_match_one_rank_with_double_batch(tmp_path):
    single = tmp_path / "single"
    train_trial(config(20), trial_id="one", checkpoint_dir=single, device=torch.device("cpu"))
    ddp = tmp_path / "ddp"
    mp.spawn(_rank, args=(2, str(tmp_path / "init"), str(ddp)), nprocs=2, join=True)
    a, b = load_checkpoint(single), load_checkpoint(ddp)
    assert a["epoch"] == b["epoch"] == 1
    for k, v in a["model"].items():
        torch.testing.assert_close(b["model"][k], v, rtol=0, atol=1e-5)
    # the 3 steps really moved the weights: the comparison is not between two inits
    from study.models import build_model

    torch.manual_seed(0)
    init = build_model(MODEL).state_dict()
    assert max((a["model"][k] - init[k]).abs().max().item() for k in init) > 1e-3


#: every augmentation of the training protocol (study.trial.protocol) at once
PROTOCOL = dict(cutmix_alpha=1.0, mixup_alpha=0.5, randaugment_ops=2, label_smoothing=0.1)


def _protocol_rank(rank, world, init_file, ckpt):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)  # ranks draw their own augmentations
        result = train_trial(
            config(10).replace(**PROTOCOL), trial_id="ddp", checkpoint_dir=ckpt, device=torch.device("cpu")
        )
        assert result.status == "finished" and result.epochs_done == 1, (rank, result)
        _both_ranks_done()
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_train_with_every_augmentation_of_the_protocol(tmp_path):
    ddp = tmp_path / "ddp"
    mp.spawn(_protocol_rank, args=(2, str(tmp_path / "init"), str(ddp)), nprocs=2, join=True)
    state = load_checkpoint(ddp)
    assert state["epoch"] == 1 and state["train_config"]["cutmix_alpha"] == 1.0
    from study.models import build_model

    torch.manual_seed(0)
    init = build_model(MODEL).state_dict()
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    assert max((state["model"][k] - init[k]).abs().max().item() for k in init) > 1e-3
