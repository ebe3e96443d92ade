"""``study train``: one trial from flags, writing the tables a study writes."""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from pathlib import Path

from study.cliutil import (
    add_config_flag,
    add_model_flags,
    check_model_params,
    config_from_flags,
    flag,
    local_path,
    model_overrides,
)
from study.datachecks import check_data, check_sizes, checked_splits
from study.errors import EXIT_SIGINT, EXIT_STORAGE, CheckpointError, StorageError, UsageError
from study.results.metafile import MetaFileError, read_object
from study.results.storage import file_in_the_way
from study.trial import TrainConfig
from study.trial.config import PROTOCOL_FIELDS, WARMUP_FIELDS

#: a trial id names its table parts (tables/runs/<id>.parquet): no '/' or '..', and no
#: first character the table readers skip (study.results.tables.SKIPPED_PREFIXES: '.', '_')
_TRIAL_ID = re.compile(r"[A-Za-z0-9-][A-Za-z0-9._-]{0,127}")


#: the flags of TrainConfig's fields, in their order of ``--help`` (the field: its metavar, its help); each
#: one's type, bounds, default and shown values are the field's (:func:`study.cliutil.add_config_flag`)
TRAIN_FLAGS = {
    "data": (None, "synthetic | cifar10[:ROOT] | image-folder tree or .tar/.tar.gz of one"),
    "subset": (None, "use this many training images"),
    "validation": (
        "N",
        "hold out N training images (or a fraction in (0, 1)), stratified, drawn from --seed; "
        "their loss/accuracy is recorded every epoch (default 0: none)",
    ),
    "epochs": (None, None),
    "batch_size": (None, None),
    "lr": (None, None),
    "weight_decay": (None, None),
    # one form of the warm-up (a mutually exclusive group: study.trial.config.WARMUP_FIELDS)
    "warmup": (
        "FRACTION",
        "linear warm-up over this fraction of all steps, in [0, 1) (default: the paper's 0.05)",
    ),
    "warmup_epochs": ("E", "linear warm-up over E epochs (E <= --epochs)"),
    "warmup_steps": ("N", "linear warm-up over N optimisation steps"),
    "schedule": (None, None),
    "seed": (None, None),
    "compile": (None, "torch.compile the model"),
    "amp": (None, "disable bf16 autocast on CUDA"),
    "head_stats": (None, None),
    "map_epochs": (
        "WHEN",
        "epochs that store attention maps (0-based): auto (first ten, log-spaced, last), "
        "all, last, none, or a comma-separated list like 0,9,299 (default: auto)",
    ),
    # the training protocol (study.trial.config.PROTOCOL_FIELDS): a group of its own
    "cutmix_alpha": ("A", "CutMix with mixing ratio ~ Beta(A, A) (0: off)"),
    "mixup_alpha": (
        "A",
        "MixUp with mixing ratio ~ Beta(A, A) (0: off; with CutMix: one of the two per batch)",
    ),
    "randaugment_ops": ("N", "RandAugment: N operations per image (0: off)"),
    "randaugment_magnitude": ("M", "RandAugment's magnitude, 0-30"),
    "autoaugment": ("POLICY", "AutoAugment policy: none, cifar10, imagenet, svhn"),
    "label_smoothing": ("EPS", "cross-entropy label smoothing in [0, 1)"),
}


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train one model (no Ray) and write its tables",
        description="Train one model with the paper's recipe and write runs/epochs/heads/maps "
        "tables under --out (readable by `analysis`), with a checkpoint per epoch; re-running "
        "with the same --out resumes.",
    )
    add_model_flags(p)
    g = p.add_argument_group("training")
    warmup = g.add_mutually_exclusive_group()
    protocol = p.add_argument_group("training protocol (default: off, the paper's recipe)")
    for field, (metavar, text) in TRAIN_FLAGS.items():
        group = warmup if field in WARMUP_FIELDS else protocol if field in PROTOCOL_FIELDS else g
        add_config_flag(group, TrainConfig, field, metavar, text, _number if field == "validation" else None)
    g.add_argument("--out", type=local_path, default=Path("results/train"), help="output folder")
    g.add_argument(
        "--trial-id",
        help="trial id: letters, digits, '.', '_', '-', not starting with '.' or '_' "
        "(default: --out's folder name, made into one)",
    )
    g.add_argument(
        "--quiet",
        action="store_true",
        help="no per-epoch progress line (and no progress bar, shown only when stderr is a terminal)",
    )
    p.set_defaults(func=run)


def derive_trial_id(out: Path) -> str:
    """The trial id of an ``--out`` folder: its name made into one (``.hidden_out`` → ``hidden_out``),
    else random."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", out.resolve().name).lstrip("._")[:128]
    return name if _TRIAL_ID.fullmatch(name) else uuid.uuid4().hex[:8]


def run(args: argparse.Namespace) -> int:
    # every flag and what the data source promises are checked before torch is imported
    # (study.trial.config and study.models.config are torch-free): a refusal costs < 1 s CPU
    prog = "study train"
    mc = config_from_flags(**model_overrides(args))
    flags = {k: getattr(args, k) for k in TRAIN_FLAGS}
    # the model's bounds and rules, as a study file's
    cfg = config_from_flags(TrainConfig, **flags | {"model": mc})
    out: Path = args.out
    blocker = file_in_the_way(out / "tables")  # --out itself, or a folder above it
    if blocker is not None:
        raise UsageError(f"--out: {blocker} is not a directory")
    if args.trial_id is not None and not _TRIAL_ID.fullmatch(args.trial_id):
        raise UsageError(
            f"--trial-id: must be 1 to 128 letters, digits, '.', '_' or '-' (not starting with '.' "
            f"or '_'), got {args.trial_id[:60]!r}"
        )
    trial_id = _trial_id(out, args.trial_id)
    sizes = check_data("--data", cfg.data)
    _check_ledger(out / "trial.json")
    _check_checkpoint(out / "checkpoint", cfg)
    check_sizes(
        cfg.data,
        sizes=sizes,
        subset=cfg.subset,
        validation=cfg.validation,
        batch=cfg.batch_size,
        workers=1,
        where=flag,
    )
    from study.tuning.lock import StudyLock

    # one `study train` per --out folder (a second would train the same trial into it), taken before torch is
    # imported: a second is refused in well under a second; released with the folders it created, so a
    # refused train leaves none (the first write: after every input that needs no torch was accepted)
    lock = StudyLock(
        root=str(out), name=trial_id, busy=f"--out: {out} is being trained into by another study train"
    )
    try:
        lock.acquire()
    except OSError as e:
        raise UsageError(f"--out: cannot create {out} ({e.strerror or e})") from None
    try:
        return _train(args, cfg, out=out, trial_id=trial_id, sizes=sizes, prog=prog)
    finally:  # (main prints a refusal raised in _train only after this)
        lock.release()  # the folder is free when the command ends, not only once this process has


def _train(args: argparse.Namespace, cfg: TrainConfig, *, out: Path, trial_id: str, sizes, prog: str) -> int:
    """``study train`` once --out's lock is held: the checks that need torch, then the training."""
    check_model_params(cfg.model)  # (imports torch: it builds the model on the meta device)
    # on the device train_trial picks (CUDA if any): refused unless verified, before any write
    if cfg.compile:
        import torch

        from study.device.paths import DevicePaths, compile_model

        device = "cuda" if torch.cuda.is_available() else "cpu"
        DevicePaths.for_device(device, compile=True).check_compile(
            device, model=compile_model(cfg.model), flag="--compile", instead="train without --compile"
        )
    bar = None if args.quiet or not sys.stderr.isatty() else _EpochBar(epochs=cfg.epochs, stream=sys.stderr)
    say = bar.line if bar is not None else (lambda line: print(line, file=sys.stderr, flush=True))
    progress = None if args.quiet else say
    splits = checked_splits(
        cfg.data,
        subset=cfg.subset,
        validation=cfg.validation,
        seed=cfg.seed,
        batch=cfg.batch_size,
        workers=1,
        progress=progress,
        where=flag,
        sizes=sizes,
    )
    from study.trial import train_trial
    from study.trial.ledger import TrialLedger

    book = TrialLedger(uri=str(out / "trial.json"))  # started once the checkpoint is accepted
    try:  # each line below goes through say(): no half-drawn bar above it
        result = train_trial(
            cfg,
            trial_id=trial_id,
            tables=out / "tables",
            checkpoint_dir=out / "checkpoint",
            progress=progress,
            splits=splits,
            ledger=book,
            warn=lambda line: say(f"{prog}: warning: {line}"),
            step_progress=bar.step if bar is not None else None,
        )
    except CheckpointError as e:
        raise UsageError(f"--out: {e}") from None
    except (StorageError, OSError) as e:  # disk full, unwritable, vanished: the path and why
        why = e if isinstance(e, StorageError) else StorageError(str(e.filename or out), e.strerror or str(e))
        say(f"{prog}: error: {why}")
        return EXIT_STORAGE
    except KeyboardInterrupt:
        say(f"{prog}: interrupted; the same command continues from the last checkpoint in {out}")
        return EXIT_SIGINT
    finally:
        if bar is not None:
            bar.close()
    val = "" if result.best_val_acc != result.best_val_acc else f"best val acc {result.best_val_acc:.4f}, "
    print(
        f"{result.status}: {result.epochs_done} epochs, {val}best test acc {result.best_test_acc:.4f}, "
        f"final {result.final_test_acc:.4f}; tables in {out / 'tables'}"
        + (f"; DID NOT TRAIN: {result.failed_to_train}" if result.failed_to_train else "")
    )
    return 0 if result.status == "finished" else 1


class _EpochBar:
    """The running epoch's progress on a terminal, in place (``tqdm``): images done of the epoch's total,
    images/s and ETA, redrawn at most 4 times a second, cleared before any line
    (:data:`study.trial.loop.StepProgress`)."""

    def __init__(self, *, epochs: int, stream):
        self.epochs, self.stream, self.bar, self.epoch = epochs, stream, None, -1

    def step(self, epoch: int, done: int, total: int) -> None:
        if self.bar is None or epoch != self.epoch:
            import shutil

            from tqdm import tqdm

            self.close()
            self.epoch = epoch
            # the terminal's width, 80 where it reports none (a new pseudo-terminal says 0 columns)
            self.bar = tqdm(
                total=total,
                desc=f"epoch {epoch + 1}/{self.epochs}",
                unit="img",
                file=self.stream,
                leave=False,
                mininterval=0.25,
                ncols=shutil.get_terminal_size().columns,
            )
        self.bar.update(done - self.bar.n)
        if done >= total:  # an epoch shorter than the redraw interval still shows its count and rate once
            self.bar.refresh()

    def line(self, text: str) -> None:
        """One epoch's summary line (or any other line), below no half-drawn bar."""
        self.close()
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _trial_id(out: Path, given: str | None) -> str:
    """The trial an --out folder holds (the ``runs`` row it was trained under) when it holds one, else
    ``given`` or one made from its name: continuing a run under another id would split it in two."""
    held = sorted(p.stem for p in (out / "tables" / "runs").glob("*.parquet"))
    if not held:
        return given or derive_trial_id(out)
    if given is None and len(held) == 1:
        return held[0]
    if given not in held:
        shown = ", ".join(repr(h) for h in held[:3])
        raise UsageError(
            f"--trial-id: {out} holds trial {shown}"
            + (f", not {given!r}" if given else "")
            + f": continue it with --trial-id {held[0]}, or train into another --out"
        )
    return given


def _check_ledger(path: Path) -> None:
    """The attempt ledger of an earlier run in --out is an input too: one line if damaged."""
    from study.trial.ledger import LEDGER_FIELDS

    if not os.path.lexists(path):
        return
    try:
        read_object(path, fields=LEDGER_FIELDS)
    except MetaFileError as e:
        raise UsageError(
            f"--out: {e} (the attempt ledger of an earlier run; remove it to start over)"
        ) from None
    except OSError as e:
        raise UsageError(f"--out: {path}: cannot be read ({e.strerror or e})") from None


def _check_checkpoint(directory: Path, cfg: TrainConfig) -> None:
    """The checkpoint an earlier run left in --out, read without torch: none intact, or one of another
    configuration, is refused here as train_trial refuses it once torch is imported (one line, exit 2)."""
    from study.trial.checkpoint import check_config, checkpoint_head

    try:
        state = checkpoint_head(directory)
        if state is not None:
            check_config(
                state, model_config=cfg.model.to_dict(), train_config=cfg.to_dict(), where=str(directory)
            )
    except CheckpointError as e:
        raise UsageError(f"--out: {e}") from None


def _number(text: str) -> int | float:
    """``N`` images or a fraction ``0.1``, within :func:`study.trial.config.validation_split`'s bounds."""
    from study.trial.config import validation_split

    try:
        value: int | float = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a number of images or a fraction, got {text[:40]!r}"
            ) from None
    try:
        return validation_split(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
