"""Tests of voiced.audio: WAV reading, resampling, sources (ALSA through the file plugin)."""
