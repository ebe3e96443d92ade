"""One trial: train a model on one data source, evaluate and record every epoch, as one
process or one rank of a DDP group (metrics summed over ranks, rank 0 writes tables and
checkpoints).  No host synchronisation inside the training step: losses and correct
counts accumulate on the device and are read once per epoch.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from study.cost.flops import count_parameters, forward_flops
from study.data import DeviceData, hold_out_validation, load_splits
from study.device.paths import (
    DevicePaths,
    capture_rng,
    compile_model,
    ddp_device_ids,
    restore_rng,
    select_device,
    synchronize,
)
from study.models import build_model, model_name
from study.models.cost import TRAIN_FORWARDS
from study.results.tables import INIT_EPOCH, TableWriter
from study.trial.checkpoint import check_config, load_checkpoint, save_checkpoint
from study.trial.config import TrainConfig, batch_overflow
from study.trial.headstats import collect_head_stats
from study.trial.protocol import Protocol, build_protocol
from study.trial.schedule import learning_rate
from study.trial.verdict import failed_to_train

Report = Callable[[dict[str, Any], "str | None"], None]
#: ``(epoch, images trained so far in it, images it trains)`` after every training step,
#: counted on the host from the batch sizes (no device read)
StepProgress = Callable[[int, int, int], None]


@dataclass(frozen=True)
class TrialResult:
    status: str  # finished | diverged
    epochs_done: int
    best_test_acc: float
    final_test_acc: float
    device_seconds: float
    best_val_acc: float = math.nan  # NaN: no validation split
    final_val_acc: float = math.nan
    failed_to_train: str | None = None  # why it did not train after its warm-up (study.trial.verdict)


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.SGD:
    """SGD with momentum; weight decay on every parameter except Gaussian centres
    and spreads (``model.no_weight_decay()``)."""
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    named = list(model.named_parameters())
    no_decay = [p for name, p in named if name in skip]
    groups = [{"params": [p for name, p in named if name not in skip], "weight_decay": cfg.weight_decay}]
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
    paths: DevicePaths | None = None,
    step_progress: StepProgress | None = None,
) -> TrialResult:
    """Train ``cfg`` for ``cfg.epochs`` epochs, resuming from ``checkpoint_dir`` (one of another
    configuration raises ``CheckpointError``).  After every epoch rank 0 writes the tables and a
    checkpoint, then every rank calls ``report(metrics, checkpoint_dir or None)``.  ``ledger``
    (rank 0) counts attempts and device-seconds, also of an epoch cut short; ``paths``: the
    device branches (any selectable on CPU); ``step_progress(epoch, images, total)`` after every step."""
    t = _set_up(cfg, splits=splits, device=device, paths=paths)
    done = _resume(t, checkpoint_dir=checkpoint_dir, ledger=ledger, warn=warn)
    if done is not None:
        return done
    _prepare(t, tables=tables, trial_id=trial_id, study=study, extra_run_fields=extra_run_fields)
    _write_run(t, "running")
    try:
        if (
            t.start_epoch == 0
        ):  # the untrained model's (a restart from scratch rebuilds the same seeded model)
            if ledger is not None:
                ledger.ensure_current()
            _head_stats(t, INIT_EPOCH, maps=bool(t.maps_at))
        _epochs(
            t,
            checkpoint_dir=checkpoint_dir,
            report=report,
            progress=progress,
            ledger=ledger,
            step_progress=step_progress,
        )
    except KeyboardInterrupt:  # Ctrl-C in `study train`: the row says so, the ledger kept the time
        if ledger is not None:
            t.device_seconds = max(t.device_seconds, ledger.device_seconds)
        with contextlib.suppress(Exception):  # a failing storage must not hide the interruption
            _write_run(t, "interrupted")
        raise
    finally:
        # The DDP wrapper's reducer holds the process group: release it now, not when the cycle collector
        # finds ``t``; a gloo group alive at interpreter exit aborts the finished rank (SIGABRT,
        # "terminate called without an active exception").
        t.net = None
    if ledger is not None:  # the final row and the compacted tables, unless a newer attempt has started
        ledger.ensure_current()
    _write_run(t, t.status)
    if t.writer is not None:
        t.writer.close()  # one compacted file per table for the finished trial
    return _result(t)


def _epochs(t: _Trial, *, checkpoint_dir, report, progress, ledger, step_progress=None) -> None:
    """Every remaining epoch; stops at a non-finite training loss (``diverged``)."""
    cfg = t.cfg
    for epoch in range(t.start_epoch, cfg.epochs):
        t0 = time.perf_counter()
        t.epoch_done = 0.0
        clock = (
            ledger.clock(before=t.device_seconds, scale=t.world, epoch=epoch, fraction=t.epoch_fraction)
            if ledger is not None
            else contextlib.nullcontext()
        )
        with clock:
            trained = _train_epoch(t, epoch, t0, step_progress=step_progress)
            if not math.isfinite(trained["train_loss"]):
                t.status = "diverged"
                return
            metrics = _evaluate_epoch(t, epoch, trained, t0)
        if ledger is not None:
            ledger.update(t.device_seconds)
        ckpt = None
        if t.rank == 0:
            _record(t, epoch, metrics, progress)
            ckpt = _checkpoint(t, checkpoint_dir)
        else:
            metrics = {k: metrics[k] for k in ("epoch", "test_acc", "val_acc", "train_loss")}
        if report is not None:
            report(
                {
                    **metrics,
                    "best_test_acc": t.best_test_acc,
                    "best_val_acc": _nan_to_none(t.best_val_acc),
                    "status": "running",
                    "device_seconds": t.device_seconds,
                },
                ckpt,
            )


@dataclass
class _Trial:
    """One trial's state while it trains (what the steps of :func:`train_trial` share)."""

    cfg: TrainConfig
    mc: Any  # the ModelConfig actually built (num_classes from the data)
    rank: int
    world: int
    device: torch.device
    paths: DevicePaths
    splits: Any
    train_data: DeviceData
    val_data: DeviceData | None
    test_data: DeviceData
    model: nn.Module  # the raw model (what checkpoints hold)
    optimizer: torch.optim.Optimizer
    steps_per_epoch: int
    n_params: int
    flops: float
    protocol: Protocol = field(default_factory=Protocol)
    net: nn.Module | None = None  # the model as trained (DDP / compiled)
    autocast: Callable[[], Any] = contextlib.nullcontext
    writer: TableWriter | None = None
    x_heads: torch.Tensor | None = None
    maps_at: frozenset = frozenset()
    run_row: dict[str, Any] = field(default_factory=dict)
    start_epoch: int = 0
    epochs_done: int = 0
    best_test_acc: float = 0.0
    final_test_acc: float = math.nan
    best_val_acc: float = math.nan
    final_val_acc: float = math.nan
    device_seconds: float = 0.0
    attempts: int = 1
    status: str = "finished"
    failed_to_train: str | None = None  # :func:`study.trial.verdict.failed_to_train` of the latest epoch
    epoch_done: float = 0.0  # forward passes of the running epoch done (on this rank)

    def epoch_fraction(self) -> float:
        """The share of the running epoch's forward passes done (a training image counts
        ``TRAIN_FORWARDS``, as :attr:`study.cost.plan.TrialPlan.weight`), for the driver's ETA."""
        total = (
            TRAIN_FORWARDS * len(self.train_data) / self.world
            + len(self.test_data)
            + len(self.val_data or ())
        )
        return self.epoch_done / total if total > 0 else 0.0


def _set_up(cfg: TrainConfig, *, splits, device: torch.device | None, paths: DevicePaths | None) -> _Trial:
    """Data (validation held out, this rank's shard of the evaluation sets), the seeded model."""
    rank, world = (
        (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
    )
    if device is None:  # rank LOCAL_RANK's GPU, if any
        device = (
            torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    paths = paths or DevicePaths.for_device(device, amp=cfg.amp, compile=cfg.compile)
    paths.check_compile(
        device,
        model=compile_model(cfg.model),
        flag="training.compile",
        instead="train it without (training.compile: false; study train without --compile)",
    )
    select_device(device)
    if splits is None:
        splits = load_splits(cfg.data, subset=cfg.subset, seed=cfg.seed)
    splits = hold_out_validation(splits, validation=cfg.validation, seed=cfg.seed)
    on_device = functools.partial(DeviceData, device=device, pinned=paths.pinned_transfer)
    val_data = (
        None
        if splits.val_labels is None
        else on_device(splits.val_images[rank::world], splits.val_labels[rank::world])
    )
    train_data = on_device(splits.train_images, splits.train_labels)
    test_data = on_device(splits.test_images[rank::world], splits.test_labels[rank::world])
    # the classes the data has (within num_classes' bounds: study.limits.MAX_CLASSES): the validated model
    # with that one field, not validated again
    mc = cfg.model.model_copy(update={"num_classes": len(splits.classes)})
    torch.manual_seed(cfg.seed)
    model = build_model(mc).to(device)
    return _Trial(
        cfg=cfg,
        mc=mc,
        rank=rank,
        world=world,
        device=device,
        paths=paths,
        splits=splits,
        train_data=train_data,
        val_data=val_data,
        test_data=test_data,
        model=model,
        optimizer=build_optimizer(model, cfg),
        steps_per_epoch=train_data.num_batches(batch_size=cfg.batch_size, world_size=world, train=True),
        n_params=count_parameters(model),
        protocol=build_protocol(cfg, num_classes=mc.num_classes),
        flops=forward_flops(model, image_size=mc.image_size, in_channels=mc.in_channels),
        best_val_acc=math.nan if val_data is None else 0.0,
    )


def _resume(t: _Trial, *, checkpoint_dir, ledger, warn) -> TrialResult | None:
    """Continue from the latest intact checkpoint and count this attempt in the ledger; a
    checkpoint of a finished trial (a driver died before recording it) is its result."""
    state = load_checkpoint(checkpoint_dir, warn=warn)
    if state is not None:
        check_config(
            state, model_config=t.mc.to_dict(), train_config=t.cfg.to_dict(), where=str(checkpoint_dir)
        )
        t.start_epoch = t.epochs_done = state["epoch"]
        t.best_test_acc, t.final_test_acc = state["best_test_acc"], float(state["final_test_acc"])
        t.best_val_acc = state.get("best_val_acc", t.best_val_acc)
        t.final_val_acc = float(state.get("final_val_acc", math.nan))
        t.device_seconds = state["device_seconds"]
        if t.start_epoch >= t.cfg.epochs:
            return _result(t)
        t.attempts = state.get("attempts", 1) + 1
        t.model.load_state_dict(state["model"])
        t.optimizer.load_state_dict(state["optimizer"])
        restore_rng(state, t.device, cuda=t.paths.cuda_rng)
    if ledger is not None:  # attempts counted at start (ledger.start()), time of every attempt
        if ledger.attempts == 0:  # not started by the caller (study train): count this attempt now
            ledger.start()
        t.attempts = ledger.attempts
        t.device_seconds = max(t.device_seconds, ledger.device_seconds)
    return None


def _prepare(t: _Trial, *, tables, trial_id: str, study: str, extra_run_fields) -> None:
    """The model as trained (DDP, ``torch.compile``, autocast: as ``t.paths`` selects), the
    table writer (rank 0), the head-statistics images and the ``runs`` row's constant part."""
    cfg, device = t.cfg, t.device
    t.net = t.model
    if t.world > 1:
        t.net = nn.parallel.DistributedDataParallel(t.model, device_ids=ddp_device_ids(device))
    t.net = t.paths.compiled(t.net)
    t.autocast = t.paths.autocast_factory(device)
    why = batch_overflow(cfg.batch_size, t.world, images=len(t.train_data))
    if why:  # no step: t.steps_per_epoch == 0
        raise ValueError(f"batch_size: {why}")
    t.writer = TableWriter(tables, trial_id=trial_id) if (tables is not None and t.rank == 0) else None
    # the fixed test images of the content-attention head statistics, normalised once
    splits = t.splits
    head_data = DeviceData(
        splits.test_images[: cfg.head_images],
        splits.test_labels[: cfg.head_images],
        device=device,
        pinned=t.paths.pinned_transfer,
    )
    t.x_heads = head_data.normalise(head_data.images)
    t.maps_at = frozenset(cfg.maps_at)
    # every field of the configuration (the model as built), then what the data gave (sizes after capping)
    t.run_row = {
        "study": study,
        "name": model_name(t.mc),
        **cfg.model_copy(update={"model": t.mc}).flat(),
        "data_source": splits.source,
        "n_train": len(splits.train_labels),
        "n_val": 0 if splits.val_labels is None else len(splits.val_labels),
        "n_test": len(splits.test_labels),
        "n_params": t.n_params,
        "flops": t.flops,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "world_size": t.world,
        "attempts": t.attempts,
        "error": None,
        **(extra_run_fields or {}),
    }


def _write_run(t: _Trial, status: str) -> None:
    if t.writer is not None:
        t.writer.run(
            {
                **t.run_row,
                "status": status,
                "epochs_done": t.epochs_done,
                "best_test_acc": t.best_test_acc,
                "final_test_acc": t.final_test_acc,
                "best_val_acc": _nan_to_none(t.best_val_acc),
                "final_val_acc": _nan_to_none(t.final_val_acc),
                "device_seconds": t.device_seconds,
                "failed_to_train": t.failed_to_train,
                "updated_at": time.time(),
            }
        )


def _train_epoch(
    t: _Trial, epoch: int, t0: float, *, step_progress: StepProgress | None = None
) -> dict[str, float]:
    """One pass over this rank's shard (``train_loss``, ``train_acc``, ``lr``, ``images_per_s``);
    losses and correct counts stay on the device until the epoch's one read."""
    cfg, device = t.cfg, t.device
    t.net.train()
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    seen = 0
    total = t.steps_per_epoch * cfg.batch_size
    lr = cfg.lr
    for i, (x, y) in enumerate(_train_batches(t, epoch)):
        lr = _set_lr(t, epoch * t.steps_per_epoch + i)
        loss, right = _train_step(t, x, y)
        loss_sum += loss * len(y)
        correct += right
        seen += len(y)
        t.epoch_done = TRAIN_FORWARDS * seen
        if step_progress is not None:
            step_progress(epoch, seen, total)
    totals = _reduce(
        torch.stack(
            [loss_sum, correct.double(), torch.tensor(float(seen), device=device, dtype=torch.float64)]
        ),
        t.world,
    )
    synchronize(device)
    return {
        "train_loss": totals[0] / totals[2],
        "train_acc": totals[1] / totals[2],
        "lr": lr,
        "images_per_s": totals[2] / (time.perf_counter() - t0),
    }


def _set_lr(t: _Trial, step: int) -> float:
    """The schedule's lr of optimisation ``step`` (0-based), set on every parameter group."""
    cfg = t.cfg
    lr = learning_rate(
        step=step,
        steps_per_epoch=t.steps_per_epoch,
        epochs=cfg.epochs,
        base_lr=cfg.lr,
        schedule=cfg.schedule,
        warmup_steps=cfg.warmup_steps_for(t.steps_per_epoch),
    )
    for group in t.optimizer.param_groups:
        group["lr"] = lr
    return lr


def first_steps(
    cfg: TrainConfig, *, steps: int = 1, splits=None, device: torch.device | None = None
) -> list[float]:
    """The training losses of ``cfg``'s first ``steps`` optimisation steps, taken as its trial takes them
    (its data, model, optimiser, protocol and lr schedule; no evaluation, tables or checkpoint): whether a
    configuration's values run, cheaply (tests/study/trial/test_numeric_bounds.py)."""
    t = _set_up(cfg, splits=splits, device=device, paths=None)
    t.net = t.model
    losses = []
    for i, (x, y) in zip(range(steps), _train_batches(t, 0)):
        _set_lr(t, i)
        losses.append(float(_train_step(t, x, y)[0]))
    return losses


def _train_batches(t: _Trial, epoch: int):
    """This rank's batches of ``epoch``: cropped, flipped, the protocol's policy, normalised."""
    return t.train_data.batches(
        batch_size=t.cfg.batch_size,
        epoch=epoch,
        seed=t.cfg.seed,
        train=True,
        rank=t.rank,
        world_size=t.world,
        policy=t.protocol.images if t.protocol.policy is not None else None,
    )


def _train_step(t: _Trial, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimiser step with the protocol's mixing and loss; returns the batch's mean loss
    and correct count (:meth:`Protocol.hard_labels`) as device tensors."""
    x, target = t.protocol.targets(x, y)
    with t.autocast():
        logits = t.net(x)
        loss = t.protocol.loss(logits.float(), target)
    t.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    t.optimizer.step()
    return loss.detach(), (logits.detach().argmax(-1) == Protocol.hard_labels(target)).sum()


def _evaluate_epoch(t: _Trial, epoch: int, trained: dict[str, float], t0: float) -> dict[str, Any]:
    run = functools.partial(
        evaluate, t.net, batch_size=t.cfg.eval_batch_size, world=t.world, autocast=t.autocast
    )
    test_loss, test_acc = run(t.test_data)
    t.epoch_done += len(t.test_data)
    val_loss = val_acc = None
    if t.val_data is not None:
        val_loss, val_acc = run(t.val_data)
        t.epoch_done += len(t.val_data)
        t.best_val_acc, t.final_val_acc = max(t.best_val_acc, val_acc), val_acc
    epoch_seconds = time.perf_counter() - t0
    t.device_seconds += epoch_seconds * t.world
    t.best_test_acc = max(t.best_test_acc, test_acc)
    t.final_test_acc = test_acc
    t.epochs_done = epoch + 1
    return {
        "epoch": epoch,
        "train_loss": trained["train_loss"],
        "train_acc": trained["train_acc"],
        "val_loss": val_loss,
        "val_acc": val_acc,
        "test_loss": test_loss,
        "test_acc": test_acc,
        "lr": trained["lr"],
        "seconds": epoch_seconds,
        "images_per_s": trained["images_per_s"],
    }


def _head_stats(t: _Trial, epoch: int, *, maps: bool) -> float:
    cfg, writer = t.cfg, t.writer
    if writer is None or not cfg.head_stats or not hasattr(t.model, "attention_layers"):
        return 0.0
    h0 = time.perf_counter()
    t.model.eval()
    with t.autocast():
        head_rows, map_rows = collect_head_stats(t.model, t.x_heads, radius=cfg.map_radius)
    writer.rows("heads", epoch, head_rows)
    if maps:
        writer.rows("maps", epoch, map_rows)
    return time.perf_counter() - h0


def _record(t: _Trial, epoch: int, metrics: dict[str, Any], progress) -> None:
    """Rank 0: head statistics, the ``epochs`` and ``runs`` rows, the progress line."""
    cfg, writer = t.cfg, t.writer
    metrics["head_stats_seconds"] = _head_stats(t, epoch, maps=epoch in t.maps_at)
    t.failed_to_train = failed_to_train(
        train_loss=metrics["train_loss"],
        test_loss=metrics["test_loss"],
        test_acc=metrics["test_acc"],
        num_classes=t.mc.num_classes,
        n_test=len(t.splits.test_labels),
        warmed_up=(epoch + 1) * t.steps_per_epoch >= cfg.warmup_steps_for(t.steps_per_epoch),
    )
    if writer is not None:
        writer.rows("epochs", epoch, [{k: v for k, v in metrics.items() if k != "epoch"}])
        _write_run(t, "running" if epoch + 1 < cfg.epochs else "finished")
    if progress is not None:
        val_acc = metrics["val_acc"]
        progress(
            f"epoch {epoch + 1}/{cfg.epochs}  train_loss {metrics['train_loss']:.4f}  "
            f"train_acc {metrics['train_acc']:.4f}  "
            + (f"val_acc {val_acc:.4f}  " if val_acc is not None else "")
            + f"test_loss {metrics['test_loss']:.4f}  test_acc {metrics['test_acc']:.4f}  "
            f"{metrics['seconds']:.1f} s  {metrics['images_per_s']:.0f} img/s"
        )


def _checkpoint(t: _Trial, checkpoint_dir) -> str | None:
    if checkpoint_dir is None:
        return None
    save_checkpoint(
        checkpoint_dir,
        {
            "model": t.model.state_dict(),
            "optimizer": t.optimizer.state_dict(),
            "epoch": t.epochs_done,
            "best_test_acc": t.best_test_acc,
            "final_test_acc": t.final_test_acc,
            "device_seconds": t.device_seconds,
            "attempts": t.attempts,
            **capture_rng(t.device, cuda=t.paths.cuda_rng),
            "best_val_acc": t.best_val_acc,
            "final_val_acc": t.final_val_acc,
            # what the model is: `study export` / `load_trained` rebuild it from these
            "model_config": t.mc.to_dict(),
            "train_config": t.cfg.to_dict(),
        },
    )
    return str(checkpoint_dir)


def _result(t: _Trial) -> TrialResult:
    return TrialResult(**{f.name: getattr(t, f.name) for f in fields(TrialResult)})


@torch.no_grad()
def evaluate(
    net: nn.Module, data: DeviceData, *, batch_size: int, world: int, autocast
) -> tuple[float, float]:
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
    if world > 1:
        dist.all_reduce(values)
    return values.tolist()


def _nan_to_none(v: float) -> float | None:
    return None if math.isnan(v) else v
