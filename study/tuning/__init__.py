"""Ray Tune integration: the grid × Optuna searcher, the trial adapters, the runner."""
