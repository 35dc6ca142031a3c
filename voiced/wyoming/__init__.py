"""Wyoming adapter: Home Assistant's voice protocol (asr, tts, wake, intent, satellite) over the core."""

from voiced.wyoming.config import WyomingConfig

__all__ = ["WyomingConfig"]
