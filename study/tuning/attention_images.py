"""Per-epoch attention maps of every layer as TensorBoard images, written by the driver from
each reported epoch's ``maps`` part (what they show: docs/figures.md "TensorBoard, MLflow, W&B")."""

from __future__ import annotations

import numpy as np
from ray.tune.logger import LoggerCallback

SCALE = 6  # screen pixels per attention-map cell
GAP = 2


def layer_images(maps) -> dict[int, np.ndarray]:
    """``maps`` rows (layer, head, window, probs) of one epoch → {layer: HWC uint8}."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    out: dict[int, np.ndarray] = {}
    for layer, rows in maps.sort_values(["layer", "head"]).groupby("layer"):
        probs = [np.asarray(r.probs, dtype=np.float64).reshape(int(r.window), int(r.window))
                 for r in rows.itertuples(index=False)]
        top = max(float(p.max()) for p in probs)  # one scale per layer: heads stay comparable
        tiles = [np.kron(cmap(p / top if top > 0 else p)[..., :3], np.ones((SCALE, SCALE, 1))) for p in probs]
        gap = np.ones((tiles[0].shape[0], GAP, 3))
        canvas = np.concatenate([x for t in tiles for x in (gap, t)][1:], axis=1)
        out[int(layer)] = (canvas * 255).round().astype(np.uint8)
    return out


def read_epoch_maps(tables: str, key: str, epoch: int):
    """The ``maps`` rows of (trial ``key``, ``epoch``), or None when there are none."""
    import pyarrow.parquet as pq

    from study.tables import decode_maps, part_path

    try:  # a local path or a URI (pyarrow picks the filesystem)
        return decode_maps(pq.read_table(part_path(tables, "maps", key, epoch))).to_pandas()
    except OSError:  # none written (FileNotFoundError) or unreadable
        return None


class AttentionImagesCallback(LoggerCallback):
    def __init__(self, *, tables: str):
        self.tables = tables
        self._writers: dict = {}
        self._broken: set = set()

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial in self._broken:  # images are a view of the tables: never stop the study
            return
        try:
            self._log(trial, result)
        except Exception as e:  # noqa: BLE001
            self._broken.add(trial)
            import sys

            print(f"study: warning: TensorBoard attention images of trial {(trial.config or {}).get('key')} "
                  f"turned off: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def _log(self, trial, result: dict) -> None:
        key = (trial.config or {}).get("key")
        epoch = result.get("epoch")
        if key is None or not isinstance(epoch, int) or result.get("status", "running") != "running":
            return
        maps = read_epoch_maps(self.tables, key, epoch)
        if maps is None or maps.empty:
            return
        if trial not in self._writers:
            from tensorboardX import SummaryWriter

            self._writers[trial] = SummaryWriter(logdir=trial.local_path, filename_suffix=".attention")
        writer = self._writers[trial]
        for layer, image in layer_images(maps).items():
            writer.add_image(f"attention/layer_{layer}", image, global_step=epoch + 1, dataformats="HWC")
        writer.flush()

    def log_trial_end(self, trial, failed: bool = False) -> None:
        writer = self._writers.pop(trial, None)
        if writer is not None:
            writer.close()

    def on_experiment_end(self, trials, **info) -> None:
        for trial in list(self._writers):
            self.log_trial_end(trial)
