"""Wake words: openWakeWord models on the capture windows (front end shared by every head)."""

from voiced.wake.detector import Detection, WakeConfig, WakeDetector, WakeStream
from voiced.wake.model import WakeHead, WakeModel
from voiced.wake.sensitivity import Sensitivity

__all__ = ["Detection", "Sensitivity", "WakeConfig", "WakeDetector", "WakeHead", "WakeModel", "WakeStream"]
