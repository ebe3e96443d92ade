"""One trial: train a model on one data source, evaluate and record every epoch.

A plain function usable without Ray (``study train``) and from the Ray adapter.  It
runs as one process or as one rank of a ``torch.distributed`` group (DDP: each rank a
shard of every batch, metrics summed over ranks, only rank 0 writes tables and
checkpoints).  No host synchronisation inside the training step: losses and
correct counts accumulate on the device and are read once per epoch.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from study.data import DeviceData, hold_out_validation, load_splits
from study.flops import count_parameters, forward_flops
from study.models import build_model, model_name
from study.tables import TableWriter, map_epochs
from study.trial.checkpoint import check_config, load_checkpoint, save_checkpoint
from study.trial.config import TrainConfig
from study.trial.headstats import collect_head_stats
from study.trial.schedule import learning_rate

Report = Callable[[dict[str, Any], "Path | None"], None]


@dataclass(frozen=True)
class TrialResult:
    status: str  # finished | diverged
    epochs_done: int
    best_test_acc: float
    final_test_acc: float
    device_seconds: float
    best_val_acc: float = math.nan  # NaN: no validation split
    final_val_acc: float = math.nan


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def default_device() -> torch.device:
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", 0))
        return torch.device("cuda", local % torch.cuda.device_count())
    return torch.device("cpu")


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.SGD:
    """SGD with momentum; weight decay on every parameter except Gaussian centres
    and spreads (``model.no_weight_decay()``)."""
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name in skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)


def train_trial(
    cfg: TrainConfig,
    *,
    trial_id: str,
    tables: str | os.PathLike | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    study: str = "",
    device: torch.device | None = None,
    report: Report | None = None,
    progress: Callable[[str], None] | None = None,
    extra_run_fields: dict[str, Any] | None = None,
    splits=None,
    ledger=None,
    warn: Callable[[str], None] | None = None,
) -> TrialResult:
    """Train ``cfg`` for ``cfg.epochs`` epochs, resuming from ``checkpoint_dir`` if it
    holds a checkpoint.  After every epoch (rank 0): the ``epochs``/``heads``/``maps``
    parts and the ``runs`` row under ``tables``, a checkpoint in ``checkpoint_dir``,
    then ``report(metrics, checkpoint_dir)`` (every rank; the directory on rank 0 only).
    ``splits``: the already loaded ``load_splits(cfg.data, ...)``, if the caller has it.
    ``cfg.validation`` training images are held out (stratified, from ``cfg.seed``);
    their loss and accuracy are recorded every epoch (``val_*``) and reported.
    ``ledger``: a :class:`~study.trial.ledger.TrialLedger` (rank 0) counting attempts and
    device-seconds across attempts; ``warn`` receives one-line warnings (a damaged
    checkpoint skipped).  A checkpoint of another configuration raises ``CheckpointError``.
    """
    rank, world = _rank_world()
    device = device or default_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)

    if splits is None:
        splits = load_splits(cfg.data, subset=cfg.subset, seed=cfg.seed)
    splits = hold_out_validation(splits, validation=cfg.validation, seed=cfg.seed)
    val_data = None if splits.val_labels is None else DeviceData(
        splits.val_images[rank::world], splits.val_labels[rank::world], device=device)
    train_data = DeviceData(splits.train_images, splits.train_labels, device=device)
    test_data = DeviceData(splits.test_images[rank::world], splits.test_labels[rank::world], device=device)
    mc = cfg.model.replace(num_classes=len(splits.classes))
    torch.manual_seed(cfg.seed)
    model = build_model(mc).to(device)
    n_params = count_parameters(model)
    flops = forward_flops(model, image_size=mc.image_size, in_channels=mc.in_channels)
    optimizer = build_optimizer(model, cfg)

    start_epoch, best_acc, device_seconds, attempts = 0, 0.0, 0.0, 1
    best_val = math.nan if val_data is None else 0.0
    state = load_checkpoint(checkpoint_dir, warn=warn)
    if state is not None:
        check_config(state, model_config=mc.to_dict(), train_config=cfg.to_dict(), where=str(checkpoint_dir))
    if state is not None and state["epoch"] >= cfg.epochs:
        # restarted after it had finished (e.g. a driver died before recording
        # that): nothing to train, nothing to rewrite
        return TrialResult(status="finished", epochs_done=state["epoch"], best_test_acc=state["best_test_acc"],
                           final_test_acc=state["final_test_acc"], device_seconds=state["device_seconds"],
                           best_val_acc=state.get("best_val_acc", math.nan),
                           final_val_acc=state.get("final_val_acc", math.nan))
    if state is not None:
        attempts = state.get("attempts", 1) + 1
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, best_acc = state["epoch"], state["best_test_acc"]
        device_seconds = state["device_seconds"]
        best_val = state.get("best_val_acc", best_val)
        torch.set_rng_state(state["rng_cpu"])
        if device.type == "cuda" and "rng_cuda" in state:
            torch.cuda.set_rng_state(state["rng_cuda"], device)
    if ledger is not None:  # attempts counted at start (ledger.start()), time of every attempt's epochs
        if ledger.attempts == 0:  # not started by the caller (study train): count this attempt now
            ledger.start()
        attempts = ledger.attempts
        device_seconds = max(device_seconds, ledger.device_seconds)

    raw_model = model
    net: nn.Module = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.compile:
        net = torch.compile(net)
    amp = cfg.amp and device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if amp else contextlib.nullcontext

    steps_per_epoch = train_data.num_batches(batch_size=cfg.batch_size, world_size=world, train=True)
    if steps_per_epoch == 0:
        raise ValueError(
            f"batch_size {cfg.batch_size} x {world} rank(s) exceeds the {len(train_data)} training images"
        )
    writer = TableWriter(tables, trial_id=trial_id) if (tables is not None and rank == 0) else None
    # the fixed test images of the content-attention head statistics, normalised once
    head_data = DeviceData(splits.test_images[: cfg.head_images], splits.test_labels[: cfg.head_images],
                           device=device)
    x_heads = head_data.normalise(head_data.images)
    maps_at = set(map_epochs(cfg.map_epochs, cfg.epochs))

    # the whole resolved configuration (every model field of the model built, every
    # training field), then what the data actually gave (sizes after capping)
    run_row = {
        "study": study, "name": model_name(mc), **cfg.replace(model=mc).flat(),
        "data_source": splits.source, "n_train": len(splits.train_labels),
        "n_val": 0 if splits.val_labels is None else len(splits.val_labels), "n_test": len(splits.test_labels),
        "n_params": n_params, "flops": flops, "device": _device_name(device),
        "world_size": world, "attempts": attempts, "error": None, **(extra_run_fields or {}),
    }

    def write_run(status: str, epochs_done: int, final_acc: float) -> None:
        if writer is not None:
            writer.run({**run_row, "status": status, "epochs_done": epochs_done,
                        "best_test_acc": best_acc, "final_test_acc": final_acc,
                        "best_val_acc": _nan_to_none(best_val), "final_val_acc": _nan_to_none(final_val),
                        "device_seconds": device_seconds, "updated_at": time.time()})

    final_acc = float(state["final_test_acc"]) if state is not None else float("nan")
    final_val = float(state.get("final_val_acc", math.nan)) if state is not None else math.nan
    write_run("running", start_epoch, final_acc)
    status = "finished"
    epochs_done = start_epoch
    for epoch in range(start_epoch, cfg.epochs):
        t0 = time.perf_counter()
        net.train()
        loss_sum = torch.zeros((), device=device, dtype=torch.float64)
        correct = torch.zeros((), device=device, dtype=torch.int64)
        seen = 0
        for i, (x, y) in enumerate(train_data.batches(batch_size=cfg.batch_size, epoch=epoch, seed=cfg.seed,
                                                      train=True, rank=rank, world_size=world)):
            lr = learning_rate(step=epoch * steps_per_epoch + i, steps_per_epoch=steps_per_epoch,
                               epochs=cfg.epochs, base_lr=cfg.lr, schedule=cfg.schedule, warmup=cfg.warmup)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with autocast():
                logits = net(x)
                loss = F.cross_entropy(logits.float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(y)
            correct += (logits.detach().argmax(-1) == y).sum()
            seen += len(y)
        train_totals = _reduce(torch.stack([loss_sum, correct.double(), torch.tensor(float(seen), device=device, dtype=torch.float64)]), world)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_seconds = time.perf_counter() - t0
        train_loss = train_totals[0] / train_totals[2]
        if not math.isfinite(train_loss):
            status = "diverged"
            break

        test_loss, test_acc = evaluate(net, test_data, batch_size=cfg.eval_batch_size, world=world, autocast=autocast)
        val_loss = val_acc = None
        if val_data is not None:
            val_loss, val_acc = evaluate(net, val_data, batch_size=cfg.eval_batch_size, world=world,
                                         autocast=autocast)
            best_val, final_val = max(best_val, val_acc), val_acc
        epoch_seconds = time.perf_counter() - t0
        device_seconds += epoch_seconds * world
        best_acc = max(best_acc, test_acc)
        final_acc = test_acc
        epochs_done = epoch + 1
        if ledger is not None:
            ledger.update(device_seconds)

        ckpt = None
        if rank == 0:
            hs_seconds = 0.0
            if writer is not None and cfg.head_stats and hasattr(raw_model, "attention_layers"):
                h0 = time.perf_counter()
                raw_model.eval()
                with autocast():
                    head_rows, map_rows = collect_head_stats(raw_model, x_heads, radius=cfg.map_radius)
                writer.rows("heads", epoch, head_rows)
                if epoch in maps_at:
                    writer.rows("maps", epoch, map_rows)
                hs_seconds = time.perf_counter() - h0
            metrics = {
                "epoch": epoch, "train_loss": train_loss, "train_acc": train_totals[1] / train_totals[2],
                "val_loss": val_loss, "val_acc": val_acc,
                "test_loss": test_loss, "test_acc": test_acc, "lr": lr, "seconds": epoch_seconds,
                "images_per_s": train_totals[2] / train_seconds, "head_stats_seconds": hs_seconds,
            }
            if writer is not None:
                writer.rows("epochs", epoch, [{k: v for k, v in metrics.items() if k != "epoch"}])
                write_run("running" if epoch + 1 < cfg.epochs else "finished", epochs_done, final_acc)
            if checkpoint_dir is not None:
                save_checkpoint(checkpoint_dir, {
                    "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch + 1, "best_test_acc": best_acc, "final_test_acc": final_acc,
                    "device_seconds": device_seconds, "attempts": attempts, "rng_cpu": torch.get_rng_state(),
                    "best_val_acc": best_val, "final_val_acc": final_val,
                    # what the model is: `study export` / `load_trained` rebuild it from these
                    "model_config": mc.to_dict(), "train_config": cfg.to_dict(),
                    **({"rng_cuda": torch.cuda.get_rng_state(device)} if device.type == "cuda" else {}),
                })
                ckpt = Path(checkpoint_dir)
            if progress is not None:
                progress(
                    f"epoch {epoch + 1}/{cfg.epochs}  train_loss {train_loss:.4f}  "
                    f"train_acc {metrics['train_acc']:.4f}  "
                    + (f"val_acc {val_acc:.4f}  " if val_acc is not None else "")
                    + f"test_loss {test_loss:.4f}  "
                    f"test_acc {test_acc:.4f}  {epoch_seconds:.1f} s  {metrics['images_per_s']:.0f} img/s"
                )
        else:
            metrics = {"epoch": epoch, "test_acc": test_acc, "val_acc": val_acc, "train_loss": train_loss}
        if report is not None:
            report({**metrics, "best_test_acc": best_acc, "best_val_acc": _nan_to_none(best_val),
                    "status": "running", "device_seconds": device_seconds}, ckpt)

    write_run(status, epochs_done, final_acc)
    if writer is not None:
        writer.close()  # one compacted file per table for the finished trial
    return TrialResult(status=status, epochs_done=epochs_done, best_test_acc=best_acc,
                       final_test_acc=final_acc, device_seconds=device_seconds, best_val_acc=best_val,
                       final_val_acc=final_val)


@torch.no_grad()
def evaluate(net: nn.Module, data: DeviceData, *, batch_size: int, world: int, autocast) -> tuple[float, float]:
    """(loss, accuracy) over ``data``, summed across ranks."""
    net.eval()
    device = data.device
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.float64)
    for x, y in data.batches(batch_size=batch_size, epoch=0, seed=0, train=False):
        with autocast():
            logits = net(x)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum")
        correct += (logits.argmax(-1) == y).sum()
    n = torch.tensor(float(len(data)), device=device, dtype=torch.float64)
    totals = _reduce(torch.stack([loss_sum, correct, n]), world)
    return totals[0] / totals[2], totals[1] / totals[2]


def _reduce(values: torch.Tensor, world: int) -> list[float]:
    """Sum across ranks (one collective), then one host read."""
    if world > 1:
        dist.all_reduce(values)
    return values.tolist()


def _nan_to_none(v: float) -> float | None:
    return None if v is None or math.isnan(v) else v


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"
