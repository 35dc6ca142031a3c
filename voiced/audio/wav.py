"""WAV files in any PCM or float layout: a small RIFF reader that streams, and a 16-bit writer.

Python's ``wave`` module only knows integer PCM, so voiced parses RIFF itself: it reads
8-bit unsigned, 16/24/32-bit signed and 32/64-bit float samples, plain or
``WAVE_FORMAT_EXTENSIBLE``, skips chunks it does not know, and reads what is there
when a recording was cut short. Samples come out as float32 in [-1, 1], shaped
(frames, channels).
"""

from __future__ import annotations

import io
import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO

import numpy as np

from voiced.errors import AudioError

__all__ = ["SampleFormat", "WavInfo", "WavReader", "encode_wav", "read_wav", "write_wav"]

logger = logging.getLogger(__name__)

_TAG_PCM = 0x0001
_TAG_FLOAT = 0x0003
_TAG_EXTENSIBLE = 0xFFFE
# Every KSDATAFORMAT_SUBTYPE_* GUID ends like this; its first two bytes are the format tag.
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
_KNOWN_TAGS = {0x0002: "MS ADPCM", 0x0006: "A-law", 0x0007: "mu-law", 0x0011: "IMA ADPCM",
               0x0031: "GSM 6.10", 0x0050: "MPEG", 0x0055: "MP3"}
_RF64_UNKNOWN = 0xFFFFFFFF  # RF64 puts the real sizes in the ds64 chunk


class SampleFormat(Enum):
    """How one sample is stored in the data chunk."""

    U8 = ("u1", 1)
    S16 = ("<i2", 2)
    S24 = ("s24", 3)
    S32 = ("<i4", 4)
    F32 = ("<f4", 4)
    F64 = ("<f8", 8)

    @property
    def width(self) -> int:
        """Bytes per sample."""
        return self.value[1]


_INT_FORMATS = {8: SampleFormat.U8, 16: SampleFormat.S16, 24: SampleFormat.S24, 32: SampleFormat.S32}
_FLOAT_FORMATS = {32: SampleFormat.F32, 64: SampleFormat.F64}


@dataclass(frozen=True)
class WavInfo:
    """What the header of a WAV file says, checked against the file's real size."""

    path: str
    """The file, as given."""
    rate: int
    """Frames per second."""
    channels: int
    """Interleaved channels per frame."""
    format: SampleFormat
    """Storage of each sample."""
    frames: int
    """Whole frames actually present in the data chunk."""
    data_offset: int
    """Byte offset of the first sample."""
    truncated: bool
    """The data chunk claims more bytes than the file holds."""

    @property
    def block_align(self) -> int:
        """Bytes per frame."""
        return self.channels * self.format.width

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.frames / self.rate


class WavReader:
    """An open WAV file that yields its samples block by block.

    >>> with WavReader("speech.wav") as wav:
    ...     for block in wav.blocks(1600):
    ...         ...  # float32, shape (<=1600, wav.info.channels)
    """

    def __init__(self, path: str | os.PathLike[str], data: bytes | None = None) -> None:
        """``data``: the file's bytes, already in memory (an MQTT payload); ``path`` then only names it."""
        self.path = str(path)
        try:
            self._file: BinaryIO = open(path, "rb") if data is None else io.BytesIO(data)  # noqa: SIM115
        except OSError as e:
            raise AudioError(f"{self.path}: cannot open: {e.strerror or e}") from e
        try:
            self.info = _parse_header(self._file, self.path)
        except BaseException:
            self._file.close()
            raise
        self._file.seek(self.info.data_offset)
        self._position = 0  # frames already returned

    @property
    def remaining(self) -> int:
        """Frames not read yet."""
        return self.info.frames - self._position

    def blocks(self, frames: int) -> Iterator[np.ndarray]:
        """Yield float32 blocks of ``frames`` frames (the last one shorter) from the current position."""
        if frames < 1:
            raise ValueError(f"frames must be at least 1, got {frames}")
        while self._position < self.info.frames:
            yield self.read(frames)

    def read(self, frames: int = -1) -> np.ndarray:
        """Read up to ``frames`` frames (all that are left when negative) as float32 (n, channels)."""
        info = self.info
        left = info.frames - self._position
        n = left if frames < 0 else min(frames, left)
        raw = self._file.read(n * info.block_align)
        n = len(raw) // info.block_align  # the file may shrink while open
        self._position += n
        return _decode(raw[: n * info.block_align], info.format).reshape(n, info.channels)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> WavReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_wav(path: str | os.PathLike[str], data: bytes | None = None) -> tuple[np.ndarray, int]:
    """Read a whole WAV file (or its ``data``, named ``path``): float32 samples in [-1, 1] shaped
    (frames, channels), and the rate."""
    with WavReader(path, data) as wav:
        return wav.read(), wav.info.rate


def write_wav(path: str | os.PathLike[str], samples: np.ndarray, rate: int, channels: int | None = None) -> None:
    """Write 16-bit PCM (see :func:`encode_wav`)."""
    Path(path).write_bytes(encode_wav(samples, rate, channels))


def encode_wav(samples: np.ndarray, rate: int, channels: int | None = None) -> bytes:
    """A 16-bit PCM WAV file, in memory.

    ``samples`` is int16, or float in [-1, 1] (clipped), shaped (frames, channels) or 1-D:
    mono, or interleaved when ``channels`` > 1.
    """
    data = np.asarray(samples)
    if data.ndim == 2:
        if channels is not None and channels != data.shape[1]:
            raise ValueError(f"samples have {data.shape[1]} channels, channels={channels}")
        channels = data.shape[1]
    elif data.ndim == 1:
        channels = channels or 1
        if len(data) % channels:
            raise ValueError(f"{len(data)} interleaved samples are not a whole number of {channels}-channel frames")
    else:
        raise ValueError(f"samples must be 1-D or 2-D, got shape {data.shape}")
    if rate <= 0 or channels < 1:
        raise ValueError(f"need rate > 0 and channels >= 1, got {rate}, {channels}")
    if data.dtype == np.int16:
        pcm = data
    elif np.issubdtype(data.dtype, np.floating):
        pcm = np.round(np.clip(data, -1.0, 1.0) * 32767.0).astype(np.int16)
    else:
        raise ValueError(f"samples must be int16 or float, got {data.dtype}")
    body = pcm.astype("<i2").tobytes()
    header = b"RIFF" + struct.pack("<I", 36 + len(body)) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, _TAG_PCM, channels, rate, rate * channels * 2, channels * 2, 16)
    header += b"data" + struct.pack("<I", len(body))
    return header + body


MIN_RATE, MAX_RATE = 1_000, 768_000
"""Sample rates a WAV may have (telephone 8 kHz … studio 768 kHz)."""
MAX_CHANNELS = 32
"""More channels than any microphone array: a header claiming 65,535 is corrupt."""


def _parse_header(f: BinaryIO, path: str) -> WavInfo:
    """Walk the RIFF chunks up to the samples; every problem names the file."""

    def fail(problem: str) -> AudioError:
        return AudioError(f"{path}: {problem}")

    file_size = f.seek(0, os.SEEK_END)  # a file or the bytes of one (BytesIO has no fileno)
    f.seek(0)
    head = f.read(12)
    if len(head) < 12:
        raise fail(f"too short for a WAV header ({file_size} bytes)")
    magic, _, wave_id = struct.unpack("<4sI4s", head)
    if magic == b"RIFX":
        raise fail("big-endian RIFX files are not supported")
    if magic not in (b"RIFF", b"RF64") or wave_id != b"WAVE":
        raise fail(f"not a RIFF/WAVE file (starts with {head[:4]!r}…{head[8:12]!r})")

    fmt: bytes | None = None
    data: tuple[int, int] | None = None  # offset, declared size
    ds64_data_size: int | None = None
    pos = 12
    while pos + 8 <= file_size and (fmt is None or data is None):
        f.seek(pos)
        chunk_id, size = struct.unpack("<4sI", f.read(8))
        body = pos + 8
        if chunk_id == b"data":
            if size == _RF64_UNKNOWN and ds64_data_size is not None:
                size = ds64_data_size
            data = (body, size)
        elif chunk_id == b"fmt ":
            fmt = f.read(min(size, 64))
            if len(fmt) < min(size, 16):
                raise fail("fmt chunk is cut short")
        elif chunk_id == b"ds64" and size >= 16:
            ds64_data_size = struct.unpack("<Q", f.read(16)[8:16])[0]
        pos = body + size + (size & 1)  # chunks are padded to an even length
    if fmt is None:
        raise fail("no fmt chunk")
    if data is None:
        raise fail("no data chunk")
    rate, channels, sample_format = _parse_fmt(fmt, fail)

    offset, declared = data
    block = channels * sample_format.width
    available = max(0, file_size - offset)
    if declared == 0 and available and not _chunk_follows(f, offset):
        # a recorder killed before it wrote the size (some write 0 at the start and fix it at the end)
        logger.warning("%s: data chunk declares 0 bytes but %d follow it; reading them", path, available)
        declared = available
    truncated = declared > available
    if truncated:
        logger.warning("%s: data chunk declares %d bytes but only %d are there; reading those",
                       path, declared, available)
    size = min(declared, available)
    if size % block:
        logger.warning("%s: data ends with a partial frame (%d stray bytes), ignored", path, size % block)
    return WavInfo(path=path, rate=rate, channels=channels, format=sample_format,
                   frames=size // block, data_offset=offset, truncated=truncated)


def _chunk_follows(f: BinaryIO, at: int) -> bool:
    """Whether another RIFF chunk header (a four-letter id such as LIST) starts at ``at``: then an
    empty data chunk is really empty, not audio whose size was never written."""
    f.seek(at)
    head = f.read(8)
    return len(head) == 8 and all(32 <= b < 127 for b in head[:4]) and head[:4].strip(b" ").isalnum()


def _parse_fmt(fmt: bytes, fail: Callable[[str], AudioError]) -> tuple[int, int, SampleFormat]:
    if len(fmt) < 16:
        raise fail(f"fmt chunk is {len(fmt)} bytes, need at least 16")
    tag, channels, rate, _, block_align, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _TAG_EXTENSIBLE:
        if len(fmt) < 40:
            raise fail("WAVE_FORMAT_EXTENSIBLE fmt chunk is shorter than 40 bytes")
        guid = fmt[24:40]
        if guid[2:] != _GUID_TAIL:
            raise fail(f"WAVE_FORMAT_EXTENSIBLE sub-format {guid.hex()} is not supported")
        tag = struct.unpack("<H", guid[:2])[0]
    if tag == _TAG_PCM:
        sample_format = _INT_FORMATS.get(bits)
    elif tag == _TAG_FLOAT:
        sample_format = _FLOAT_FORMATS.get(bits)
    else:
        name = _KNOWN_TAGS.get(tag, "unknown")
        raise fail(f"format tag 0x{tag:04x} ({name}) is not supported; need PCM or IEEE float")
    if sample_format is None:
        kind = "PCM" if tag == _TAG_PCM else "float"
        raise fail(f"{bits}-bit {kind} samples are not supported")
    if channels == 0:
        raise fail("zero channels")
    if channels > MAX_CHANNELS:
        raise fail(f"{channels} channels; at most {MAX_CHANNELS} are supported")
    if rate == 0:
        raise fail("sample rate is zero")
    if not MIN_RATE <= rate <= MAX_RATE:
        # a 1 Hz header would turn each byte into 16,000 output samples: refuse, don't resample
        raise fail(f"sample rate {rate} Hz is outside {MIN_RATE}..{MAX_RATE} Hz")
    if block_align != channels * sample_format.width:
        raise fail(f"block align {block_align} does not match {channels} channels of {bits}-bit samples")
    return rate, channels, sample_format


def _decode(raw: bytes, sample_format: SampleFormat) -> np.ndarray:
    """Little-endian samples to float32 in [-1, 1]."""
    if sample_format is SampleFormat.U8:
        return (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    if sample_format is SampleFormat.S16:
        return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    if sample_format is SampleFormat.S24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        value = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        value = np.where(value >= 1 << 23, value - (1 << 24), value)  # sign-extend
        return (value / float(1 << 23)).astype(np.float32)
    if sample_format is SampleFormat.S32:
        return (np.frombuffer(raw, "<i4") / float(1 << 31)).astype(np.float32)
    # Float files may hold overs and NaNs; the pipeline expects [-1, 1].
    samples = np.frombuffer(raw, sample_format.value[0]).astype(np.float32)
    return np.clip(np.nan_to_num(samples, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)
