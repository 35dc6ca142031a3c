"""The error text-to-speech raises for text it cannot speak (model and device errors reuse voiced.errors)."""

from __future__ import annotations

from voiced.errors import VoicedError

__all__ = ["NothingToSpeak", "SynthesisCancelled", "TextError"]


class TextError(VoicedError):
    """The text is empty, too long, or has nothing speakable in it; the message says which."""


class NothingToSpeak(TextError):
    """The text is well formed but has nothing a voice can say (punctuation only): a streamed
    reply may skip such a sentence instead of failing after its audio began."""


class SynthesisCancelled(VoicedError):
    """The synthesis was cancelled (``RunCancel``) while the model ran: nothing went wrong."""
