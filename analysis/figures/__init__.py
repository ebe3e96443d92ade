"""Figures of a study (each one: docs/figures.md, "`analysis figures`").

Every figure module has ``KIND`` and ``draw(ctx) -> (paths written)``, raises
:class:`~analysis.figures.context.Skip` when the data cannot support it, and hands its drawing to
``ctx.render(fn, ...)`` (run on a process pool by :mod:`analysis.figures.jobs`).
``SCOPE``: ``"study"`` (default: one figure of all trials) or ``"variant"`` (one per
model variant, or per trial with ``per_seed``).  ``READS``: the tables besides
``runs`` it reads (default: all), whose files decide when it is redrawn.
"""

from __future__ import annotations

from pathlib import Path

from analysis.figures.context import Context
from analysis.figures.jobs import run
from analysis.io import Study
from study.device.cpus import local_cpus


def _modules():
    # imported when drawing: a pool worker unpickling one figure's function imports only its module
    from analysis.figures import (
        conv_likeness,
        convergence,
        distance,
        gates,
        heads,
        locality,
        maps,
        sweeps,
        table1,
        trajectories,
    )

    return [convergence, table1, heads, maps, trajectories, conv_likeness, distance, locality, gates, sweeps]


def default_out(study: Study) -> Path:
    """Where ``analysis figures`` draws by default: ``<study folder>/figures``, or
    ``./figures/<name>`` for a study on object storage."""
    return Path("figures") / study.name if study.remote else Path(study.folder) / "figures"


def draw_all(
    study: Study,
    out: Path,
    *,
    epoch: int | None = None,
    per_seed: bool = False,
    pdf: bool = True,
    jobs: int | None = None,
) -> tuple[list[Path], list[str]]:
    """Draw every figure ``study`` supports into ``out``: (files, skip lines); only what changed is
    redrawn, on ``jobs`` processes (default: the cores this process may use)."""
    ctx = Context(study=study, out=Path(out), epoch=epoch, per_seed=per_seed, pdf=pdf, defer=True)
    return run(ctx, _modules(), jobs=jobs if jobs is not None else local_cpus())


__all__ = ["default_out", "draw_all"]
