"""The study file: its schema, YAML reader, overrides and the checks of every value it can produce."""
