"""``study export | evaluate``: a trial's latest intact checkpoint as one ``.pt``
(:mod:`study.models.trained`), and that model's accuracy on a data source's test split."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from study.cliutil import BoundedInt, local_path
from study.commands.studies import _storage, _study_root
from study.datachecks import check_data
from study.driver import check_writable
from study.errors import UsageError, refused
from study.limits import MAX_EVAL_BATCH, MAX_SUBSET


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a trial's trained model to one .pt file",
        description="Write the weights and model/training configuration of one trial "
        "(its latest checkpoint: the last epoch trained) to a .pt file loadable with "
        "torch.load(weights_only=True) and study.models.load_trained.",
    )
    _storage(p, study=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", metavar="ID", help="trial id as in the tables (e.g. c000-s000)")
    which.add_argument(
        "--best",
        action="store_true",
        help="the trial with the highest final accuracy (val_acc when recorded, else "
        "test_acc) among those with a checkpoint (the default)",
    )
    p.add_argument("--out", type=local_path, help="output file (default: NAME-TRIAL.pt)")
    p.set_defaults(func=run_export)

    p = sub.add_parser(
        "evaluate",
        help="accuracy of an exported model on a data source",
        description="Rebuild an exported model and print its loss and accuracy on the "
        "test split of a data source (the subset drawn with the training seed).",
    )
    p.add_argument("file", type=local_path, help="a .pt written by `study export` (or a checkpoint.pt)")
    p.add_argument(
        "--data",
        help="synthetic[:N] | cifar10[:ROOT] | image-folder tree or archive "
        "(default: the data the model was trained on)",
    )
    p.add_argument(
        "--subset",
        type=BoundedInt(1, MAX_SUBSET, "MAX_SUBSET"),
        help="the stratified subset of --subset training images "
        "and its max(N/5, 100) test images (default: the whole test split)",
    )
    p.add_argument("--batch-size", type=BoundedInt(1, MAX_EVAL_BATCH, "MAX_EVAL_BATCH"), default=500)
    p.add_argument("--device", help="cpu, cuda, cuda:1, … (default: cuda when available)")
    p.set_defaults(func=run_evaluate)


def _choose(root: str, refs: list[str], args) -> str:
    if args.trial:
        if args.trial not in refs:
            known = ", ".join(refs) or "none"
            raise UsageError(
                f"--trial: no checkpoint of trial {args.trial!r} (trials with checkpoints: {known})"
            )
        return args.trial
    if not refs:
        raise UsageError(f"study {args.name!r} has no trial checkpoint")
    from study.results.tables import read_table

    runs = read_table(f"{root}/tables", "runs")  # (pandas: read only to choose)
    cand = runs[runs.trial_id.isin(list(refs))] if not runs.empty else runs
    if cand.empty:
        return refs[0]
    col = (
        "final_val_acc"
        if "final_val_acc" in cand and cand["final_val_acc"].notna().any()
        else "final_test_acc"
    )
    return str(cand.sort_values(col, ascending=False, na_position="last").iloc[0]["trial_id"])


def run_export(args: argparse.Namespace) -> int:
    from study.tuning.checkpoints import find_checkpoints, latest_checkpoint

    root = _study_root(args)
    if args.out is not None:  # before anything is read (`--out /etc/passwd/x.pt`)
        if args.out.is_dir():
            raise UsageError(f"--out: {args.out} is a directory")
        check_writable(args.out, "--out", file=True)
    refs = find_checkpoints(root)
    key = _choose(root, refs, args)
    from study.models.trained import ExportError, check_export, export_dict
    from study.tuning.checkpoints import latest_checkpoint_head

    with refused(ExportError, f"trial {key}: "):  # none intact as its pickle says: refused before torch
        latest_checkpoint_head(
            root, key, check=lambda state, path: _check_head(export_dict(state), where=path)
        )
    # the checkpoint taken is one whose export loads (config, shapes)
    with refused(ExportError, f"trial {key}: "):
        state = latest_checkpoint(
            root,
            key,
            check=lambda state, path: check_export(export_dict(state), where=path),
            warn=lambda line: print(f"study export: warning: {line}", file=sys.stderr, flush=True),
        )
        export = export_dict(state, study=Path(root).name, trial_id=key)
    out = args.out or Path(f"{Path(root).name}-{key}.pt")
    import torch

    from study.results.atomicio import write_atomic

    try:
        write_atomic(out, lambda f: torch.save(export, f), suffix=".pt")
    except OSError as e:
        raise UsageError(
            f"--out: cannot write {out} ({e.strerror or ' '.join(str(e).split())[:160]})"
        ) from None
    print(f"{out}: trial {key}, {export['epoch']} epochs, final test acc {export['final_test_acc']:.4f}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    # flags and cheap properties of the file and the source before torch is imported (< 1 s CPU)
    if not args.file.is_file():  # a folder, a FIFO, a device (a /dev/zero symlink) is never opened
        raise UsageError(f"{args.file}: {'not a file' if args.file.exists() else 'no such file'}")
    if args.data is not None:
        sizes = check_data("--data", args.data)
        from study.data.errors import DataError
        from study.data.sources import source_counts
        from study.data.splits import check_subset

        with refused(DataError, "--data: "):  # as load_splits refuses it below, but before torch
            check_subset(args.data, subset=args.subset, n_train=(sizes or source_counts(args.data))[0])
    from study.commands.bench import check_device_flag, device_from_flag

    check_device_flag(args.device)
    head = _export_head(args.file)  # what its pickle says, before torch (None: only torch.load can tell)
    source = None if head is None else _source(args, head)
    device = device_from_flag(args.device)  # imports torch
    from study.data import DataError, DeviceData, load_splits
    from study.models import build_model
    from study.models.trained import ExportError, read_export
    from study.trial.loop import evaluate

    with refused(ExportError):
        export = read_export(args.file)
    train = export.get("train_config") or {}
    source = source or _source(args, export)
    with refused(DataError, "--data: "):
        splits = load_splits(source, subset=args.subset, seed=int(train.get("seed") or 0))
    n_classes = export["model_config"].get("num_classes")
    if n_classes != len(splits.classes):
        raise UsageError(f"--data: {source} has {len(splits.classes)} classes, the model {n_classes}")
    try:  # read_export checked every key and shape against the model; this cannot disagree
        model = build_model(export["model_config"])
        model.load_state_dict(export["state_dict"])
    except (RuntimeError, ValueError, MemoryError) as e:
        raise UsageError(f"{args.file}: cannot load its weights ({' '.join(str(e).split())[:160]})") from None
    model.to(device).eval()
    data = DeviceData(splits.test_images, splits.test_labels, device=device)
    from study.device.paths import DevicePaths

    # the trial's own precision: bf16 autocast on CUDA when it trained with amp
    paths = DevicePaths.for_device(device, amp=bool(train.get("amp", True)))
    loss, acc = evaluate(
        model, data, batch_size=args.batch_size, world=1, autocast=paths.autocast_factory(device)
    )
    correct = round(acc * len(data))
    print(
        f"accuracy {acc:.4f} ({correct}/{len(data)} test images), loss {loss:.4f}"
        + ("" if math.isfinite(loss) else " (non-finite)")
        + f"  [{splits.source}]"
    )
    return 0


def _source(args: argparse.Namespace, export: dict) -> str:
    """The data source to evaluate on: ``--data``, else the one the export names (checked as ``--data``
    is)."""
    source = args.data or (export.get("train_config") or {}).get("data")
    if not source:
        raise UsageError("--data: required (the export does not name its training data)")
    if not args.data:
        check_data(f"{args.file}: train_config.data", source)
    return source


def _export_head(path: Path) -> dict | None:
    """The export (or checkpoint) in ``path`` as its pickle says, read without torch and checked as far as
    that can be (its configuration, tensors where tensors must be): one line, exit 2; None where only
    ``torch.load`` and the model's own state dict can tell (read_export then decides)."""
    from study.models.trained import ExportError, as_export
    from study.trial.checkpoint import Undecided, UnreadableFile, read_head

    try:
        with open(path, "rb") as f:
            data = read_head(f)
        with refused(ExportError):
            data = as_export(data, path)
            _check_head(data, where=str(path))
    except Undecided:
        return None
    except UnreadableFile as e:
        raise UsageError(f"{path}: not a model export ({e})") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror or e})") from None
    return data


def _check_head(export: dict, *, where: str) -> None:
    """What :func:`~study.models.trained.check_export` checks that needs no model built (its configuration,
    a tensor for every entry of its state dict), on an export read by
    :func:`~study.trial.checkpoint.read_head`."""
    from study.models.trained import ExportError, check_export_config
    from study.trial.checkpoint import TensorHead

    check_export_config(export, where=where)
    for k, t in export["state_dict"].items():
        if not isinstance(t, TensorHead):
            raise ExportError(f"{where}: state_dict.{str(k)[:80]}: must be a tensor, got {type(t).__name__}")
