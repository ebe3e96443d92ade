"""Device-dependent choices: the code paths a run takes, the compile backends, the CPU count."""
