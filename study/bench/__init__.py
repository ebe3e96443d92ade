"""``study bench``: training throughput of the models and attention layers against reference
formulations.  This package's ``__init__`` stays torch-free: the CLI reads its constants."""

#: ``torch.compile`` backends ``--compile-backend`` and ``DevicePaths.compile_backend`` accept
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
