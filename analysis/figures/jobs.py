"""Plan, reuse and draw a study's figure jobs (one per figure, or per variant of a ``SCOPE = "variant"``
module).  Stale jobs compute their data here and draw on a ``spawn`` pool: plain children, whose CPU
time counts toward this command's."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from analysis.figures.cache import MANIFEST, Entry, Manifest, fingerprint, table_files
from analysis.figures.context import Context, Skip

#: tables a module reads besides runs when it does not say (``READS``)
ALL_TABLES = ("epochs", "heads", "maps")
#: fewer drawings than this are drawn here: starting workers would cost more than it saves
MIN_POOL = 3


def plan(ctx: Context, modules, files: dict) -> list[tuple]:
    """(module, job key, trial ids or None for every trial, fingerprint) of every job."""
    options = {"epoch": ctx.epoch, "per_seed": ctx.per_seed}
    out = []
    t = ctx.trials
    for module in modules:
        kind = module.KIND
        reads = tuple(getattr(module, "READS", ALL_TABLES))
        groups = [(kind, None)]  # slug: unique per trial, variant_slug: per variant (label)
        if getattr(module, "SCOPE", "study") == "variant" and not t.empty:
            groups = [
                (f"{kind}/{slug}", list(g["trial_id"]))
                for slug, g in t.groupby("slug" if ctx.per_seed else "variant_slug", sort=False)
            ]
        for key, ids in groups:
            trials = t if ids is None else t[t["trial_id"].isin(ids)]
            fp = fingerprint(
                kind=kind,
                key=key,
                options=options,
                files=files,
                trials=trials,
                tables=reads,
                every_trial=ids is None,
            )
            out.append((module, key, ids, fp))
    return out


def run(ctx: Context, modules, *, jobs: int) -> tuple[list[Path], list[str]]:
    """Draw the jobs of ``modules`` that are not fresh in ``ctx.out`` (``ctx.defer``: queued, then drawn
    here)."""
    from analysis import style

    style.setup()
    out, pdf = ctx.out, ctx.pdf
    manifest = Manifest.load(out)
    jobs_plan = plan(ctx, modules, table_files(ctx.study.root))
    drawn: dict[str, Entry] = {}
    for module, key, ids, fp in jobs_plan:
        if manifest.fresh(key, fp, pdf=pdf):
            continue
        ctx.only = frozenset(ids) if ids is not None else None
        ctx.job = key
        first = len(ctx.skipped)
        direct: list[Path] = []
        try:
            direct = list(module.draw(ctx) or [])
        except Skip as why:
            ctx.skip(module.KIND, str(why))
        drawn[key] = Entry(
            fingerprint=fp, files=direct, skipped=ctx.skipped[first:], pdf=pdf, per_seed=ctx.per_seed
        )
    for (key, *_), paths in zip(ctx.renders, execute(ctx.renders, jobs=jobs)):
        drawn[key].files += paths
    for key, e in drawn.items():
        e.files = [Path(p).name for p in e.files]
        manifest.record(key, e)
    manifest.forget_others({key for _, key, _, _ in jobs_plan}, per_seed=ctx.per_seed)
    if drawn or (out / MANIFEST).exists():
        manifest.save()
    entries = [manifest.entries[key] for _, key, _, _ in jobs_plan if key in manifest.entries]
    return [out / f for e in entries for f in e.files], [line for e in entries for line in e.skipped]


def execute(renders: list, *, jobs: int) -> list[list[Path]]:
    """Draw the queued figures (``(job, fn, args, kwargs, canvas)``): the paths of each, in order."""
    if jobs <= 1 or len(renders) < MIN_POOL:
        return [_draw(*r) for r in renders]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(
        max_workers=min(jobs, len(renders)), mp_context=mp.get_context("spawn"), initializer=_init
    ) as pool:
        with interrupts_held():  # submitting starts the workers
            futures = [pool.submit(_draw, *r) for r in renders]
        return [f.result() for f in futures]


@contextmanager
def interrupts_held():
    """Hold Ctrl-C and SIGTERM until the block ends, then raise the first as it would have
    been.  A ``spawn`` worker reads its start-up data from a pipe the parent writes after
    starting it: interrupted in between, the parent closes the pipe and the worker prints
    ``EOFError: Ran out of input``.  Outside the main thread (no handlers there) it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    signums = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])


def _init() -> None:
    import warnings

    from analysis import style

    warnings.simplefilter("ignore")  # as `analysis figures` does: font and layout chatter stays quiet
    style.setup()


def _draw(job: str, fn, args, kwargs, canvas) -> list[Path]:
    import matplotlib.pyplot as plt

    try:
        return fn(canvas, *args, **kwargs)
    finally:
        plt.close("all")
