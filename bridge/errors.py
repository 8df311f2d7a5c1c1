"""The bridge's error hierarchy: every error it raises on purpose is a BridgeError."""


class BridgeError(Exception):
    """Root of the errors the bridge raises on purpose."""


class LocalKafkaError(BridgeError):
    """The local development broker could not be set up, started or stopped."""
