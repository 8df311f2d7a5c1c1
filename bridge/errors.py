"""The bridge's error hierarchy: every error it raises on purpose is a BridgeError."""


class BridgeError(Exception):
    """Root of the errors the bridge raises on purpose."""


class LocalKafkaError(BridgeError):
    """The local development broker could not be set up, started or stopped."""


class ConfigError(BridgeError):
    """The configuration file or its overrides are invalid; nothing was started."""


class DecodeError(BridgeError):
    """A record could not be decoded per its topic's format."""
