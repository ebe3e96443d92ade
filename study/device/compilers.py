"""The ``torch.compile`` backends a run may name, torch-free: ``study bench --compile-backend``
offers them without importing torch, and :class:`study.device.paths.DevicePaths` checks its own
against them (which of them are verified to train right: ``study.device.paths.VERIFIED_COMPILES``)."""

COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
