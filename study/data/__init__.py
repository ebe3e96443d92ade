"""The data layer of one trial: a data source → :class:`Splits` → :class:`DeviceData`.

Sources, subsets, validation and the cache: docs/study-files.md, "Data".
"""

from importlib import import_module

#: name -> the submodule defining it; imported on first use (PEP 562), so that checking a
#: source's layout (``study.data.layout``/``sources``/``errors``) never imports torch
_WHERE = {
    "default_cache_dir": "cache",
    "DataError": "errors",
    "CIFAR_MEAN": "pipeline",
    "CIFAR_STD": "pipeline",
    "DeviceData": "pipeline",
    "EpochPlan": "pipeline",
    "augment": "pipeline",
    "epoch_plan": "pipeline",
    "Splits": "splits",
    "load_splits": "load",
    "stratified_subset": "splits",
    "make_synthetic": "synthetic",
    "hold_out_validation": "validation",
    "validation_size": "validation",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
