"""User-facing errors: one line, naming the problem. The CLI prints them without a traceback."""


class OppoError(Exception):
    """Base class for every error caused by bad input or an impossible configuration."""


class TraceError(OppoError):
    """A trace file is missing, unreadable or malformed."""


class ConfigError(OppoError):
    """A configuration value is invalid or the configuration is impossible (e.g. a model does not fit)."""
