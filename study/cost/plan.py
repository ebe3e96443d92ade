"""A study's compute before anything runs (``study plan``): FLOPs, device-seconds at a given
throughput and wall time on N workers, trials started longest-predicted first.

The counting rules and the launch order: docs/performance.md, "Before a study". No torch, no Ray.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from study import limits
from study.data.splits import subset_test_size
from study.data.synthetic import DEFAULT_TEST as SYNTHETIC_TEST
from study.data.synthetic import DEFAULT_TRAIN as SYNTHETIC_TRAIN
from study.data.validation import validation_size
from study.models.config import PAPER_MODELS, ModelConfig, columns, model_name
from study.models.cost import TRAIN_FORWARDS, config_from_row, model_macs

#: Image counts of the built-in sources: (train, test).
CIFAR10_SIZES = (50_000, 10_000)
#: At most this many combinations of sampled model fields are costed per cell.
MAX_SAMPLED_COMBINATIONS = 256
#: Cost of one per-image attention probability of content attention, in MAC-equivalents
#: (launch order and ETA only, never in FLOPs; fitted: docs/performance.md, "Launch order").
PAIR_MAC_EQUIVALENT = 150


class PlanError(ValueError):
    """A throughput or report that cannot give device-seconds (one line)."""


@dataclass(frozen=True)
class Images:
    """Images one epoch of a trial trains on and evaluates."""

    train: int
    val: int
    test: int


@dataclass(frozen=True)
class TrialPlan:
    """The predicted compute of one trial (``key`` as in ``runs.trial_id``)."""

    key: str
    cell: int
    sample: int
    model: str
    config: dict  # the ModelConfig fields costed
    epochs: int
    images: Images | None  # None: a folder/archive source not counted
    macs: int  # forward MACs per image
    train_flops: float | None
    eval_flops: float | None
    head_flops: float | None
    pairs: int = 0  # per-image attention probabilities (image-dependent attention), all layers
    upper_bound: bool = False  # a sampled model field: costed at its most expensive value
    seconds: float | None = None  # predicted device-seconds (training + evaluation)
    rate: str = ""  # where ``seconds`` comes from

    @property
    def flops(self) -> float | None:
        return None if self.train_flops is None else self.train_flops + self.eval_flops + self.head_flops

    @property
    def passes(self) -> int:
        """Forward passes of the trial (one training image per epoch where image counts are unknown)."""
        im = self.images
        return self.epochs * (TRAIN_FORWARDS * im.train + im.test + im.val if im else TRAIN_FORWARDS)

    @property
    def cost_terms(self) -> tuple[float, float]:
        """(passes × MACs, passes × per-image attention probabilities): the two kinds of work
        :class:`study.scheduling.progress.RemainingWork` fits seconds to."""
        return float(self.passes) * self.macs, float(self.passes) * self.pairs

    @property
    def weight(self) -> float:
        """Relative cost, for the launch order and the ETA before anything is measured."""
        macs, pairs = self.cost_terms
        return macs + PAIR_MAC_EQUIVALENT * pairs


@dataclass
class Plan:
    trials: list[TrialPlan]
    workers: int | None = None
    wall_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    #: runs.device_seconds of a finished run of the study, by trial id (``--against``)
    measured: dict[str, float] = field(default_factory=dict)

    def ratio(self, t: TrialPlan) -> float | None:
        m = self.measured.get(t.key)
        return t.seconds / m if t.seconds is not None and m else None

    def total(self, attr: str) -> float | None:
        values = [getattr(t, attr) for t in self.trials]
        return None if any(v is None for v in values) else float(sum(values))


# --------------------------------------------------------------------- images
def source_sizes(data: str, sizes: dict[str, tuple[int, int]] | None = None) -> tuple[int, int] | None:
    """(train, test) images of a data source before ``subset`` (a folder or archive only from ``sizes``)."""
    if sizes and data in sizes:
        return sizes[data]
    kind, _, arg = data.partition(":")
    if kind == "synthetic":
        return (int(arg) if arg.isdigit() else SYNTHETIC_TRAIN), SYNTHETIC_TEST
    if kind == "cifar10":
        return CIFAR10_SIZES
    return None


def trial_images(cfg, sizes: dict[str, tuple[int, int]] | None = None) -> Images | None:
    """Images per epoch of a ``TrainConfig`` (as :func:`study.data.load_splits` and
    :func:`study.data.hold_out_validation` cut them)."""
    whole = source_sizes(cfg.data, sizes)
    if whole is None:
        return None
    n_train, n_test = whole
    if cfg.subset is not None:
        n_train, n_test = min(cfg.subset, n_train), subset_test_size(cfg.subset, n_test)
    n_val = validation_size(cfg.validation, n_train)
    return Images(train=n_train - n_val, val=n_val, test=n_test)


# ---------------------------------------------------------------------- FLOPs
def costed_model(cfg, sample: dict[str, dict]) -> tuple[dict, bool]:
    """The model fields to cost: the cell's, or with sampled model fields the most
    expensive combination of their candidate values (an upper bound)."""
    base = cfg.model.to_dict()
    fields = [k for k in sample if k in columns()]
    if not fields:
        return base, False

    def built(values) -> dict | None:
        try:
            return ModelConfig.from_dict({**base, **dict(zip(fields, values))}).to_dict()
        except Exception:  # noqa: BLE001 - a combination the model refuses is never trained
            return None

    # every choice; of a range its upper end (the cost grows with every model field)
    combos = itertools.product(
        *(list(a) if kind == "choice" else [a[1]] for k in fields for kind, a in sample[k].items())
    )
    valid = filter(None, map(built, itertools.islice(combos, MAX_SAMPLED_COMBINATIONS)))
    return max(valid, key=model_macs, default=base), True


def attention_pairs(model: dict) -> int:
    """Per-image attention probabilities that depend on the image: layers × N_h × T²
    for an encoding with content scores (``Encoding.content``), 0 otherwise (ResNet18,
    positional attention, whose probabilities one batch shares)."""
    cfg = config_from_row(model)
    return 0 if cfg.arch == "resnet18" or not cfg.spec.content else cfg.layers * cfg.num_heads * cfg.grid**4


def plan_trials(spec, *, sizes: dict[str, tuple[int, int]] | None = None) -> list[TrialPlan]:
    """One :class:`TrialPlan` per trial of a validated study (``StudySpec``), in
    grid order (trial k: cell k mod n_cells, sample k // n_cells)."""
    per_cell = []
    for cell in spec.cells:
        cfg = spec.train_config(cell)
        model, bound = costed_model(cfg, spec.sample)
        macs = model_macs(model)
        images = trial_images(cfg, sizes)
        flops = dict(train_flops=None, eval_flops=None, head_flops=None)
        if images is not None:  # a forward pass is 2 x MACs FLOPs per image and epoch
            fwd = 2.0 * macs * cfg.epochs
            heads = cfg.head_images if cfg.head_stats and model.get("arch", "sa") != "resnet18" else 0
            flops = dict(
                train_flops=TRAIN_FORWARDS * fwd * images.train,
                eval_flops=fwd * (images.test + images.val),
                head_flops=fwd * min(heads, images.test),
            )
        per_cell.append(
            dict(
                model=model_name(ModelConfig.from_dict(model)),
                config=model,
                epochs=cfg.epochs,
                images=images,
                macs=macs,
                pairs=attention_pairs(model),
                upper_bound=bound,
                **flops,
            )
        )
    n = len(spec.cells)
    return [
        TrialPlan(key=f"c{k % n:03d}-s{k // n:03d}", cell=k % n, sample=k // n, **per_cell[k % n])
        for k in range(spec.num_trials)
    ]


def launch_order(trials: list[TrialPlan]) -> list[TrialPlan]:
    """Longest-predicted first (:attr:`TrialPlan.weight`); equal costs keep the
    grid's round-robin order (all cells' first samples, then their second, ...)."""
    return sorted(trials, key=lambda t: (-t.weight, t.sample, t.cell))


# ----------------------------------------------------------------- throughput
@dataclass(frozen=True)
class Throughput:
    """How fast a device trains: exactly one of ``tflops`` (counted FLOPs per second,
    1e12), ``images_per_s`` (training images per second) or ``bench`` (a ``study
    bench --json`` report)."""

    tflops: float | None = None
    images_per_s: float | None = None
    bench: dict | None = None
    source: str = ""

    def seconds(self, t: TrialPlan) -> tuple[float, str]:
        """Predicted device-seconds of a trial whose images are counted (:func:`make_plan` checks)
        and where the rate comes from."""
        if self.tflops is not None:
            return (t.train_flops + t.eval_flops) / (self.tflops * 1e12), f"{self.tflops:g} TFLOP/s"
        if self.images_per_s is not None:
            return t.passes / TRAIN_FORWARDS / self.images_per_s, f"{self.images_per_s:g} img/s"
        return _bench_seconds(t, self.bench or {}, self.source)


def bench_models(report: dict) -> list[tuple[str, dict, float]]:
    """(bench key, model fields, training images/s) of every model a ``study bench
    --json`` report timed (its fast path)."""
    if not isinstance(report, dict) or not isinstance(report.get("models"), list):
        raise PlanError("not a `study bench --json` report (no 'models' list)")
    out = []
    for m in (m for m in report["models"] if isinstance(m, dict)):
        key, fast = m.get("key"), m.get("fast")
        ips = fast.get("images_per_s") if isinstance(fast, dict) else None
        if key in PAPER_MODELS and isinstance(ips, (int, float)) and not isinstance(ips, bool):
            if not (math.isfinite(ips) and limits.MIN_IMAGES_PER_S <= ips <= limits.MAX_IMAGES_PER_S):
                raise PlanError(
                    f"model {key}: images_per_s {ips!r} is not from {limits.MIN_IMAGES_PER_S:g} to "
                    f"{limits.MAX_IMAGES_PER_S:g} (MIN/MAX_IMAGES_PER_S)"
                )
            out.append((key, PAPER_MODELS[key].to_dict(), float(ips)))
    if not out:
        raise PlanError(
            "the bench report holds no timed model of the paper (run `study bench --json` with "
            "--models of the paper)"
        )
    return out


def _bench_seconds(t: TrialPlan, report: dict, source: str) -> tuple[float, str]:
    """The bench's images/s of the same model; else the counted-FLOP rate of a bench
    model of the same architecture and encoding (median over them), else of all."""
    models = bench_models(report)
    where = f" ({source})" if source else ""
    for key, cfg, ips in models:
        if cfg == t.config:
            return t.passes / TRAIN_FORWARDS / ips, f"bench {key}: {ips:.1f} img/s{where}"
    rates = {key: TRAIN_FORWARDS * 2.0 * model_macs(cfg) * ips for key, cfg, ips in models}
    kin = [
        key
        for key, cfg, _ in models
        if cfg.get("arch") == t.config.get("arch")
        and (cfg.get("arch") == "resnet18" or cfg.get("encoding") == t.config.get("encoding"))
    ]
    keys = kin or list(rates)
    rate = statistics.median(rates[k] for k in keys)
    what = "bench " + "/".join(keys) + (" (same encoding)" if kin else " (all models)")
    return (t.train_flops + t.eval_flops) / rate, f"{what}: {rate / 1e12:.3g} TFLOP/s{where}"


def predict(trials: list[TrialPlan], throughput: Throughput) -> list[TrialPlan]:
    return [replace(t, **dict(zip(("seconds", "rate"), throughput.seconds(t)))) for t in trials]


def wall_seconds(seconds: list[float], workers: int) -> float:
    """Makespan of trials started longest first, each on the first free worker of
    ``workers`` (the longest-processing-time rule)."""
    free = [0.0] * max(1, workers)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(free, free[0] + s)
    return max(free)


# ------------------------------------------------------------------------ text
def _si(flops: float | None) -> str:
    if not flops:
        return "?" if flops is None else "0"
    scale, unit = next(
        (s for s in ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP")) if flops >= s[0]),
        (1e6, "MFLOP"),
    )
    return f"{flops / scale:.3g} {unit}"


def hms(seconds: float) -> str:
    """``H:MM:SS``; past 10,000 hours the years, to three figures; never fails (an
    infinite or undefined duration is written as such)."""
    if not math.isfinite(seconds):
        return "unbounded" if seconds > 0 else "undefined"
    if seconds >= 10_000 * 3600:  # H:MM:SS of more is a wall of digits
        return f"{seconds / (365.25 * 86400):.3g} years"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def total_line(plan: Plan) -> str:
    """One line: trials, FLOPs, and with a throughput the device-hours and the wall time."""
    n = len(plan.trials)
    flops = plan.total("flops")
    bound = " (upper bound: sampled model fields)" if any(t.upper_bound for t in plan.trials) else ""
    if flops is None:
        macs = sum(t.macs * t.epochs for t in plan.trials)
        return (
            f"plan: {n} trial{'s' * (n != 1)}, {2 * macs / 1e9:.3g} GFLOP per training image-pass summed "
            f"over epochs (image counts of the data source unknown){bound}"
        )
    parts = (
        f"training {_si(plan.total('train_flops'))} + evaluation {_si(plan.total('eval_flops'))} + "
        f"head statistics {_si(plan.total('head_flops'))}"
    )
    line = f"plan: {n} trial{'s' * (n != 1)}, {_si(flops)} ({parts}){bound}"
    secs = plan.total("seconds")
    if secs is not None:
        line += f"; {secs / 3600:.3g} device-hours"
        if plan.wall_seconds is not None:
            line += f", wall {hms(plan.wall_seconds)} on {plan.workers} worker{'s' * (plan.workers != 1)}"
    return line


def table(plan: Plan) -> str:
    """Per trial, in launch order (longest-predicted first)."""
    cols = [
        "trial",
        "model",
        "epochs",
        "train img",
        "val img",
        "test img",
        "GMAC/img",
        "train FLOP",
        "eval FLOP",
        "heads FLOP",
    ]
    has_s = all(t.seconds is not None for t in plan.trials)
    cols += ["device-s", "rate"] if has_s else []
    cols += ["measured s", "pred/meas"] if plan.measured else []
    rows = []
    for t in launch_order(plan.trials):
        im = t.images
        row = [
            t.key,
            t.model + (" (upper bound)" if t.upper_bound else ""),
            str(t.epochs),
            *(f"{v:,}" if im else "?" for v in ((im.train, im.val, im.test) if im else (0, 0, 0))),
            f"{t.macs / 1e9:.4g}",
            _si(t.train_flops),
            _si(t.eval_flops),
            _si(t.head_flops),
        ]
        row += [f"{t.seconds:,.0f}" if t.seconds >= 100 else f"{t.seconds:.1f}", t.rate] if has_s else []
        if plan.measured:
            m, r = plan.measured.get(t.key), plan.ratio(t)
            row += [f"{m:,.1f}" if m else "-", f"{r:.2f}" if r else "-"]
        rows.append(row)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    left = {0, 1} | ({cols.index("rate")} if has_s else set())
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    ).rstrip()
    return "\n".join([fmt(cols), *map(fmt, rows)])


def to_json(plan: Plan) -> dict[str, Any]:
    return {
        "trials": [
            {
                "trial_id": t.key,
                "cell": t.cell,
                "sample": t.sample,
                "model": t.model,
                "epochs": t.epochs,
                **{f"{k}_images": getattr(t.images, k, None) for k in ("train", "val", "test")},
                "forward_macs": t.macs,
                "train_flops": t.train_flops,
                "eval_flops": t.eval_flops,
                "head_flops": t.head_flops,
                "upper_bound": t.upper_bound,
                "device_seconds": t.seconds,
                "rate": t.rate or None,
                "measured_device_seconds": plan.measured.get(t.key),
                "predicted_over_measured": plan.ratio(t),
            }
            for t in launch_order(plan.trials)
        ],
        "total_flops": plan.total("flops"),
        **{k: plan.total(k) for k in ("train_flops", "eval_flops", "head_flops")},
        "device_seconds": plan.total("seconds"),
        "workers": plan.workers,
        "wall_seconds": plan.wall_seconds,
        "notes": plan.notes,
    }


def make_plan(
    spec,
    *,
    throughput: Throughput | None = None,
    workers: int | None = None,
    sizes: dict[str, tuple[int, int]] | None = None,
) -> Plan:
    """The plan of a validated study; device-seconds and the wall time need a ``throughput``."""
    trials = plan_trials(spec, sizes=sizes)
    plan = Plan(trials=trials, workers=workers)
    if throughput is not None and all(t.images is not None for t in trials):
        plan.trials = predict(trials, throughput)
        if workers:
            plan.wall_seconds = wall_seconds([t.seconds for t in plan.trials], workers)
    return plan
