"""Audio in and out: capture (ALSA, WAV), resampling, frames and windows."""
