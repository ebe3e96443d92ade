"""Per-epoch attention maps of every layer as TensorBoard images, written by the driver from
each reported epoch's ``maps`` part (what they show: docs/figures.md "TensorBoard, MLflow, W&B")."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
from ray.tune.logger import LoggerCallback

from study.results.tables import decode_maps, part_path

SCALE = 6  # screen pixels per attention-map cell
GAP = 2


def layer_images(maps) -> dict[int, np.ndarray]:
    """``maps`` rows (layer, head, window, probs) of one epoch → {layer: HWC uint8}."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    out: dict[int, np.ndarray] = {}
    for layer, rows in maps.sort_values(["layer", "head"]).groupby("layer"):
        probs = [
            np.asarray(r.probs, dtype=np.float64).reshape(int(r.window), int(r.window))
            for r in rows.itertuples(index=False)
        ]
        top = max(float(p.max()) for p in probs)  # one scale per layer: heads stay comparable
        tiles = [np.kron(cmap(p / top if top > 0 else p)[..., :3], np.ones((SCALE, SCALE, 1))) for p in probs]
        gap = np.ones((tiles[0].shape[0], GAP, 3))
        canvas = np.concatenate([x for t in tiles for x in (gap, t)][1:], axis=1)
        out[int(layer)] = (canvas * 255).round().astype(np.uint8)
    return out


class AttentionImagesCallback(LoggerCallback):
    def __init__(self, *, tables: str):
        self.tables = tables
        self._writers: dict = {}
        self._broken: set = set()

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        key, epoch = (trial.config or {}).get("key"), result.get("epoch")
        if (
            trial in self._broken
            or key is None
            or not isinstance(epoch, int)
            or result.get("status", "running") != "running"
        ):
            return
        try:
            try:  # the epoch's ``maps`` part, a local path or a URI (pyarrow picks the filesystem)
                maps = decode_maps(pq.read_table(part_path(self.tables, "maps", key, epoch))).to_pandas()
            except OSError:  # none written (FileNotFoundError) or unreadable
                return
            if maps.empty:
                return
            writer = self._writers.get(trial)
            if writer is None:
                from tensorboardX import SummaryWriter

                writer = self._writers[trial] = SummaryWriter(
                    logdir=trial.local_path, filename_suffix=".attention"
                )
            for layer, image in layer_images(maps).items():
                writer.add_image(f"attention/layer_{layer}", image, global_step=epoch + 1, dataformats="HWC")
            writer.flush()
        except Exception as e:  # noqa: BLE001 - images are a view of the tables: never stop the study
            self._broken.add(trial)
            import sys

            print(
                f"study: warning: TensorBoard attention images of trial {key} "
                f"turned off: {type(e).__name__}: {e}",
                file=sys.stderr,
                flush=True,
            )

    def log_trial_end(self, trial, failed: bool = False) -> None:
        writer = self._writers.pop(trial, None)
        if writer is not None:
            writer.close()

    def on_experiment_end(self, trials, **info) -> None:
        for trial in list(self._writers):
            self.log_trial_end(trial)
