"""Voice activity detection and endpointing: energy gate, Silero VAD v5, endpointer.

    model = SileroVad.load(path)                        # immutable, shareable
    endpointer = Endpointer(EndpointConfig(), GatedDetector(EnergyGate(), model.create_detector()))
    for window in Windower(10).windows(chunks):
        for event in endpointer.process(window):        # SPEECH_START, AUDIO…, SPEECH_END
            ...
    events = endpointer.flush()                         # closes an open utterance at end of stream

Modules: ``base`` (kinds, detector interface), ``gate`` (energy), ``silero`` (model and
per-stream detector), ``combined`` (gate → Silero, builders), ``endpointer`` (events).
"""

from voiced.vad.base import SpeechDetector, VadKind, frame_count
from voiced.vad.combined import (
    GatedDetector,
    GateStats,
    build_endpointer,
    create_detector,
)
from voiced.vad.endpointer import (
    EndpointConfig,
    Endpointer,
    EndReason,
    VadEvent,
    VadEventKind,
)
from voiced.vad.gate import EnergyGate, EnergyGateConfig, frame_levels_db
from voiced.vad.silero import CHUNK_SAMPLES, CONTEXT_SAMPLES, SileroDetector, SileroVad

__all__ = [
    "CHUNK_SAMPLES",
    "CONTEXT_SAMPLES",
    "EndReason",
    "EndpointConfig",
    "Endpointer",
    "EnergyGate",
    "EnergyGateConfig",
    "GateStats",
    "GatedDetector",
    "SileroDetector",
    "SileroVad",
    "SpeechDetector",
    "VadEvent",
    "VadEventKind",
    "VadKind",
    "build_endpointer",
    "create_detector",
    "frame_count",
    "frame_levels_db",
]
