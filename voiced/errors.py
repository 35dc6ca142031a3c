"""The exception hierarchy of voiced, rooted at :class:`VoicedError`."""

from __future__ import annotations

__all__ = ["AudioError", "ConfigError", "ModelError", "VoicedError"]


class VoicedError(Exception):
    """Base class of every error voiced raises on purpose."""


class ConfigError(VoicedError):
    """A configuration value is missing, malformed or out of range.

    The message names the key and, when known, the file it came from.
    """

    def __init__(self, key: str, problem: str, source: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.source = source
        where = f" in {source}" if source else ""
        super().__init__(f"{key}{where}: {problem}")

    def as_option(self) -> ConfigError:
        """The same error named by its command-line option (``length_scale`` → ``--length-scale``),
        for settings given on a command line; an error that names an option already is itself."""
        if self.key.startswith("-"):
            return self
        return ConfigError(f"--{self.key.replace('_', '-')}", self.problem)


class ModelError(VoicedError):
    """A model file is missing, unreadable, of the wrong layout or fails its checksum.

    The message names the file.
    """


class AudioError(VoicedError):
    """Audio could not be read: a malformed file or an unusable device."""
