"""voiced: an offline-first voice daemon for low-power CPUs.

Nothing heavy is imported here: models load in ``load()`` classmethods.
"""

from voiced.errors import AudioError, ConfigError, ModelError, VoicedError

__all__ = ["AudioError", "ConfigError", "ModelError", "VoicedError", "__version__"]
__version__ = "0.1.0"
