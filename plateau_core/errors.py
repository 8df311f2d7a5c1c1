"""The storage engine's error hierarchy: every error it raises on purpose is a PlateauError."""


class PlateauError(Exception):
    """Root of the errors plateau_core raises on purpose."""
