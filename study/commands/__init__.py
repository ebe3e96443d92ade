"""Sub-commands of the ``study`` CLI; each module has ``register(subparsers)``."""
