"""The hyper-parameters of a trial as one flat dict of scalars.

Tune's loggers log a trial's config as its hyper-parameters (TensorBoard's HParams
tab, MLflow params, the W&B config).  The searcher puts this dict under the config's
``hparams`` key: every model field (``num_heads``, ``pos_dim``, ``encoding``,
``isotropic``, …) and training field (``lr``, ``weight_decay``, ``epochs``, …) of the
trial's resolved :class:`~study.trial.config.TrainConfig`.  Fields that do not apply
(``None``, e.g. ``isotropic`` of a learned encoding) are left out: TensorBoard's
HParams cannot hold a null.
"""

from __future__ import annotations

from typing import Any

SCALARS = (bool, int, float, str)


def flat_hparams(train_config) -> dict[str, Any]:
    """Model fields then training fields (``model`` unnested), scalars only."""
    d = train_config.to_dict()
    model = d.pop("model")
    out = {k: v for k, v in model.items() if isinstance(v, SCALARS)}
    out.update({k: v for k, v in d.items() if isinstance(v, SCALARS)})
    return out


def trial_hparams(source: dict[str, Any], cell: int, sampled: dict[str, Any] | None) -> dict[str, Any]:
    """``flat_hparams`` of grid cell ``cell`` with ``sampled`` values, for the study
    file ``source`` = ``{"raw", "file", "name"}`` (as in ``study.json``)."""
    from study.spec import validate

    spec = validate(source["raw"], file=source["file"], default_name=source["name"])
    return flat_hparams(spec.train_config(spec.cells[cell], sampled))
