"""The training protocol as configuration (issue 30, item 4): CutMix, MixUp, RandAugment /
AutoAugment and label smoothing reach the training step, become ``runs`` columns, are
refused out of range in one line, and add no host read to the step."""

import time
import weakref

import pytest
import torch
import torch.nn.functional as F

from study.models import ModelConfig
from study.trial import TrainConfig, train_trial
from study.trial.loop import _prepare, _set_up, _train_batches, _train_epoch
from tests.helpers import run_cli

MODEL = ModelConfig(hidden=16, layers=1, intermediate=24, num_heads=2)
#: synthetic:100 in batches of 20: a few steps of one epoch
DATA = dict(data="synthetic:100", epochs=1, batch_size=20)


def trial(**protocol):
    """A prepared trial on CPU (no autocast, no tables) with the protocol fields ``protocol``."""
    cfg = TrainConfig(model=MODEL, **DATA, amp=False, head_stats=False, **protocol)
    t = _set_up(cfg, splits=None, device=torch.device("cpu"), paths=None)
    _prepare(t, tables=None, trial_id="p", study="", extra_run_fields=None)
    return t


def confident(t):
    """Scale the classifier so that the logits are far from uniform: a hard-label and a
    mixed or smoothed loss then differ by a lot, not by the little they do at init."""
    with torch.no_grad():
        t.model.classifier.weight.mul_(30)
        t.model.classifier.bias.mul_(30)
    return t


def train_one_epoch(t):
    """One epoch through the loop, recording every step's input images and logits (a
    forward hook on the model): ``(trained, [(images, logits), ...])``."""
    seen = []
    handle = t.model.register_forward_hook(
        lambda m, args, out: seen.append((args[0].detach().clone(), out.detach().clone()))
    )
    try:
        trained = _train_epoch(t, 0, time.perf_counter())
    finally:
        handle.remove()
    return trained, seen


def unmixed_batches(t):
    """The epoch's batches as the pipeline gives them (crop, flip, image policy), before any mixing."""
    return list(_train_batches(t, 0))


def one_hot(y, k):
    return F.one_hot(y, k).double()


def mixup_ratio(x, mixed):
    """MixUp's lam from ``mixed = lam x + (1 - lam) x.roll(1)`` (least squares); the residual."""
    other = x.roll(1, 0).double()
    d = x.double() - other
    lam = ((mixed.double() - other) * d).sum() / (d * d).sum()
    return lam.item(), (mixed.double() - (lam * x.double() + (1 - lam) * other)).abs().max().item()


def cutmix_box(x, mixed):
    """CutMix's pasted box (H, W) mask from where ``mixed`` differs from ``x``, or None when
    ``mixed`` is not ``x`` with one rectangle of ``x.roll(1)`` pasted in."""
    mask = (mixed != x).any(0).any(0)
    if not mask.any():
        return None
    rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
    box = torch.zeros_like(mask)
    box[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = True
    rolled = x.roll(1, 0)
    if not (torch.equal(mixed[..., box], rolled[..., box]) and torch.equal(mixed[..., ~box], x[..., ~box])):
        return None
    return box


def test_cutmix_pastes_a_box_and_its_mixed_labels_reach_the_loss():
    t = confident(trial(cutmix_alpha=1.0))
    batches = unmixed_batches(t)
    torch.manual_seed(3)
    trained, seen = train_one_epoch(t)
    assert len(seen) == len(batches) >= 3
    k = t.mc.num_classes
    losses, hard = [], []
    for (x, y), (mixed, logits) in zip(batches, seen):
        box = cutmix_box(x, mixed)
        assert box is not None, "the images reaching the model are not CutMix of the batch"
        lam = 1 - box.sum().item() / box.numel()
        target = lam * one_hot(y, k) + (1 - lam) * one_hot(y.roll(1), k)
        losses.append(F.cross_entropy(logits.double(), target).item())
        hard.append(F.cross_entropy(logits.double(), y).item())
    assert (
        sum(
            b is not None and b.sum() > 0 for b in [cutmix_box(x, m) for (x, _), (m, _) in zip(batches, seen)]
        )
        >= 2
    )
    assert trained["train_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert abs(trained["train_loss"] - sum(hard) / len(hard)) > 0.1  # the hard labels would give another loss


def test_mixup_blends_the_batch_and_its_mixed_labels_reach_the_loss():
    t = confident(trial(mixup_alpha=0.4))
    batches = unmixed_batches(t)
    torch.manual_seed(0)
    trained, seen = train_one_epoch(t)
    k = t.mc.num_classes
    losses, hard, ratios = [], [], []
    for (x, y), (mixed, logits) in zip(batches, seen):
        lam, residual = mixup_ratio(x, mixed)
        assert residual < 1e-4, "the images reaching the model are not MixUp of the batch"
        ratios.append(lam)
        target = lam * one_hot(y, k) + (1 - lam) * one_hot(y.roll(1), k)
        losses.append(F.cross_entropy(logits.double(), target).item())
        hard.append(F.cross_entropy(logits.double(), y).item())
    assert all(0 <= r <= 1 for r in ratios) and max(min(r, 1 - r) for r in ratios) > 0.01  # really mixed
    assert trained["train_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert abs(trained["train_loss"] - sum(hard) / len(hard)) > 0.1


def test_cutmix_and_mixup_together_pick_one_of_the_two_per_batch():
    t = trial(cutmix_alpha=1.0, mixup_alpha=1.0)
    batches = unmixed_batches(t)
    kinds = []
    for seed in range(3):  # 3 epochs' worth of steps: both kinds appear
        torch.manual_seed(seed)
        _, seen = train_one_epoch(t)
        for (x, _), (mixed, _) in zip(batches, seen):
            if cutmix_box(x, mixed) is not None:
                kinds.append("cutmix")
            else:
                assert mixup_ratio(x, mixed)[1] < 1e-4, "a batch neither CutMix nor MixUp"
                kinds.append("mixup")
    assert set(kinds) == {"cutmix", "mixup"}, kinds


@pytest.mark.parametrize(
    "policy",
    [{"randaugment_ops": 2, "randaugment_magnitude": 9}, {"autoaugment": "cifar10"}],
    ids=["randaugment", "autoaugment"],
)
def test_image_policy_changes_the_images_reaching_the_model(policy):
    plain, augmented = trial(), trial(**policy)
    torch.manual_seed(0)
    _, before = train_one_epoch(plain)
    torch.manual_seed(0)
    _, after = train_one_epoch(augmented)
    x0, x1 = before[0][0], after[0][0]
    assert x0.shape == x1.shape
    changed = (x0 != x1).flatten(1).any(1)
    assert changed.float().mean() > 0.5, "the policy did not change the images reaching the model"
    # applied before normalisation to uint8 images: the model still sees normalised 0..255 pixels
    data = augmented.train_data
    pixels = (x1 + data._shift) / data._scale
    assert (
        torch.allclose(pixels, pixels.round(), atol=1e-3) and pixels.min() > -0.01 and pixels.max() < 255.01
    )


@pytest.mark.parametrize(
    "policy",
    [{"randaugment_ops": 2, "randaugment_magnitude": 9}, {"autoaugment": "cifar10"}],
    ids=["randaugment", "autoaugment"],
)
def test_image_policy_draws_its_operations_per_image_not_per_batch(policy):
    from study.trial.protocol import build_protocol

    protocol = build_protocol(TrainConfig(model=MODEL, **DATA, **policy), num_classes=10)
    image = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8)
    torch.manual_seed(0)
    out = protocol.images(image.expand(16, -1, -1, -1))  # one image, 16 times
    assert out.dtype == torch.uint8 and out.shape == (16, 3, 32, 32)
    distinct = {bytes(o.flatten().tolist()) for o in out}
    assert len(distinct) >= 4, "one operation drawn for the whole batch"


def test_label_smoothing_changes_the_loss_by_the_expected_amount():
    eps = 0.2
    t = confident(trial(label_smoothing=eps))
    batches = unmixed_batches(t)
    trained, seen = train_one_epoch(t)
    expected, hard = [], []
    for (_, y), (_, logits) in zip(batches, seen):
        logp = F.log_softmax(logits.double(), -1)
        nll = -logp.gather(1, y[:, None]).mean()
        expected.append(((1 - eps) * nll + eps * (-logp.mean(-1)).mean()).item())
        hard.append(nll.item())
    assert trained["train_loss"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert abs(trained["train_loss"] - sum(hard) / len(hard)) > 0.1


PROTOCOL = dict(
    cutmix_alpha=1.0, mixup_alpha=0.5, randaugment_ops=2, randaugment_magnitude=7, label_smoothing=0.1
)


def test_protocol_fields_become_runs_columns(tmp_path):
    from study.results.tables import SCHEMA, read_table

    cfg = TrainConfig(model=MODEL, **DATA, head_stats=False, **PROTOCOL)
    assert train_trial(cfg, trial_id="t", tables=tmp_path).status == "finished"
    runs = read_table(tmp_path, "runs")
    row = runs.iloc[0]
    for k, v in {**PROTOCOL, "autoaugment": "none"}.items():
        assert k in SCHEMA["runs"] and row[k] == v, k


class DeviceReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Records reads to the host of values computed from the training data or the model
    (``.item()``, ``bool(t)``, data-dependent shapes); a read of a scalar that torch drew
    on its CPU generator (a transform's operation, magnitude or Beta ratio: CPU tensors
    even when training on CUDA) is not one."""

    SYNCING = {
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::masked_select",
        "aten::unique_dim",
        "aten::_unique2",
        "aten::item",
    }

    def __init__(self, sources):
        super().__init__()
        self.derived: dict[int, weakref.ref] = {}  # id -> the tensor (a tensor's == is elementwise)
        self.seen = []
        for t in sources:
            self.add(t)

    def add(self, t: torch.Tensor) -> None:
        self.derived[id(t)] = weakref.ref(t)

    def __contains__(self, t: torch.Tensor) -> bool:
        r = self.derived.get(id(t))
        return r is not None and r() is t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = [
            a
            for a in torch.utils._pytree.tree_flatten((args, kwargs or {}))[0]
            if isinstance(a, torch.Tensor)
        ]
        from_data = any(a in self for a in inputs)
        if from_data and func._schema.name in self.SYNCING:
            self.seen.append(func._schema.name)
        out = func(*args, **(kwargs or {}))
        if from_data:
            for o in torch.utils._pytree.tree_flatten(out)[0]:
                if isinstance(o, torch.Tensor):
                    self.add(o)
        return out


def test_no_host_read_in_the_training_steps_with_every_augmentation():
    t = trial(**PROTOCOL)
    sources = [t.train_data.images, t.train_data.labels, *t.model.parameters()]
    with DeviceReads(sources) as mode:
        batches = _train_batches(t, 0)
        for x, y in batches:
            from study.trial.loop import _train_step

            _train_step(t, x, y)
    assert len(mode.derived) > 100  # the recorder followed the batch through the step
    assert mode.seen == []
    # the recorder sees a read of the data when there is one
    with DeviceReads(sources) as mode:
        next(iter(_train_batches(t, 0)))[0].sum().item()
    assert mode.seen == ["aten::_local_scalar_dense"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_training_steps_with_every_augmentation_do_not_synchronise():
    cfg = TrainConfig(model=MODEL, **DATA, head_stats=False, **PROTOCOL)
    t = _set_up(cfg, splits=None, device=torch.device("cuda"), paths=None)
    _prepare(t, tables=None, trial_id="p", study="", extra_run_fields=None)
    from study.trial.loop import _train_step

    it = _train_batches(t, 0)
    _train_step(t, *next(it))  # first step: lazy initialisations (optimizer state, kernels)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in it:
            _train_step(t, x, y)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


BAD = [
    (["--cutmix-alpha", "-1"], "--cutmix-alpha: must be a finite Beta alpha >= 0 (0: off), got -1.0"),
    (["--mixup-alpha", "nan"], "--mixup-alpha: must be a finite Beta alpha >= 0 (0: off), got nan"),
    (["--label-smoothing", "1"], "--label-smoothing: must be in [0, 1), got 1.0"),
    (["--randaugment-ops", "15"], "argument --randaugment-ops: must be <= 14 (MAX_RANDAUGMENT_OPS), got 15"),
    (
        ["--randaugment-magnitude", "31"],
        "argument --randaugment-magnitude: must be <= 30 (MAX_RANDAUGMENT_MAGNITUDE), got 31",
    ),
    (["--autoaugment", "cifar"], "--autoaugment: must be one of none, cifar10, imagenet, svhn, got 'cifar'"),
    (
        ["--autoaugment", "svhn", "--randaugment-ops", "2"],
        "--autoaugment: svhn and randaugment_ops 2 are alternative policies: set one (the other none / 0)",
    ),
]


@pytest.mark.parametrize("args,message", BAD, ids=[a[0] for a, _ in BAD])
def test_study_train_refuses_out_of_range_protocol_in_one_line(tmp_path, args, message):
    r = run_cli(
        tmp_path,
        "train",
        "--data",
        "synthetic:100",
        "--epochs",
        "1",
        "--out",
        str(tmp_path / "o"),
        *args,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == f"study train: error: {message}"
    assert not (tmp_path / "o").exists()


SPEC_BAD = [
    (
        {"protocol": {"cutmix_alpha": -0.5}},
        "protocol.cutmix_alpha: must be a finite Beta alpha >= 0 (0: off), got -0.5",
    ),
    ({"protocol": {"label_smoothing": 1.5}}, "protocol.label_smoothing: must be in [0, 1), got 1.5"),
    ({"protocol": {"randaugment_ops": "two"}}, "protocol.randaugment_ops: must be int, got str 'two'"),
    (
        {"protocol": {"cutmix": 1.0}},
        "protocol.cutmix: unknown key (allowed: cutmix_alpha, mixup_alpha, "
        "randaugment_ops, randaugment_magnitude, autoaugment, label_smoothing)",
    ),
    (
        {"models": [{"training": {"protocol": {"mixup_alpha": -1}}}]},
        "models.0.training.protocol.mixup_alpha: must be a finite Beta alpha >= 0 (0: off), got -1",
    ),
    ({"grid": {"label_smoothing": [0.0, 1.0]}}, "grid.label_smoothing: must be in [0, 1), got 1.0"),
    (
        {"sample": {"randaugment_magnitude": {"int": [0, 40]}}},
        "sample.randaugment_magnitude.int: must be <= 30 (RandAugment's 31 magnitude bins), got 40",
    ),
]


@pytest.mark.parametrize("extra,message", SPEC_BAD, ids=[m.split(":")[0] for _, m in SPEC_BAD])
def test_study_file_refuses_out_of_range_protocol_in_one_line(tmp_path, extra, message):
    import yaml

    f = tmp_path / "p.yaml"
    f.write_text(
        yaml.safe_dump({"data": "synthetic:500", "epochs": 1, "model": {"hidden": 16, "layers": 1}, **extra})
    )
    r = run_cli(tmp_path, "validate", str(f), timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == f"study validate: error: {f}: {message}"


def test_protocol_is_a_searchable_per_model_axis(tmp_path):
    import yaml

    from study.spec.studyfile import load_spec

    f = tmp_path / "p.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "data": "synthetic:500",
                "epochs": 1,
                "model": {"hidden": 16, "layers": 1},
                "validation": 50,
                "protocol": {"label_smoothing": 0.1},
                "models": [{}, {"training": {"protocol": {"cutmix_alpha": 1.0}}}],
                "sample": {
                    "mixup_alpha": {"uniform": [0.0, 1.0]},
                    "autoaugment": {"choice": ["none", "cifar10"]},
                },
            }
        )
    )
    spec = load_spec(f)
    a, b = (spec.train_config(c, {"mixup_alpha": 0.3, "autoaugment": "cifar10"}) for c in spec.cells)
    assert (a.cutmix_alpha, b.cutmix_alpha) == (0.0, 1.0)
    assert a.label_smoothing == b.label_smoothing == 0.1
    assert a.mixup_alpha == b.mixup_alpha == 0.3 and a.autoaugment == "cifar10"


def test_a_checkpoint_from_before_the_protocol_fields_continues_with_them_off():
    from study.errors import CheckpointError
    from study.trial.checkpoint import check_config
    from study.trial.config import PROTOCOL_FIELDS

    cfg = TrainConfig(model=MODEL, **DATA)
    older = {
        "model_config": MODEL.to_dict(),
        "train_config": {k: v for k, v in cfg.to_dict().items() if k not in PROTOCOL_FIELDS},
    }
    check_config(older, model_config=MODEL.to_dict(), train_config=cfg.to_dict(), where="ckpt")  # no error
    with pytest.raises(CheckpointError, match=r"cutmix_alpha: 0\.0 -> 1\.0"):
        check_config(
            older,
            model_config=MODEL.to_dict(),
            train_config=cfg.replace(cutmix_alpha=1.0).to_dict(),
            where="ckpt",
        )


def test_only_a_protocol_with_torchvision_transforms_imports_torchvision():
    """A trial of the paper's protocol (crop and flip are the loop's own; label smoothing is the
    loss's) trains without importing torchvision, whose import costs each trial process about a
    second; a protocol that uses its transforms imports it."""
    import subprocess
    import sys

    code = (
        "import sys, torch; from study.models import ModelConfig; "
        "from study.trial import TrainConfig, train_trial; "
        "from study.trial.protocol import build_protocol; "
        "cfg = TrainConfig(model=ModelConfig(hidden=16, layers=1, intermediate=24, num_heads=2), "
        "data='synthetic:40', epochs=1, batch_size=20, amp=False, head_stats=False, label_smoothing=0.1); "
        "train_trial(cfg, trial_id='p', device=torch.device('cpu')); print('torchvision' in sys.modules); "
        "build_protocol(TrainConfig(cutmix_alpha=1.0), num_classes=10); print('torchvision' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"], r.stdout
