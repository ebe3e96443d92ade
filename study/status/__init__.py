"""What a user reads about a study's trials: its model variants and ``study status``."""
