"""StreamingResampler against one-shot soxr, and to_mono."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from voiced.audio.resample import ResampleQuality, StreamingResampler, to_mono
from voiced.errors import ConfigError


def stream(resampler: StreamingResampler, x: np.ndarray, seed: int = 0, max_chunk: int = 3000) -> list[np.ndarray]:
    """Feed ``x`` in uneven chunks (empty ones included), flush, return every output chunk."""
    rng = np.random.default_rng(seed)
    out, i = [], 0
    while i < len(x):
        n = int(rng.integers(0, max_chunk))
        out.append(resampler.process(x[i : i + n]))
        i += n
    out.append(resampler.process(np.zeros(0, np.float32), last=True))
    return out


def sine(freq: float, rate: int, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * freq * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[np.argmax(spectrum)])


@pytest.mark.parametrize("in_rate", [48_000, 44_100, 22_050, 8_000])
def test_streamed_equals_one_shot(in_rate: int) -> None:
    rng = np.random.default_rng(in_rate)
    x = (0.3 * rng.standard_normal(in_rate * 2)).astype(np.float32)  # 2 s of noise: every frequency
    chunks = stream(StreamingResampler(in_rate, 16_000), x, seed=in_rate)
    streamed = np.concatenate(chunks)
    one_shot = soxr.resample(x, in_rate, 16_000, quality="HQ")
    assert len(streamed) == len(one_shot) == round(len(x) * 16_000 / in_rate)
    np.testing.assert_allclose(streamed, one_shot, atol=1e-6)
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)


@pytest.mark.parametrize("in_rate", [48_000, 44_100])
@pytest.mark.parametrize("freq", [440.0, 1000.0, 3150.0])
def test_sine_frequency_and_length_are_preserved(in_rate: int, freq: float) -> None:
    out = np.concatenate(stream(StreamingResampler(in_rate, 16_000), sine(freq, in_rate, 1.5)))
    assert abs(len(out) - 1.5 * 16_000) <= 1
    assert abs(peak_hz(out, 16_000) - freq) < 1.0


@pytest.mark.parametrize("in_rate", [48_000, 44_100])
def test_chunk_boundaries_do_not_click(in_rate: int) -> None:
    # Tiny chunks put a boundary every few output samples; the result must still be the
    # ideal sine everywhere past the filter's start-up and wind-down.
    freq, seconds = 997.0, 1.0
    out = np.concatenate(stream(StreamingResampler(in_rate, 16_000), sine(freq, in_rate, seconds), max_chunk=37))
    ideal = sine(freq, 16_000, seconds)
    middle = slice(400, len(ideal) - 400)
    assert np.max(np.abs(out[middle] - ideal[middle])) < 2e-3
    # and no sample-to-sample jump bigger than the sine itself can make
    assert np.max(np.abs(np.diff(out[middle]))) <= 0.5 * 2 * np.pi * freq / 16_000 * 1.01


def test_equal_rates_pass_through_untouched() -> None:
    r = StreamingResampler(16_000, 16_000)
    assert r.passthrough
    x = np.random.default_rng(0).standard_normal(1234).astype(np.float32)
    assert np.array_equal(r.process(x), x)
    assert np.array_equal(r.process(x.astype(np.float64), last=True), x)  # dtype normalised only


def test_multichannel_stream() -> None:
    x = np.stack([sine(440, 48_000, 0.5), sine(880, 48_000, 0.5)], axis=1)
    r = StreamingResampler(48_000, 16_000, channels=2)
    out = np.concatenate(stream(r, x))
    assert out.shape == (8000, 2)
    assert abs(peak_hz(out[:, 0], 16_000) - 440) < 2 and abs(peak_hz(out[:, 1], 16_000) - 880) < 2


def test_reset_starts_a_new_stream() -> None:
    r = StreamingResampler(48_000, 16_000, quality=ResampleQuality.MEDIUM)
    x = sine(440, 48_000, 0.2)
    first = np.concatenate([r.process(x), r.process(x[:0], last=True)])
    r.reset()
    second = np.concatenate([r.process(x), r.process(x[:0], last=True)])
    np.testing.assert_array_equal(first, second)


def test_invalid_rates_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        StreamingResampler(0, 16_000)
    with pytest.raises(ConfigError):
        StreamingResampler(48_000, -1)
    with pytest.raises(ConfigError):
        StreamingResampler(48_000, 16_000, channels=0)


def test_to_mono_picks_or_averages() -> None:
    x = np.array([[0.1, 0.3, -1.0], [0.5, -0.5, 1.0]], np.float32)
    np.testing.assert_array_equal(to_mono(x, 1), x[:, 1])
    np.testing.assert_allclose(to_mono(x, None), [(0.1 + 0.3 - 1.0) / 3, 1.0 / 3], rtol=1e-6)
    np.testing.assert_array_equal(to_mono(x[:, :1], None), x[:, 0])
    assert to_mono(x, 0).flags.c_contiguous and to_mono(x, 0).dtype == np.float32
    mono = np.array([0.25, -0.25])
    np.testing.assert_array_equal(to_mono(mono, None), mono)
    np.testing.assert_array_equal(to_mono(mono, 0), mono)


def test_to_mono_rejects_a_channel_that_is_not_there() -> None:
    with pytest.raises(ConfigError, match="channel 2"):
        to_mono(np.zeros((4, 2)), 2)
    with pytest.raises(ConfigError):
        to_mono(np.zeros(4), 1)
    with pytest.raises(ValueError):
        to_mono(np.zeros((2, 2, 2)), None)
