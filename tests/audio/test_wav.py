"""WAV reading in every layout, malformed files, write_wav, and WavSource."""

from __future__ import annotations

import shutil
import struct
import subprocess
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from voiced.audio.frames import SAMPLE_RATE
from voiced.audio.source import WavSource
from voiced.audio.wav import SampleFormat, WavReader, read_wav, write_wav
from voiced.errors import AudioError, ConfigError

GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
SOX = shutil.which("sox")
needs_sox = pytest.mark.skipif(SOX is None, reason="sox is not installed (apt-get install sox)")


# -- building files by hand -------------------------------------------------------------


def chunk(cid: bytes, body: bytes, declared: int | None = None) -> bytes:
    size = len(body) if declared is None else declared
    return cid + struct.pack("<I", size) + body + (b"\0" if len(body) % 2 else b"")


def fmt_chunk(tag: int, channels: int, rate: int, bits: int, *, extensible: bool = False,
              block_align: int | None = None, guid: bytes | None = None) -> bytes:
    align = channels * bits // 8 if block_align is None else block_align
    head = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * align, align, bits)
    if extensible:
        mask = (1 << channels) - 1
        return chunk(b"fmt ", head + struct.pack("<HHI", 22, bits, mask) + (guid or struct.pack("<H", tag) + GUID_TAIL))
    return chunk(b"fmt ", head if tag == 1 else head + b"\0\0")  # non-PCM carries cbSize


def riff(*chunks: bytes, magic: bytes = b"RIFF", form: bytes = b"WAVE") -> bytes:
    body = form + b"".join(chunks)
    return magic + struct.pack("<I", len(body)) + body


# Each format: format tag, bits, and (frames, channels) -> (data bytes, expected float32).
def _ints(rng: np.random.Generator, lo: int, hi: int, shape: tuple[int, int]) -> np.ndarray:
    values = rng.integers(lo, hi + 1, size=shape, dtype=np.int64)
    values.flat[:4] = [lo, hi, 0, -1 if lo < 0 else 128][: values.size]  # the edges of the range
    return values


def encode(fmt: SampleFormat, shape: tuple[int, int], seed: int = 0) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(seed)
    if fmt is SampleFormat.U8:
        q = _ints(rng, 0, 255, shape)
        return q.astype(np.uint8).tobytes(), ((q - 128) / 128).astype(np.float32)
    if fmt is SampleFormat.S16:
        q = _ints(rng, -(1 << 15), (1 << 15) - 1, shape)
        return q.astype("<i2").tobytes(), (q / 32768).astype(np.float32)
    if fmt is SampleFormat.S24:
        q = _ints(rng, -(1 << 23), (1 << 23) - 1, shape)
        raw = (q & 0xFFFFFF).astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
        return raw, (q / float(1 << 23)).astype(np.float32)
    if fmt is SampleFormat.S32:
        q = _ints(rng, -(1 << 31), (1 << 31) - 1, shape)
        return q.astype("<i4").tobytes(), (q / float(1 << 31)).astype(np.float32)
    x = rng.uniform(-1, 1, size=shape)
    x.flat[:3] = [-1.0, 1.0, 0.0][: x.size]
    dtype = "<f4" if fmt is SampleFormat.F32 else "<f8"
    return x.astype(dtype).tobytes(), x.astype(dtype).astype(np.float32)


FORMATS = {  # SampleFormat -> (tag, bits)
    SampleFormat.U8: (1, 8), SampleFormat.S16: (1, 16), SampleFormat.S24: (1, 24),
    SampleFormat.S32: (1, 32), SampleFormat.F32: (3, 32), SampleFormat.F64: (3, 64),
}


def make_wav(path: Path, fmt: SampleFormat, channels: int = 1, rate: int = 16000, frames: int = 1001,
             extensible: bool = False, seed: int = 0) -> np.ndarray:
    """Write a WAV with our own header; return the float32 samples a reader must give back."""
    tag, bits = FORMATS[fmt]
    data, expected = encode(fmt, (frames, channels), seed)
    path.write_bytes(riff(fmt_chunk(tag, channels, rate, bits, extensible=extensible), chunk(b"data", data)))
    return expected


# -- every format round-trips -----------------------------------------------------------


@pytest.mark.parametrize("extensible", [False, True], ids=["plain", "extensible"])
@pytest.mark.parametrize("channels", [1, 2, 6])
@pytest.mark.parametrize("fmt", list(FORMATS), ids=lambda f: f.name)
def test_every_format_round_trips(tmp_path: Path, fmt: SampleFormat, channels: int, extensible: bool) -> None:
    path = tmp_path / "x.wav"
    expected = make_wav(path, fmt, channels, rate=22050, frames=1001, extensible=extensible)
    samples, rate = read_wav(path)
    assert rate == 22050
    assert samples.dtype == np.float32 and samples.shape == (1001, channels)
    np.testing.assert_array_equal(samples, expected)
    assert samples.min() >= -1.0 and samples.max() <= 1.0
    with WavReader(path) as wav:
        assert wav.info.format is fmt and wav.info.channels == channels and not wav.info.truncated


def test_integer_edges_map_to_minus_one_and_below_one(tmp_path: Path) -> None:
    for fmt in (SampleFormat.U8, SampleFormat.S16, SampleFormat.S24, SampleFormat.S32):
        path = tmp_path / f"{fmt.name}.wav"
        make_wav(path, fmt, frames=8)
        samples, _ = read_wav(path)
        assert samples[0, 0] == -1.0, fmt  # the most negative code is exactly -1
        assert 0.99 < samples[1, 0] <= 1.0, fmt  # float32 rounds (2**31 - 1) / 2**31 up to 1.0


def test_float_overs_and_nan_are_clipped(tmp_path: Path) -> None:
    data = np.array([1.5, -2.0, np.nan, 0.25, np.inf], "<f4").tobytes()
    path = tmp_path / "f.wav"
    path.write_bytes(riff(fmt_chunk(3, 1, 16000, 32), chunk(b"data", data)))
    samples, _ = read_wav(path)
    np.testing.assert_array_equal(samples[:, 0], [1.0, -1.0, 0.0, 0.25, 1.0])


# -- chunk walking ------------------------------------------------------------------------


def test_unknown_and_odd_sized_chunks_are_skipped_with_padding(tmp_path: Path) -> None:
    data = bytes([128, 255, 0, 128, 192])  # five 8-bit frames: an odd data chunk, padded
    path = tmp_path / "odd.wav"
    path.write_bytes(riff(chunk(b"LIST", b"abc"), fmt_chunk(1, 1, 8000, 8), chunk(b"junk", b"x"),
                          chunk(b"data", data), chunk(b"id3 ", b"trailing")))
    samples, rate = read_wav(path)
    assert rate == 8000
    np.testing.assert_array_equal(samples[:, 0], (np.array([128, 255, 0, 128, 192]) - 128) / 128)


def test_data_before_fmt_is_found(tmp_path: Path) -> None:
    data, expected = encode(SampleFormat.S16, (50, 2))
    path = tmp_path / "late_fmt.wav"
    path.write_bytes(riff(chunk(b"data", data), fmt_chunk(1, 2, 16000, 16)))
    samples, _ = read_wav(path)
    np.testing.assert_array_equal(samples, expected)


def test_rf64_takes_the_data_size_from_ds64(tmp_path: Path) -> None:
    data, expected = encode(SampleFormat.S16, (300, 1))
    ds64 = chunk(b"ds64", struct.pack("<QQQI", 0, len(data), 300, 0))
    path = tmp_path / "rf64.wav"
    path.write_bytes(riff(ds64, fmt_chunk(1, 1, 16000, 16), chunk(b"data", data, declared=0xFFFFFFFF),
                          magic=b"RF64"))
    samples, _ = read_wav(path)
    np.testing.assert_array_equal(samples, expected)


def test_truncated_recording_reads_what_is_there(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data, expected = encode(SampleFormat.S16, (500, 2))
    path = tmp_path / "cut.wav"
    path.write_bytes(riff(fmt_chunk(1, 2, 16000, 16), chunk(b"data", data, declared=10 * len(data)))
                     + b"\x01")  # plus half a sample: a partial frame is dropped
    with caplog.at_level("WARNING", logger="voiced.audio.wav"):
        with WavReader(path) as wav:
            assert wav.info.truncated and wav.info.frames == 500
            samples = wav.read()
    np.testing.assert_array_equal(samples, expected)
    assert any(str(path) in r.getMessage() and "declares" in r.getMessage() for r in caplog.records)


def test_a_data_chunk_whose_size_was_never_written_is_read_to_the_end(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A recorder stopped before it wrote the size leaves 0 in the data chunk: 1.2 s of speech read
    as nothing, without a word. A truly empty data chunk (another chunk follows it) stays empty."""
    data, expected = encode(SampleFormat.S16, (19200, 1))
    path = tmp_path / "unsized.wav"
    path.write_bytes(riff(fmt_chunk(1, 1, 16000, 16), chunk(b"data", data, declared=0)))
    with caplog.at_level("WARNING", logger="voiced.audio.wav"):
        samples, _ = read_wav(path)
    np.testing.assert_array_equal(samples, expected)
    assert any("declares 0 bytes but 38400 follow it" in r.getMessage() for r in caplog.records)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(riff(fmt_chunk(1, 1, 16000, 16), chunk(b"data", b""), chunk(b"LIST", b"INFOtext")))
    assert read_wav(empty)[0].shape == (0, 1)


def test_streaming_blocks_equal_whole_read(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    expected = make_wav(path, SampleFormat.S24, channels=2, frames=10_007)
    with WavReader(path) as wav:
        blocks = list(wav.blocks(1000))
        assert wav.remaining == 0
    assert [len(b) for b in blocks] == [1000] * 10 + [7]
    np.testing.assert_array_equal(np.concatenate(blocks), expected)


# -- malformed files ------------------------------------------------------------------------

_S16 = chunk(b"data", b"\0\0" * 10)
MALFORMED = {
    "empty": (b"", "too short"),
    "truncated_header": (riff(fmt_chunk(1, 1, 16000, 16), _S16)[:10], "too short"),
    "wrong_magic": (b"JUNK" + riff(fmt_chunk(1, 1, 16000, 16), _S16)[4:], "not a RIFF/WAVE"),
    "not_wave": (riff(fmt_chunk(1, 1, 16000, 16), _S16, form=b"AVI "), "not a RIFF/WAVE"),
    "big_endian_rifx": (riff(fmt_chunk(1, 1, 16000, 16), _S16, magic=b"RIFX"), "RIFX"),
    "missing_data": (riff(fmt_chunk(1, 1, 16000, 16), chunk(b"LIST", b"info")), "no data chunk"),
    "missing_fmt": (riff(chunk(b"LIST", b"info"), _S16), "no fmt chunk"),
    "unsupported_codec": (riff(fmt_chunk(2, 1, 16000, 4, block_align=256), _S16), "0x0002 (MS ADPCM)"),
    "mp3": (riff(fmt_chunk(0x55, 1, 16000, 0, block_align=1), _S16), "MP3"),
    "extensible_unknown_guid": (riff(fmt_chunk(1, 2, 16000, 16, extensible=True, guid=b"\x01" * 16), _S16),
                                "sub-format"),
    "zero_channels": (riff(fmt_chunk(1, 0, 16000, 16, block_align=2), _S16), "zero channels"),
    "zero_rate": (riff(fmt_chunk(1, 1, 0, 16), _S16), "rate is zero"),
    "bad_block_align": (riff(fmt_chunk(1, 2, 16000, 16, block_align=3), _S16), "block align"),
    "twelve_bit_pcm": (riff(fmt_chunk(1, 1, 16000, 12, block_align=2), _S16), "12-bit PCM"),
    "short_fmt": (riff(chunk(b"fmt ", b"\x01\x00\x01\x00"), _S16), "fmt chunk"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_files_raise_audio_error_naming_the_file(tmp_path: Path, case: str) -> None:
    content, problem = MALFORMED[case]
    path = tmp_path / f"{case}.wav"
    path.write_bytes(content)
    with pytest.raises(AudioError) as err:
        read_wav(path)
    assert str(path) in str(err.value) and problem in str(err.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.wav"
    with pytest.raises(AudioError, match="nowhere.wav"):
        read_wav(path)


# -- write_wav ------------------------------------------------------------------------------


def test_write_wav_int16_is_exact_and_readable_by_the_wave_module(tmp_path: Path) -> None:
    pcm = np.random.default_rng(1).integers(-32768, 32768, size=(4000, 2)).astype(np.int16)
    path = tmp_path / "w.wav"
    write_wav(path, pcm, 44100)
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (2, 2, 44100, 4000)
        assert np.array_equal(np.frombuffer(w.readframes(4000), "<i2").reshape(-1, 2), pcm)
    samples, rate = read_wav(path)
    assert rate == 44100
    np.testing.assert_array_equal(samples, pcm / 32768)


def test_write_wav_float_is_scaled_and_clipped(tmp_path: Path) -> None:
    path = tmp_path / "f.wav"
    write_wav(path, np.array([0.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0], np.float32), 16000)
    with wave.open(str(path)) as w:
        got = np.frombuffer(w.readframes(10), "<i2")
    np.testing.assert_array_equal(got, [0, 16384, -16384, 32767, -32767, 32767, -32767])


def test_write_wav_interleaved_1d_with_channels(tmp_path: Path) -> None:
    path = tmp_path / "i.wav"
    write_wav(path, np.arange(12, dtype=np.int16), 8000, channels=3)
    samples, _ = read_wav(path)
    np.testing.assert_array_equal(samples * 32768, np.arange(12).reshape(4, 3))
    with pytest.raises(ValueError):
        write_wav(path, np.arange(10, dtype=np.int16), 8000, channels=3)
    with pytest.raises(ValueError):
        write_wav(path, np.zeros((4, 2), np.int16), 8000, channels=3)
    with pytest.raises(ValueError):
        write_wav(path, np.zeros(4, np.int32), 8000)


# -- cross-checks with sox --------------------------------------------------------------------


def sox_info(path: Path, *flags: str) -> list[str]:
    """``sox --i`` answers one question per call."""
    return [subprocess.run([SOX, "--i", flag, str(path)], check=True, capture_output=True, text=True).stdout.strip()
            for flag in flags]


def sox_decode(path: Path, channels: int) -> np.ndarray:
    raw = subprocess.run([SOX, str(path), "-t", "raw", "-e", "floating-point", "-b", "32", "-"],
                         check=True, capture_output=True).stdout
    return np.frombuffer(raw, "<f4").reshape(-1, channels)


@needs_sox
def test_sox_written_24bit_extensible_matches_sox_decoding(tmp_path: Path) -> None:
    path = tmp_path / "sox24.wav"
    subprocess.run([SOX, "-n", "-r", "44100", "-c", "2", "-b", "24", "-e", "signed-integer", str(path),
                    "synth", "0.25", "sine", "440", "sine", "660"], check=True)
    assert path.read_bytes()[20:22] == b"\xfe\xff"  # sox writes WAVE_FORMAT_EXTENSIBLE (and a fact chunk)
    samples, rate = read_wav(path)
    assert rate == 44100 and samples.shape == (11025, 2)
    np.testing.assert_allclose(samples, sox_decode(path, 2), atol=1e-6)


@needs_sox
@pytest.mark.parametrize("fmt", [SampleFormat.U8, SampleFormat.S32, SampleFormat.F64], ids=lambda f: f.name)
def test_our_headers_decode_like_sox(tmp_path: Path, fmt: SampleFormat) -> None:
    path = tmp_path / "ours.wav"
    expected = make_wav(path, fmt, channels=2, rate=32000, frames=777, extensible=fmt is SampleFormat.S32)
    assert sox_info(path, "-r", "-c", "-s") == ["32000", "2", "777"]
    np.testing.assert_allclose(sox_decode(path, 2), expected, atol=1e-6)


@needs_sox
def test_write_wav_is_read_by_sox(tmp_path: Path) -> None:
    path = tmp_path / "w.wav"
    pcm = (np.sin(np.arange(8000) * 0.05) * 20000).astype(np.int16)
    write_wav(path, pcm, 8000)
    assert sox_info(path, "-r", "-c", "-b", "-s") == ["8000", "1", "16", "8000"]
    np.testing.assert_allclose(sox_decode(path, 1)[:, 0], pcm / 32768, atol=1e-7)


# -- real speech ----------------------------------------------------------------------------


def test_jfk_reads_to_its_length(speech: Path) -> None:
    path = speech / "jfk" / "jfk.wav"
    with wave.open(str(path)) as w:
        frames, reference = w.getnframes(), np.frombuffer(w.readframes(w.getnframes()), "<i2")
    samples, rate = read_wav(path)
    assert rate == 16000 and samples.shape == (frames, 1)
    assert 10.5 < frames / rate < 11.5  # "ask not what your country can do for you…", 11 s
    np.testing.assert_array_equal(samples[:, 0], reference / 32768)


def test_every_shared_speech_file_matches_the_wave_module(speech: Path) -> None:
    paths = sorted((speech / "misc_en").glob("*.wav")) + sorted((speech / "hifitts_6097_5min").rglob("*.wav"))[:5]
    assert paths
    for path in paths:
        with wave.open(str(path)) as w:
            reference = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, w.getnchannels())
            rate = w.getframerate()
        samples, got_rate = read_wav(path)
        assert got_rate == rate, path
        np.testing.assert_array_equal(samples, reference / 32768, err_msg=str(path))


# -- WavSource --------------------------------------------------------------------------------


def test_wav_source_at_16k_passes_samples_through(tmp_path: Path) -> None:
    path = tmp_path / "s.wav"
    expected = make_wav(path, SampleFormat.S16, frames=16_123)
    with WavSource(path) as source:
        chunks = list(source.chunks())
        assert source.describe() == f"file:{path} @16000 Hz"
    assert [len(c) for c in chunks[:-1]] == [1600] * 10 and len(chunks[-1]) == 123
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    np.testing.assert_array_equal(np.concatenate(chunks), expected[:, 0])
    assert source.stats.samples_out == source.stats.samples_read == 16_123


@pytest.mark.parametrize("channel", [0, 1, None])
def test_wav_source_resamples_44k_stereo_and_picks_or_mixes(tmp_path: Path, channel: int | None) -> None:
    rate, seconds = 44100, 2.0
    t = np.arange(int(rate * seconds)) / rate
    left, right = 0.5 * np.sin(2 * np.pi * 440 * t), 0.25 * np.sin(2 * np.pi * 1000 * t)
    path = tmp_path / "st.wav"
    write_wav(path, np.stack([left, right], axis=1), rate)
    source = WavSource(path, channel=channel, chunk_ms=37)
    with source:
        out = np.concatenate(list(source.chunks()))
    assert abs(len(out) - seconds * SAMPLE_RATE) <= 1
    spectrum = np.abs(np.fft.rfft(out * np.hanning(len(out))))
    freqs = np.fft.rfftfreq(len(out), 1 / SAMPLE_RATE)
    peaks = {440: spectrum[np.argmin(abs(freqs - 440))], 1000: spectrum[np.argmin(abs(freqs - 1000))]}
    if channel == 0:
        assert abs(freqs[np.argmax(spectrum)] - 440) < 1 and peaks[1000] < peaks[440] / 100
    elif channel == 1:
        assert abs(freqs[np.argmax(spectrum)] - 1000) < 1 and peaks[440] < peaks[1000] / 100
    else:  # the mean keeps both, at half their amplitude
        assert 1.7 < peaks[440] / peaks[1000] < 2.3
        assert 0.2 < np.max(np.abs(out)) <= 0.38
    assert source.describe().endswith("→16 kHz")
    assert ("mix" in source.describe()) == (channel is None)


def test_wav_source_channel_out_of_range_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "m.wav"
    make_wav(path, SampleFormat.S16, channels=2)
    with pytest.raises(ConfigError, match="audio.channel"):
        WavSource(path, channel=2).open()


def test_wav_source_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(AudioError, match="gone.wav"):
        WavSource(tmp_path / "gone.wav").open()


def test_wav_source_realtime_paces_chunks(tmp_path: Path) -> None:
    path = tmp_path / "rt.wav"
    make_wav(path, SampleFormat.S16, rate=8000, frames=4000)  # 0.5 s
    arrivals = []
    start = time.monotonic()
    with WavSource(path, realtime=True, chunk_ms=50) as source:
        for _ in source.chunks():
            arrivals.append(time.monotonic())
    assert source.stats.samples_out == 8000
    assert arrivals == sorted(arrivals)
    assert arrivals[-1] - start >= 0.8 * 0.5  # a lower bound only: never faster than real time


def test_wav_source_stop_ends_the_stream_early(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    make_wav(path, SampleFormat.S16, frames=16000 * 20)  # 20 s, paced
    source = WavSource(path, realtime=True)
    threading.Timer(0.2, source.stop).start()
    with source:
        got = sum(len(c) for c in source.chunks())
    assert got < 16000 * 20


def test_wav_source_reads_jfk_to_its_length(speech: Path) -> None:
    path = speech / "jfk" / "jfk.wav"
    with wave.open(str(path)) as w:
        frames = w.getnframes()
    with WavSource(path) as source:
        assert sum(len(c) for c in source.chunks()) == frames
