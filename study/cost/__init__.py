"""A study's compute before it runs: FLOPs per image and the plan of device-seconds and wall time."""
