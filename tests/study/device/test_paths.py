"""Every device-dependent branch (study.device.paths.DevicePaths) run on CPU against
its reference path; the same checks on the real device where CUDA is present
(``benchmarks/gpu_check.py`` runs them there).  docs/performance.md: "Device-dependent code paths".

Tolerances (measured with ``STUDY_MEASURE=1 pytest tests/study/device/test_paths.py -s``,
largest over every encoding, see the table in docs/performance.md):

* bf16 autocast vs float32, one training step: relative error of the training loss,
  of the evaluation loss afterwards, and of the step's parameter update ``Δθ`` (norm
  of the difference over the norm of the float32 update) per weight tensor of a
  matmul / convolution (measured ≤ 6e-3, bound 2e-2) and over all parameters
  (measured 0.11-0.15, bound 0.3: the normalisation layers' gains and biases get
  gradients that are sums over all B·T tokens of bf16 values that nearly cancel, so
  their updates differ by up to 90 % — inherent in bf16, not a defect of the branch);
* ``torch.compile`` vs eager (float32), one training step: the updated parameters.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from study.data import DeviceData
from study.device.paths import (
    VERIFIED_COMPILES,
    DevicePaths,
    UnverifiedCompile,
    capture_rng,
    compile_model,
    compile_refusal,
    ddp_device_ids,
    restore_rng,
    to_device,
)
from study.models import ModelConfig, build_model
from study.trial import TrainConfig, train_trial
from study.trial.checkpoint import load_checkpoint, save_checkpoint

CPU = torch.device("cpu")
CUDA = torch.cuda.is_available()
#: the backend of the CPU compile test: inductor (C++ code generation) takes 10-35 s
#: per encoding on this 2-core machine, so CI uses aot_eager (the same Dynamo + AOT
#: Autograd graphs, run by eager kernels); STUDY_COMPILE_BACKEND=inductor runs inductor
COMPILE_BACKEND = os.environ.get("STUDY_COMPILE_BACKEND", "aot_eager")
MEASURE = os.environ.get("STUDY_MEASURE") == "1"

#: bf16 (8-bit mantissa, 2^-8 ≈ 0.4 % per rounding) against float32
BF16_LOSS_RTOL = 5e-3  # measured ≤ 4e-4
BF16_UPDATE_RTOL = 2e-2  # per matmul / convolution weight tensor
BF16_TOTAL_UPDATE_RTOL = 0.3  # all parameters, normalisation layers included
#: compiled vs eager, float32: kernels may reorder reductions
COMPILE_ATOL, COMPILE_RTOL = 1e-5, 1e-4


def tiny_model(variant: dict) -> ModelConfig:
    """One form of one registered encoding (the ``encoding_variant`` fixture), tiny; no
    dropout: the compared runs draw no random masks, so they differ only by the branch."""
    return ModelConfig(
        **{
            "hidden": 16,
            "layers": 1,
            "intermediate": 16,
            "num_heads": 4,
            "pos_dim": 8 if variant["encoding"] == "learned" else None,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            **variant,
        }
    )


def one_step_config(model: ModelConfig, **kw) -> TrainConfig:
    # synthetic:40 -> 40 training images: one step of batch 40; 500 test images: one evaluation batch
    return TrainConfig(
        model=model,
        data="synthetic:40",
        epochs=1,
        batch_size=40,
        warmup=0.0,
        lr=0.1,
        head_images=4,
        eval_batch_size=500,
        **kw,
    )


class DtypeSpy:
    """Records the output dtype of every Linear / Conv2d, per mode (train / eval)."""

    def __init__(self):
        self.seen: dict[str, set] = {"train": set(), "eval": set()}

    def build(self, *args, **kw):
        model = build_model(*args, **kw)
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                m.register_forward_hook(self._hook)
        return model

    def _hook(self, module, inputs, output):
        self.seen["train" if module.training else "eval"].add(output.dtype)


def run_one_step(tmp_path, name, model: ModelConfig, paths: DevicePaths, monkeypatch=None, spy=None, **kw):
    """One training step and one evaluation through ``train_trial``: (initial
    parameters, parameters after the step, the epoch's metrics)."""
    if spy is not None:
        monkeypatch.setattr("study.trial.loop.build_model", spy.build)
    cfg = one_step_config(model, **kw)
    metrics = []
    train_trial(
        cfg,
        trial_id=name,
        checkpoint_dir=tmp_path / name,
        device=CPU,
        paths=paths,
        report=lambda m, _: metrics.append(m),
    )
    torch.manual_seed(cfg.seed)
    init = build_model(model).state_dict()
    after = load_checkpoint(tmp_path / name)["model"]
    assert len(metrics) == 1
    return init, after, metrics[0]


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def update_error(init, a, b, keys=None) -> float:
    """‖Δθ_a − Δθ_b‖ / ‖Δθ_b‖ over the parameters ``keys`` (default all): the step's update."""
    keys = list(init) if keys is None else keys
    num = sum(float(((a[k] - init[k]) - (b[k] - init[k])).double().pow(2).sum()) for k in keys)
    den = sum(float((b[k] - init[k]).double().pow(2).sum()) for k in keys)
    return (num / den) ** 0.5


def matmul_weights(model: ModelConfig) -> list[str]:
    """Names of the weight tensors of every Linear / Conv2d (not norms, not biases)."""
    net = build_model(model)
    return [f"{name}.weight" for name, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]


# --------------------------------------------------------------- bf16 autocast
def test_bf16_autocast_step_and_evaluation_match_float32(encoding_variant, tmp_path, monkeypatch):
    """The autocast branch of the training loop and of evaluation (study train /
    study evaluate), on CPU: bf16 matmuls, results within bf16 tolerance."""
    model = tiny_model(encoding_variant)
    init, ref, m_ref = run_one_step(tmp_path, "fp32", model, DevicePaths())
    spy = DtypeSpy()
    _, amp, m_amp = run_one_step(
        tmp_path, "bf16", model, DevicePaths(autocast_dtype=torch.bfloat16), monkeypatch, spy
    )
    assert spy.seen["train"] == {torch.bfloat16}, spy.seen  # the step ran under autocast
    assert torch.bfloat16 in spy.seen["eval"], spy.seen  # and so did the evaluation
    weights = matmul_weights(model)
    errors = {
        "train_loss": rel(m_amp["train_loss"], m_ref["train_loss"]),
        "test_loss": rel(m_amp["test_loss"], m_ref["test_loss"]),
        "update (matmul weights, worst)": max(update_error(init, amp, ref, [k]) for k in weights),
        "update (all)": update_error(init, amp, ref),
    }
    if MEASURE:
        print(f"\nbf16 {encoding_variant}: " + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    assert errors["train_loss"] < BF16_LOSS_RTOL, errors
    assert errors["test_loss"] < BF16_LOSS_RTOL, errors
    assert errors["update (matmul weights, worst)"] < BF16_UPDATE_RTOL, errors
    assert errors["update (all)"] < BF16_TOTAL_UPDATE_RTOL, errors
    assert errors["update (all)"] > 0  # bf16 really changed the arithmetic
    for k in ref:  # every parameter as float32, the step really moved them
        assert amp[k].dtype == ref[k].dtype == init[k].dtype


def test_export_evaluation_selects_autocast_from_the_trial():
    """study evaluate's precision: the trial's ``amp`` on CUDA, float32 on CPU (where
    the branch is selected explicitly, as above)."""
    assert DevicePaths.for_device("cuda", amp=True).autocast_dtype == torch.bfloat16
    assert DevicePaths.for_device("cuda", amp=False).autocast_dtype is None
    assert DevicePaths.for_device("cpu", amp=True).autocast_dtype is None
    with DevicePaths(autocast_dtype=torch.bfloat16).autocast(CPU):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


# -------------------------------------------------------------------- compile
@pytest.mark.slow
def test_train_trial_trains_the_compiled_model(tmp_path):
    """``--compile`` in the training loop: one step and the evaluation of the model as trained
    by ``torch.compile``, against eager.  The compiled arithmetic of every encoding, at the
    paper's width: tests/study/models/test_compiled_equals_eager.py; here the loop's wiring,
    for the encoding of issue 43 (SA quadratic)."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    torch.compiler.reset()
    model = tiny_model({"encoding": "quadratic", "isotropic": True})
    init, ref, m_ref = run_one_step(tmp_path, "eager", model, DevicePaths(), head_stats=False)
    traced: list[bool] = []  # per module call: was it run while torch.compile traced it?
    hook = register_module_forward_pre_hook(lambda module, args: traced.append(torch.compiler.is_compiling()))
    try:
        _, comp, m_comp = run_one_step(
            tmp_path,
            "compiled",
            model,
            DevicePaths(compile=True, compile_backend=COMPILE_BACKEND),
            head_stats=False,
        )
    finally:
        hook.remove()
    assert any(traced), len(traced)  # Dynamo really compiled the model's forward
    for k in ref:
        torch.testing.assert_close(comp[k], ref[k], atol=COMPILE_ATOL, rtol=COMPILE_RTOL, msg=k)
    assert max(float((ref[k] - init[k]).abs().max()) for k in ref) > 1e-3  # the step moved the weights
    assert rel(m_comp["train_loss"], m_ref["train_loss"]) < COMPILE_RTOL
    assert rel(m_comp["test_loss"], m_ref["test_loss"]) < COMPILE_RTOL


def test_each_compiled_model_is_compiled_past_dynamos_recompile_limit():
    """``DevicePaths.compiled`` starts from an empty Dynamo cache: without it the ninth model of
    one process (past ``recompile_limit``, 8 variants of one ``forward``) ran eagerly, as a reused
    Ray actor's ninth trial would have trained."""

    class Scale(nn.Module):
        def __init__(self, k: int):
            super().__init__()
            self.k, self.traced = k, []

        def forward(self, x):
            self.traced.append(torch.compiler.is_compiling())
            return x * self.k  # an int attribute: one Dynamo variant of forward per k

    models = [Scale(k) for k in range(12)]
    for m in models:
        assert DevicePaths(compile=True, compile_backend="eager").compiled(m)(torch.ones(2))[0] == m.k
    assert [m.traced for m in models] == [[True]] * len(models)


COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")


@pytest.mark.parametrize("backend", COMPILE_BACKENDS)
@pytest.mark.parametrize("device_type", ["cpu", "cuda", "mps"])
def test_compiled_configurations_not_verified_are_refused(encoding_variant, device_type, backend):
    """VERIFIED_COMPILES, decided for any device on CPU: CPU compiles are verified by this suite,
    CUDA's code-free backends too; CUDA + inductor (NaN at the paper's size, issue 43) and any
    other device are refused in one line naming what to use instead and how to verify it."""
    model = compile_model(ModelConfig(**encoding_variant))
    assert model == encoding_variant["encoding"]
    why = compile_refusal(
        device_type=device_type, backend=backend, model=model, instead="leave out --compile"
    )
    if device_type == "cpu" or (device_type == "cuda" and backend != "inductor"):
        assert why is None
        return
    assert why is not None and "\n" not in why
    assert why.startswith(f"torch.compile with {backend} on {device_type} is not verified for {model} ")
    assert "leave out --compile" in why and "benchmarks/gpu_check.py" in why
    paths = DevicePaths(compile=True, compile_backend=backend)
    with pytest.raises(UnverifiedCompile, match=f"^--compile: torch.compile with {backend}"):
        paths.check_compile(device_type, model=model, flag="--compile", instead="leave out --compile")
    # the documented way to run it anyway (benchmarks/gpu_check.py, to verify it), and eager
    DevicePaths(compile=True, compile_backend=backend, unverified_compile=True).check_compile(
        device_type, model=model, flag="--compile", instead=""
    )
    DevicePaths().check_compile(device_type, model=model, flag="--compile", instead="")


def test_a_verified_entry_for_one_encoding_admits_that_encoding_only():
    """The entry a GPU session adds after benchmarks/gpu_check.py verified one encoding."""
    table = {**VERIFIED_COMPILES, ("cuda", "inductor", "learned"): "a GPU session's gpu_check.py"}
    assert (
        compile_refusal(device_type="cuda", backend="inductor", model="learned", instead="", verified=table)
        is None
    )
    assert (
        compile_refusal(device_type="cuda", backend="inductor", model="quadratic", instead="", verified=table)
        is not None
    )
    assert compile_refusal(device_type="cuda", backend="inductor", model="learned", instead="") is not None


def test_train_trial_refuses_an_unverified_compile_before_writing(tmp_path):
    """A study whose ``training.compile`` is true, run on CUDA: the trial refuses in one line before
    loading data or writing (decided on this CPU machine: the refusal comes before the device is used)."""
    cfg = one_step_config(tiny_model({"encoding": "quadratic", "isotropic": True}), compile=True)
    with pytest.raises(
        UnverifiedCompile,
        match="^training.compile: torch.compile with inductor on cuda is not "
        "verified for quadratic .*training.compile: false",
    ):
        train_trial(
            cfg,
            trial_id="t",
            tables=tmp_path / "tables",
            checkpoint_dir=tmp_path / "checkpoint",
            device=torch.device("cuda"),
        )
    assert list(tmp_path.iterdir()) == []


def test_bench_refuses_an_unverified_compile_before_timing():
    from study.bench.runner import default_options, run_bench

    opts = default_options(
        "cuda",
        batch=1,
        steps=1,
        targets=("sa_learned", "attention:sa_quadratic"),
        compile=True,
        references=(),
    )
    with pytest.raises(
        UnverifiedCompile,
        match="^--compile: .* on cuda is not verified for learned .*; use "
        "--compile-backend aot_eager, or leave out --compile; ",
    ):
        run_bench(opts)


# -------------------------------------------------------------- channels-last
def test_channels_last_resnet_step_matches_contiguous():
    """The channels-last branch (ResNet in ``study bench``): same loss and gradients
    as the contiguous model, weights and input really in NHWC.  At two threads: torch 2.13's
    one-thread CPU kernels of this NHWC ResNet step differ from float64 by up to 9e-3 (NCHW
    9e-7, measured; the single layers agree), which no tolerance of this test should hide."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _channels_last_step_matches()
    finally:
        torch.set_num_threads(threads)


def _channels_last_step_matches():
    cfg = ModelConfig(arch="resnet18")
    torch.manual_seed(0)
    base = build_model(cfg)
    x = torch.randn(2, 3, 32, 32)
    y = torch.tensor([1, 7])
    grads = {}
    for channels_last in (False, True):
        model = build_model(cfg)
        model.load_state_dict(base.state_dict())
        model, xin = DevicePaths(channels_last=channels_last).memory_format(model, x)
        conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
        assert conv.weight.is_contiguous(memory_format=torch.channels_last) == channels_last
        assert xin.is_contiguous(memory_format=torch.channels_last) == channels_last
        model.train()
        loss = F.cross_entropy(model(xin), y)
        loss.backward()
        grads[channels_last] = (float(loss), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert rel(grads[True][0], grads[False][0]) < 1e-5
    for n, g in grads[False][1].items():
        torch.testing.assert_close(grads[True][1][n], g, atol=1e-5, rtol=1e-4, msg=n)


def test_bench_runs_channels_last_on_cpu():
    from study.bench.runner import default_options, run_bench

    opts = default_options(
        "cpu", batch=2, steps=1, warmup=1, targets=("resnet18",), references=(), channels_last=True
    )
    report = run_bench(opts)
    assert report["channels_last"] is True
    assert report["models"][0]["fast"]["path"] == "convolutions, channels_last"
    assert default_options("cpu").channels_last is False  # CPU default: contiguous


# ----------------------------------------------------------- pinned transfers
def test_pinned_transfer_branch_gives_the_same_batches(monkeypatch):
    """The device-resident pipeline's CUDA branch (page-locked, non-blocking copies
    of each epoch's plan): page-locking itself needs a CUDA driver, so on CPU the
    branch runs with ``pin_memory`` recorded instead; its batches equal the plain ones."""
    pinned_calls = []

    def fake_pin(self):
        pinned_calls.append(self.shape)
        return self.clone()

    images = torch.randint(0, 256, (12, 3, 8, 8), dtype=torch.uint8)
    labels = torch.arange(12) % 10
    plain = list(DeviceData(images, labels, device=CPU).batches(batch_size=4, train=True, epoch=1, seed=3))
    if not CUDA:
        monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    data = DeviceData(images, labels, device=CPU, pinned=True)
    assert data.pinned and not DeviceData(images, labels, device=CPU).pinned
    pinned = list(data.batches(batch_size=4, train=True, epoch=1, seed=3))
    if not CUDA:
        assert len(pinned_calls) == 3  # order, offsets, flips of the epoch
    assert len(pinned) == len(plain) == 3
    for (xa, ya), (xb, yb) in zip(pinned, plain):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


# -------------------------------------------------------------- RNG states
def _fake_cuda_state() -> torch.Tensor:
    # the shape and dtype of torch.cuda.get_rng_state(): a ByteTensor (16 bytes, Philox)
    return torch.arange(16, dtype=torch.uint8)


@pytest.mark.parametrize("with_cuda", [False, True], ids=["cpu-only", "cuda-entry"])
def test_checkpoint_rng_round_trip(tmp_path, with_cuda):
    """The checkpoint's RNG states survive save/load; a CUDA entry (fabricated here)
    is written when the CUDA branch is on and restored only on a CUDA device."""
    cuda = torch.device("cuda", 0)
    calls = []
    torch.manual_seed(123)
    state = capture_rng(cuda, cuda=with_cuda, get_cuda=lambda d: _fake_cuda_state())
    assert ("rng_cuda" in state) == with_cuda
    expected = torch.rand(5)  # what the restored CPU generator must draw next
    save_checkpoint(tmp_path, {"epoch": 1, "model": {}, **state})
    loaded = load_checkpoint(tmp_path)
    torch.manual_seed(999)
    # on CPU: the CUDA state is never touched, even when the checkpoint has one
    assert restore_rng(loaded, CPU, cuda=False, set_cuda=lambda s, d: calls.append(d)) is False
    assert torch.equal(torch.rand(5), expected) and calls == []
    # on a CUDA device (the setter recorded, not called on this machine's driver)
    restored = restore_rng(loaded, cuda, cuda=True, set_cuda=lambda s, d: calls.append((s.clone(), d)))
    assert restored == with_cuda
    assert torch.equal(torch.rand(5), expected)
    if with_cuda:
        assert len(calls) == 1 and torch.equal(calls[0][0], _fake_cuda_state()) and calls[0][1] == cuda
    else:
        assert calls == []


def test_resume_on_cpu_of_a_checkpoint_with_a_cuda_rng_state(tmp_path):
    """A GPU trial's checkpoint (with ``rng_cuda``) resumes on CPU: the entry is kept
    out of the CPU generator and training continues exactly as from a CPU checkpoint."""
    model = tiny_model({"encoding": "quadratic", "isotropic": True})
    cfg = one_step_config(model, head_stats=False).replace(epochs=2)
    straight = tmp_path / "straight"
    train_trial(cfg, trial_id="s", checkpoint_dir=straight, device=CPU)

    class Killed(Exception):
        pass

    def die_after_first(metrics, ckpt):
        if metrics["epoch"] == 0:
            raise Killed

    cut = tmp_path / "cut"
    with pytest.raises(Killed):
        train_trial(cfg, trial_id="c", checkpoint_dir=cut, device=CPU, report=die_after_first)
    state = load_checkpoint(cut)
    assert state["epoch"] == 1 and "rng_cuda" not in state
    state["rng_cuda"] = _fake_cuda_state()  # as a CUDA run writes it
    save_checkpoint(cut, state)
    train_trial(cfg, trial_id="c", checkpoint_dir=cut, device=CPU)
    a, b = load_checkpoint(straight), load_checkpoint(cut)
    assert a["epoch"] == b["epoch"] == 2
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


# ------------------------------------------------------------------ DDP, misc
def test_ddp_device_ids():
    """DDP's ``device_ids`` (DDP itself with gloo ranks runs on CPU in test_ddp.py;
    device_ids of a CPU module must be None, so only the choice is checked here)."""
    assert ddp_device_ids(torch.device("cuda", 3)) == [3]
    assert ddp_device_ids(torch.device("cuda")) == [0]
    assert ddp_device_ids(CPU) is None


def test_device_defaults_and_overrides():
    gpu, cpu = DevicePaths.for_device("cuda:1"), DevicePaths.for_device("cpu")
    assert (gpu.autocast_dtype, gpu.channels_last, gpu.pinned_transfer, gpu.cuda_rng) == (
        torch.bfloat16,
        True,
        True,
        True,
    )
    assert (cpu.autocast_dtype, cpu.channels_last, cpu.pinned_transfer, cpu.cuda_rng) == (
        None,
        False,
        False,
        False,
    )
    assert DevicePaths.for_device("cpu", channels_last=True).channels_last
    with pytest.raises(ValueError, match="compile_backend"):
        DevicePaths(compile_backend="nope")
    assert torch.equal(to_device(torch.arange(3), CPU, pinned=False), torch.arange(3))


# ------------------------------------------------------ the same, on the GPU
cuda_only = pytest.mark.skipif(not CUDA, reason="needs CUDA (benchmarks/gpu_check.py runs these on a GPU)")


@cuda_only
def test_cuda_bf16_step_matches_cpu_float32(encoding_variant, tmp_path):
    """The CUDA defaults (bf16 autocast, fused content, pinned transfers, CUDA RNG in
    the checkpoint) against the CPU float32 reference: one step, one evaluation."""
    model = tiny_model(encoding_variant)
    init, ref, m_ref = run_one_step(tmp_path, "cpu", model, DevicePaths())
    cfg = one_step_config(model)
    metrics = []
    dev = torch.device("cuda", 0)
    train_trial(
        cfg,
        trial_id="gpu",
        checkpoint_dir=tmp_path / "gpu",
        device=dev,
        report=lambda m, _: metrics.append(m),
    )
    state = load_checkpoint(tmp_path / "gpu")
    assert "rng_cuda" in state
    gpu = {k: v.cpu() for k, v in state["model"].items()}
    assert rel(metrics[0]["train_loss"], m_ref["train_loss"]) < BF16_LOSS_RTOL
    assert rel(metrics[0]["test_loss"], m_ref["test_loss"]) < BF16_LOSS_RTOL
    assert max(update_error(init, gpu, ref, [k]) for k in matmul_weights(model)) < BF16_UPDATE_RTOL
    assert update_error(init, gpu, ref) < BF16_TOTAL_UPDATE_RTOL


@cuda_only
def test_cuda_compiled_step_matches_eager(encoding_variant, tmp_path):
    """The training loop's CUDA compile, run unverified (VERIFIED_COMPILES has no CUDA + inductor entry)."""
    dev = torch.device("cuda", 0)
    model = tiny_model(encoding_variant)
    out = {}
    unverified = DevicePaths.for_device(dev, amp=False, compile=True, unverified_compile=True)
    for name, paths in (("eager", DevicePaths.for_device(dev, amp=False)), ("compiled", unverified)):
        train_trial(
            one_step_config(model, head_stats=False),
            trial_id=name,
            checkpoint_dir=tmp_path / name,
            device=dev,
            paths=paths,
        )
        out[name] = load_checkpoint(tmp_path / name)["model"]
    for k in out["eager"]:  # TF32 may differ between kernels: a looser bound than on CPU
        torch.testing.assert_close(out["compiled"][k], out["eager"][k], atol=1e-3, rtol=1e-2, msg=k)


@cuda_only
def test_cuda_channels_last_bench_and_pinned_pipeline():
    from study.bench.runner import default_options, run_bench

    report = run_bench(
        default_options("cuda", batch=8, steps=1, warmup=1, targets=("resnet18",), references=())
    )
    assert report["models"][0]["fast"]["path"] == "convolutions, channels_last"
    images = torch.randint(0, 256, (12, 3, 8, 8), dtype=torch.uint8)
    labels = torch.arange(12) % 10
    a = list(DeviceData(images, labels, device="cuda").batches(batch_size=4, train=True, epoch=1, seed=3))
    b = list(DeviceData(images, labels, device=CPU).batches(batch_size=4, train=True, epoch=1, seed=3))
    for (xa, ya), (xb, yb) in zip(a, b):
        torch.testing.assert_close(xa.cpu(), xb)
        assert torch.equal(ya.cpu(), yb)
