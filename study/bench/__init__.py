"""``study bench``: training throughput of the models and attention layers against reference
formulations."""
