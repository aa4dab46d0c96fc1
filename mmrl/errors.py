"""Errors that name the sample, file or config key at fault."""


class MMRLError(Exception):
    """Base class for user-facing errors (printed without a traceback by the CLI)."""


class ConfigError(MMRLError):
    pass


class DataError(MMRLError):
    """A sample or file that cannot be used; ``sample_id`` names it when known."""

    def __init__(self, message: str, sample_id: str | None = None, path: str | None = None):
        parts = []
        if sample_id is not None:
            parts.append(f"sample '{sample_id}'")
        if path is not None:
            parts.append(f"file '{path}'")
        prefix = (", ".join(parts) + ": ") if parts else ""
        super().__init__(prefix + message)
        self.sample_id = sample_id
        self.path = path


class RewardError(MMRLError):
    pass
