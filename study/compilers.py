"""The ``torch.compile`` backends a run may name, torch-free: ``study bench --compile-backend``
offers them without importing torch, and :class:`study.devicepaths.DevicePaths` checks its own
against them (which of them are verified to train right: ``study.devicepaths.VERIFIED_COMPILES``)."""

COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
