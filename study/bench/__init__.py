"""``study bench``: training throughput of the models and attention layers against reference
formulations."""

# benchmarks/gpu_check.py still reads the backends here; their home is study.compilers
from study.compilers import COMPILE_BACKENDS

__all__ = ["COMPILE_BACKENDS"]
