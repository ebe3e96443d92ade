"""Experiment trackers from the study file's ``loggers:``, each Ray Tune's own callback used as
is (docs/figures.md "TensorBoard, MLflow, W&B").  No Ray or torch at import time: ``study
validate`` checks the packages."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from study.spec.studyfile import (
    LOGGERS,
)  # the names a study file may use: the study-file reader does not import this module


def check_loggers(names) -> tuple[int, str] | None:
    """(index, message naming the extra to install) of the first logger whose package is
    missing, else None."""
    for i, name in enumerate(names):
        module, extra = LOGGERS[name]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return i, (
                f"logger {name} needs the {module} package: pip install 'attention-cnn-study[{extra}]' "
                f"(from a checkout: pip install -e '.[{extra}]')"
            )
    return None


def mlflow_tracking_uri(root: str) -> str | None:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if "://" in root:
        return None  # mlflow's own default; a remote study names its server by the variable
    # MLflow 3 keeps its file store in maintenance mode and refuses it unless told;
    # a file store next to the tables needs no server (point the variable at one)
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (Path(root) / "mlruns").resolve().as_uri()


def logger_callbacks(names, *, root: str, study: str, tables: str) -> list[Any]:
    """The Ray Tune callbacks for ``names`` (validated, packages present)."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    # Ray's TensorBoard logger is off (study.tuning.runner): the study file decides;
    # Ray's CSV and JSON loggers (its experiment analysis reads them) always run
    callbacks: list[Any] = [CSVLoggerCallback(), JsonLoggerCallback()]
    if "tensorboard" in names:
        from ray.tune.logger import TBXLoggerCallback

        from study.tuning.attention_images import AttentionImagesCallback

        callbacks += [TBXLoggerCallback(), AttentionImagesCallback(tables=tables)]
    if "mlflow" in names:
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        callbacks.append(
            MLflowLoggerCallback(
                tracking_uri=mlflow_tracking_uri(root), experiment_name=study, tags={"study": study}
            )
        )
    if "wandb" in names:
        from ray.air.integrations.wandb import WandbLoggerCallback

        kwargs: dict[str, Any] = {"project": os.environ.get("WANDB_PROJECT") or study, "log_config": False}
        if "://" not in root:
            kwargs["dir"] = root  # wandb writes <root>/wandb/(offline-)run-*
        callbacks.append(WandbLoggerCallback(**kwargs))
    return callbacks


__all__ = ["check_loggers", "logger_callbacks", "mlflow_tracking_uri"]
