"""kaldi-native-fbank's Whisper mel energies in numpy, the same float operations in the same order.

kaldi-native-fbank computes each 25 ms frame with whisper.cpp's recursive FFT: 400 = 16 x 25,
each 25-point leaf a plain DFT whose cos/sin it recomputes for every term (~250 us a frame on an
x86 VM, ~25 ms of CPU per second of audio). Here the frames are done together and the trig values
once, operation for operation as kaldi-native-fbank 1.22 does them (float32 arithmetic, the
DFT's products and sums in double rounded to float after each term, the twiddles rounded through
float), so the energies are the same bits: about 3x less CPU on the same machine.

Bit-equality rests on how the library was compiled (no fused multiply-add contracted into its
float loops, libm's cos/sin): ``matches_knf`` checks it once per process against the library
itself, and the caller keeps kaldi-native-fbank where they differ.
"""

from __future__ import annotations

import functools
import logging

import numpy as np

from voiced.audio.frames import SAMPLE_RATE

__all__ = ["FRAME", "HOP", "frame_count", "frame_energies", "library_energies", "library_fbank", "library_frames",
           "matches_knf", "ready_frames"]

log = logging.getLogger(__name__)

HOP = 160
"""Samples per frame step (10 ms)."""
FRAME = 400
"""Samples per frame (25 ms)."""
_TWO_PI = 6.283185307179586476925286766559005  # kaldi-native-fbank's M_2PI
_BINS = FRAME // 2 + 1
_BLOCK = 256
"""Frames computed together (each frame's energies depend on its own samples only)."""
_F32, _F64 = np.float32, np.float64


def frame_count(num_samples: int) -> int:
    """Frames of ``num_samples`` once the input has ended (kaldi, snip_edges false)."""
    return (num_samples + HOP // 2) // HOP


def ready_frames(num_samples: int) -> int:
    """Frames whose window lies in the first ``num_samples`` (final before the input ends)."""
    # frame m covers [m * HOP + HOP / 2 - FRAME / 2, + FRAME); its start is reflected at 0
    return max(0, (num_samples - (HOP // 2 + FRAME // 2)) // HOP + 1)


@functools.cache
def _window() -> np.ndarray:
    """The periodic Hann window, computed in double and stored as float."""
    return (0.5 - 0.5 * np.cos(_TWO_PI / FRAME * np.arange(FRAME, dtype=_F64))).astype(_F32)


@functools.cache
def _dft_trig(n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [term, k] of the leaf DFT's angles, each angle rounded to float first."""
    k = np.arange(n, dtype=_F64)[None, :]
    terms = np.arange(n, dtype=_F64)[:, None]
    angle = ((_TWO_PI / n) * k * terms).astype(_F32).astype(_F64)
    return np.cos(angle), np.sin(angle)


@functools.cache
def _twiddles(n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos(theta) and -sin(theta) as floats, theta = 2 pi k / n rounded to float."""
    theta = (_TWO_PI * np.arange(n // 2, dtype=_F64) / n).astype(_F32).astype(_F64)
    return np.cos(theta).astype(_F32), (-np.sin(theta)).astype(_F32)


def _dft(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Real and imaginary DFT of real ``rows`` [B, n]: each output summed term by term in double,
    rounded to float after each term."""
    b, n = rows.shape
    cos, sin = _dft_trig(n)
    re, im = np.zeros((b, n), _F64), np.zeros((b, n), _F64)
    rounded, product = np.empty((b, n), _F32), np.empty((b, n), _F64)
    x = rows.astype(_F64)
    for t in range(n):
        term = x[:, t:t + 1]
        np.multiply(term, cos[t], out=product)
        np.add(re, product, out=re)
        np.copyto(rounded, re, casting="same_kind")
        np.copyto(re, rounded)
        np.multiply(term, sin[t], out=product)
        np.subtract(im, product, out=im)
        np.copyto(rounded, im, casting="same_kind")
        np.copyto(im, rounded)
    return re.astype(_F32), im.astype(_F32)


def _fft(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """whisper.cpp's recursive FFT of real ``rows`` [B, n]: even and odd halves (all rows' at once), then
    the butterflies in float; odd lengths by ``_dft``."""
    b, n = rows.shape
    if n == 1:
        return rows.copy(), np.zeros_like(rows)
    if n % 2:
        return _dft(rows)
    half = n // 2
    re, im = _fft(np.concatenate([rows[:, 0::2], rows[:, 1::2]]))
    even_re, even_im, odd_re, odd_im = re[:b, :half], im[:b, :half], re[b:, :half], im[b:, :half]
    cos, minus_sin = _twiddles(n)
    out_re, out_im = np.empty((b, n), _F32), np.empty((b, n), _F32)
    out_re[:, :half] = (even_re + cos * odd_re) - minus_sin * odd_im
    out_im[:, :half] = (even_im + cos * odd_im) + minus_sin * odd_re
    out_re[:, half:] = (even_re - cos * odd_re) + minus_sin * odd_im
    out_im[:, half:] = (even_im - cos * odd_im) - minus_sin * odd_re
    return out_re, out_im


@functools.cache
def _mel_taps(n_mels: int) -> tuple[np.ndarray, np.ndarray]:
    """kaldi-native-fbank's Whisper mel filters as (power column [taps, n_mels], weight [taps, n_mels]):
    tap t of filter i is its t-th bin from its first non-zero one; past a filter's end, a column of
    zeros (weight 0 times 0 adds nothing to a float sum, even where the power is huge)."""
    import kaldi_native_fbank as knf

    mel = knf.MelBanksOptions()
    mel.num_bins, mel.low_freq, mel.is_librosa = n_mels, 0, True
    frame = knf.FrameExtractionOptions()
    frame.dither, frame.preemph_coeff, frame.remove_dc_offset = 0, 0, False
    frame.window_type, frame.round_to_power_of_two, frame.snip_edges = "hann", False, False
    matrix = knf.MelBanks(mel, frame, 1.0).get_matrix()  # [n_mels, bins]
    spans = [np.flatnonzero(row) for row in matrix]
    widths = [int(s[-1] - s[0] + 1) if len(s) else 0 for s in spans]
    taps = max(1, *widths)
    columns = np.full((taps, n_mels), _BINS)  # _BINS: the zero column after the power spectrum
    weights = np.zeros((taps, n_mels), _F32)
    for i, (row, span, width) in enumerate(zip(matrix, spans, widths)):
        if width:
            columns[:width, i] = np.arange(span[0], span[0] + width)
            weights[:width, i] = row[span[0]:span[0] + width]
    return columns, weights


def frame_energies(samples: np.ndarray, begin: int, end: int, n_mels: int) -> np.ndarray:
    """Mel energies [end - begin, n_mels] of frames ``begin``..``end`` of ``samples``, the whole signal
    so far (windows past either end are reflected, as kaldi does at the start and after the input ends)."""
    count = max(0, end - begin)
    if count == 0 or not len(samples):
        return np.zeros((0, n_mels), _F32)
    if count > _BLOCK:  # bounded temporaries (the leaf DFTs hold 16 rows of doubles per frame)
        return np.concatenate([frame_energies(samples, b, min(b + _BLOCK, end), n_mels)
                               for b in range(begin, end, _BLOCK)])
    length = len(samples)
    index = (np.arange(begin, end) * HOP + HOP // 2 - FRAME // 2)[:, None] + np.arange(FRAME)
    while True:  # reflect, again and again for pathological short signals, as kaldi does
        low, high = index < 0, index >= length
        if not (low.any() or high.any()):
            break
        index = np.where(low, -index - 1, np.where(high, 2 * length - 1 - index, index))
    frames = np.asarray(samples, _F32)[index] * _window()
    re, im = _fft(frames)
    power = re[:, :_BINS] * re[:, :_BINS] + im[:, :_BINS] * im[:, :_BINS]
    columns, weights = _mel_taps(n_mels)
    padded = np.concatenate([power, np.zeros((count, 1), _F32)], axis=1)
    energies = np.zeros((count, n_mels), _F32)
    for column, weight in zip(columns, weights):  # term by term, in kaldi's order
        energies = energies + weight * padded[:, column]
    return energies


def library_fbank(n_mels: int):
    """kaldi-native-fbank's online Whisper fbank (what sherpa-onnx runs)."""
    import kaldi_native_fbank as knf

    options = knf.WhisperFeatureOptions()
    options.dim = n_mels
    return knf.OnlineWhisperFbank(options)


def library_frames(fbank, begin: int, n_mels: int) -> np.ndarray:
    """The mel energies [frames, n_mels] of ``fbank``'s ready frames from ``begin``."""
    ready = fbank.num_frames_ready
    if ready <= begin:
        return np.zeros((0, n_mels), _F32)
    return np.array([fbank.get_frame(i) for i in range(begin, ready)], _F32)


def library_energies(samples: np.ndarray, n_mels: int) -> np.ndarray:
    """kaldi-native-fbank's mel energies [frames, n_mels] of ``samples`` in one pass."""
    fbank = library_fbank(n_mels)
    fbank.accept_waveform(SAMPLE_RATE, np.ascontiguousarray(samples, _F32))
    fbank.input_finished()
    return library_frames(fbank, 0, n_mels)


@functools.cache
def matches_knf(n_mels: int) -> bool:
    """Whether ``frame_energies`` gives kaldi-native-fbank's bits on this machine (checked once on
    1 s of seeded noise and tones, and on signals shorter than a frame)."""
    rng = np.random.default_rng(0)
    t = np.arange(16000) / 16000
    probe = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 3150 * t)
             + 0.05 * rng.standard_normal(16000)).astype(_F32)
    for signal in (probe, probe[:1000], probe[:170]):
        if not np.array_equal(library_energies(signal, n_mels),
                              frame_energies(signal, 0, frame_count(len(signal)), n_mels)):
            log.debug("numpy's Whisper fbank differs from kaldi-native-fbank's here: using kaldi-native-fbank")
            return False
    return True
