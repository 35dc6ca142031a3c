"""VAD and endpointing: energy gate, Silero v5 wrapper, gate → Silero, endpointer events.

State-machine details are pinned with a scripted detector and random audio (exact
sample positions); behaviour on real speech uses the real Silero model and recordings
from ../shared and skips cleanly without them.
"""

from __future__ import annotations

import csv
import itertools
import wave
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from voiced.audio.frames import FRAME_SAMPLES, SAMPLE_RATE, Window, Windower
from voiced.errors import ConfigError, ModelError
from voiced.vad import (
    CHUNK_SAMPLES,
    EndpointConfig,
    Endpointer,
    EndReason,
    EnergyGate,
    EnergyGateConfig,
    GatedDetector,
    SileroDetector,
    SileroVad,
    SpeechDetector,
    VadEvent,
    VadEventKind,
    VadKind,
    build_endpointer,
    create_detector,
    frame_levels_db,
)

START, AUDIO, END = VadEventKind.SPEECH_START, VadEventKind.AUDIO, VadEventKind.SPEECH_END


# -- helpers -------------------------------------------------------------------------------


def read_wav(path: Path) -> np.ndarray:
    """16-bit mono 16 kHz WAV → float32 in [-1, 1] (stdlib only: no dependency on voiced.audio.wav)."""
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, SAMPLE_RATE), path
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SAMPLE_RATE), dtype=np.float32)


def white_noise(seconds: float, dbfs: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(seconds * SAMPLE_RATE)) * 10 ** (dbfs / 20)).astype(np.float32)


def run(endpointer: Endpointer, samples: np.ndarray, window_frames: int = 10) -> list[VadEvent]:
    events: list[VadEvent] = []
    for window in Windower(window_frames).windows([samples]):
        events.extend(endpointer.process(window))
    events.extend(endpointer.flush())
    return events


@dataclass(frozen=True)
class Utterance:
    start: float  # START.time
    end: float  # END.time
    audio_start: float
    audio: np.ndarray
    reason: EndReason

    @property
    def audio_end(self) -> float:
        return self.audio_start + len(self.audio) / SAMPLE_RATE


def utterances(events: list[VadEvent], stream: np.ndarray, stream_start: float = 0.0) -> list[Utterance]:
    """Group events into utterances, checking every invariant of the event protocol on the way."""
    out: list[Utterance] = []
    open_: list[VadEvent] = []
    previous_end = stream_start
    for ev in events:
        assert ev.audio.dtype == np.float32
        if ev.kind is START:
            assert not open_, "SPEECH_START inside an open utterance"
            assert ev.reason is None
            assert ev.audio_start >= previous_end - 1e-9, "pre-roll overlaps the previous utterance"
            assert ev.audio_start <= ev.time < ev.audio_end
            open_ = [ev]
            continue
        assert open_, f"{ev.kind} outside an utterance"
        expected = open_[-1].audio_end
        assert abs(ev.audio_start - expected) < 1e-9, "audio is not contiguous"
        if ev.kind is AUDIO:
            assert len(ev.audio) > 0 and ev.reason is None and ev.time == ev.audio_start
            open_.append(ev)
            continue
        assert ev.kind is END and ev.reason is not None
        start = open_[0]
        audio = np.concatenate([e.audio for e in open_] + [ev.audio])
        a = round((start.audio_start - stream_start) * SAMPLE_RATE)
        np.testing.assert_array_equal(audio, stream[a : a + len(audio)])  # exact, pre-roll included
        u = Utterance(start.time, ev.time, start.audio_start, audio, ev.reason)
        assert u.audio_start <= u.start < u.end <= u.audio_end + 1e-9
        out.append(u)
        previous_end = u.audio_end
        open_ = []
    assert not open_, "utterance left open after flush"
    return out


class ScriptedDetector:
    """Plays back given frame probabilities, window by window."""

    def __init__(self, probs: Iterable[float]) -> None:
        self.probs = np.asarray(list(probs), dtype=np.float32)
        self.pos = 0
        self.resets = 0

    def frame_probabilities(self, window: Window) -> np.ndarray:
        n = -(-len(window.samples) // FRAME_SAMPLES)
        out = self.probs[self.pos : self.pos + n]
        self.pos += n
        return out

    def reset(self) -> None:
        self.resets += 1


def scripted(pattern: list[tuple[float, int]], config: EndpointConfig | None = None, seed: int = 1):
    """(probability, frames) runs → (endpointer, random audio of the same length)."""
    probs = [p for p, n in pattern for _ in range(n)]
    audio = np.random.default_rng(seed).uniform(-0.5, 0.5, len(probs) * FRAME_SAMPLES).astype(np.float32)
    return Endpointer(config or EndpointConfig(), ScriptedDetector(probs)), audio


def level_extent(x: np.ndarray, below_peak_db: float = 35.0) -> tuple[float, float]:
    """First and last moment of frames within ``below_peak_db`` of the loudest frame."""
    levels = frame_levels_db(x)
    idx = np.flatnonzero(levels >= levels.max() - below_peak_db)
    return idx[0] * FRAME_SAMPLES / SAMPLE_RATE, min((idx[-1] + 1) * FRAME_SAMPLES, len(x)) / SAMPLE_RATE


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def silero_path(models: Path) -> Path:
    return models / "silero_vad_v5" / "silero_vad.onnx"


@pytest.fixture(scope="module")
def silero(silero_path: Path) -> SileroVad:
    return SileroVad.load(silero_path)


def gated(model: SileroVad, gate: EnergyGateConfig | None = None) -> GatedDetector:
    return GatedDetector(EnergyGate(gate), model.create_detector())


@pytest.fixture(scope="module")
def hifitts(speech: Path) -> list[tuple[str, np.ndarray]]:
    root = speech / "hifitts_6097_5min"
    with open(root / "transcripts.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [(r["file"], read_wav(root / r["file"])) for r in rows]


def hifitts_stream(
    utts: list[tuple[str, np.ndarray]], gap_s: float = 1.5
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """All utterances in one stream with ``gap_s`` of digital silence around each; their intervals."""
    parts, refs, pos = [], [], 0
    gap = silence(gap_s)
    for _, x in utts:
        parts += [gap, x]
        pos += len(gap)
        refs.append((pos / SAMPLE_RATE, (pos + len(x)) / SAMPLE_RATE))
        pos += len(x)
    parts.append(gap)
    return np.concatenate(parts), refs


# -- scripted state machine: exact positions -----------------------------------------------


def test_event_audio_is_the_exact_stream_with_pre_roll():
    ep, x = scripted([(0.0, 100), (0.9, 50), (0.0, 100)])
    events = run(ep, x)
    assert [e.kind for e in events][:1] == [START] and events[-1].kind is END
    (u,) = utterances(events, x)
    assert u.start == pytest.approx(1.0) and u.end == pytest.approx(1.5)
    assert u.audio_start == pytest.approx(0.7)  # 300 ms pre-roll
    assert u.audio_end == pytest.approx(2.2)  # 700 ms of trailing silence decided the end
    assert u.reason is EndReason.SILENCE
    start = events[0]
    # START is confirmed once 250 ms of speech were heard, at the end of frame 124.
    assert start.audio_end == pytest.approx(1.25)
    np.testing.assert_array_equal(u.audio, x[round(0.7 * SAMPLE_RATE) : round(2.2 * SAMPLE_RATE)])


def test_min_speech_boundary():
    ep, x = scripted([(0.0, 50), (0.9, 24), (0.0, 100)])
    assert run(ep, x) == []
    ep, x = scripted([(0.0, 50), (0.9, 25), (0.0, 100)])
    assert len(utterances(run(ep, x), x)) == 1


def test_hysteresis_between_offset_and_onset():
    # 0.4 lies between offset (0.35) and onset (0.5): it continues speech but never starts it.
    ep, x = scripted([(0.4, 100), (0.0, 100)])
    assert run(ep, x) == []
    ep, x = scripted([(0.0, 20), (0.6, 10), (0.4, 200), (0.2, 100)])
    (u,) = utterances(run(ep, x), x)
    assert u.start == pytest.approx(0.2) and u.end == pytest.approx(2.3)


def test_pauses_shorter_than_min_silence_do_not_split():
    ep, x = scripted([(0.0, 50), (0.9, 40), (0.0, 69), (0.9, 40), (0.0, 100)])
    (u,) = utterances(run(ep, x), x)
    assert u.start == pytest.approx(0.5) and u.end == pytest.approx(1.99)
    ep, x = scripted([(0.0, 50), (0.9, 40), (0.0, 70), (0.9, 40), (0.0, 100)])
    assert len(utterances(run(ep, x), x)) == 2


def test_pre_roll_is_clamped_to_stream_start_and_previous_utterance():
    ep, x = scripted([(0.0, 5), (0.9, 40), (0.0, 75), (0.9, 40), (0.0, 80)])
    first, second = utterances(run(ep, x), x)
    assert first.audio_start == 0.0 and first.start == pytest.approx(0.05)
    # The second onset is 50 ms after the first END: its pre-roll starts where that audio ended.
    assert second.start == pytest.approx(1.2)
    assert second.audio_start == pytest.approx(first.audio_end) == pytest.approx(1.15)


def test_max_utterance_splits_and_speech_goes_on():
    cfg = EndpointConfig(max_utterance_s=1.0)
    ep, x = scripted([(0.0, 50), (0.9, 230), (0.0, 100)], cfg)
    utts = utterances(run(ep, x), x)
    assert [u.reason for u in utts] == [EndReason.MAX_LENGTH, EndReason.MAX_LENGTH, EndReason.SILENCE]
    assert [round(u.start, 2) for u in utts] == [0.5, 1.5, 2.5]
    assert all(u.end - u.start <= 1.0 + 1e-9 for u in utts) and utts[2].end == pytest.approx(2.8)
    assert utts[1].audio_start == pytest.approx(utts[0].audio_end)  # nothing lost, nothing doubled
    joined = np.concatenate([u.audio for u in utts])
    np.testing.assert_array_equal(joined, x[round(0.2 * SAMPLE_RATE) : round(0.2 * SAMPLE_RATE) + len(joined)])


def test_max_utterance_in_a_pause_ends_at_the_last_speech():
    # Speech 0.5-1.3 s, then a pause: at 1.5 s the utterance is 1.0 s long and is cut there.
    ep, x = scripted([(0.0, 50), (0.9, 80), (0.0, 100)], EndpointConfig(max_utterance_s=1.0))
    (u,) = utterances(run(ep, x), x)
    assert u.reason is EndReason.MAX_LENGTH
    assert u.end == pytest.approx(1.3) and u.audio_end == pytest.approx(1.5)


def test_flush_closes_open_utterance_and_drops_candidate():
    ep, x = scripted([(0.0, 30), (0.9, 60)])
    events = run(ep, x)
    (u,) = utterances(events, x)
    assert u.reason is EndReason.END_OF_STREAM and u.end == pytest.approx(0.9)
    assert len(events[-1].audio) == 0
    assert ep.detector.resets == 1  # flush starts a new stream
    ep, x = scripted([(0.0, 30), (0.9, 20)])  # a candidate, not yet min_speech long
    assert run(ep, x) == []


@pytest.mark.parametrize("window_frames", [1, 3, 7, 10, 32])
def test_any_window_size_and_a_short_last_window(window_frames: int):
    ep, x = scripted([(0.0, 40), (0.9, 60), (0.0, 90), (0.9, 33)])
    x = x[:-77]  # the stream ends inside a frame: the last window is short
    utts = utterances(run(ep, x, window_frames), x)
    assert [t for u in utts for t in (u.start, u.end)] == pytest.approx([0.4, 1.0, 1.9, 2.23 - 77 / SAMPLE_RATE])
    assert utts[1].reason is EndReason.END_OF_STREAM and utts[1].audio_end == pytest.approx(len(x) / SAMPLE_RATE)


def test_stream_time_follows_the_first_window():
    ep, x = scripted([(0.0, 40), (0.9, 60), (0.0, 100)])
    offset = 12.5
    events = []
    for w in Windower(10).windows([x]):
        events += ep.process(Window(w.samples, w.start + offset, w.index))
    events += ep.flush()
    (u,) = utterances(events, x, stream_start=offset)
    assert u.start == pytest.approx(offset + 0.4) and u.audio_start == pytest.approx(offset + 0.1)


def test_windows_must_be_contiguous():
    ep = Endpointer(EndpointConfig(), ScriptedDetector([0.0] * 30))
    list(ep.process(Window(silence(0.1), 0.0, 0)))
    with pytest.raises(ValueError, match="contiguous"):
        list(ep.process(Window(silence(0.1), 0.2, 1)))


def test_process_does_its_work_even_if_events_are_not_read():
    ep, x = scripted([(0.0, 10), (0.9, 40), (0.0, 10)])
    for w in Windower(10).windows([x]):
        ep.process(w)  # ignored
    assert ep.in_speech


# -- energy gate ---------------------------------------------------------------------------


def test_frame_levels_db():
    t = np.arange(1600) / SAMPLE_RATE
    sine = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    levels = frame_levels_db(np.concatenate([np.ones(160, np.float32), sine, np.zeros(100, np.float32)]))
    assert len(levels) == 12  # the short last frame counts
    assert levels[0] == pytest.approx(0.0, abs=1e-4)
    assert levels[1:11] == pytest.approx(np.full(10, -3.0103), abs=0.01)
    assert levels[11] == -120.0


def test_energy_vad_ignores_silence_low_noise_and_a_click():
    click = silence(3.0)
    click[16000:16800] = 0.5  # 50 ms at -6 dBFS: five loud frames
    for x in (silence(3.0), white_noise(3.0, -60), click):
        assert run(Endpointer(EndpointConfig(), EnergyGate()), x) == []


def test_adaptive_noise_floor_learns_steady_noise():
    noise = white_noise(6.0, -40, seed=3)
    burst = np.zeros_like(noise)
    burst[3 * SAMPLE_RATE : 4 * SAMPLE_RATE] = white_noise(1.0, -20, seed=4)  # 20 dB above the noise
    x = noise + burst
    fixed = utterances(run(Endpointer(EndpointConfig(), EnergyGate()), x), x)
    assert fixed and fixed[0].start == 0.0  # the noise itself is "speech" to a fixed -50 dB gate
    gate = EnergyGate(EnergyGateConfig(adaptive=True))
    (u,) = utterances(run(Endpointer(EndpointConfig(), gate), x), x)
    assert u.start == pytest.approx(3.0) and u.end == pytest.approx(4.0)


# -- configuration and construction --------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kwargs", "key"),
    [
        (EndpointConfig, {"onset_threshold": 0.0}, "onset_threshold"),
        (EndpointConfig, {"offset_threshold": 0.6}, "offset_threshold"),
        (EndpointConfig, {"pre_roll_ms": -10}, "pre_roll_ms"),
        (EndpointConfig, {"min_silence_ms": 0}, "min_silence_ms"),
        (EndpointConfig, {"max_utterance_s": 0.1}, "max_utterance_s"),
        (EnergyGateConfig, {"threshold_db": 3.0}, "threshold_db"),
        (EnergyGateConfig, {"noise_window_s": float("nan")}, "noise_window_s"),
        (EnergyGateConfig, {"hangover_ms": -1}, "hangover_ms"),
    ],
)
def test_bad_config_names_the_key(cls, kwargs, key):
    with pytest.raises(ConfigError) as info:
        cls(**kwargs)
    assert info.value.key == key and key in str(info.value)


def test_config_from_dict():
    cfg = EndpointConfig.from_dict({"min_silence_ms": 500, "max_utterance_s": 10})
    assert cfg.min_silence_ms == 500 and cfg.max_utterance_s == 10.0
    with pytest.raises(ConfigError, match=r"vad\.endpoint\.min_silence in /etc/voiced/voiced\.toml: unknown key"):
        EndpointConfig.from_dict({"min_silence": 500}, "/etc/voiced/voiced.toml", "vad.endpoint")
    with pytest.raises(ConfigError, match=r"vad\.gate\.adaptive.*true or false"):
        EnergyGateConfig.from_dict({"adaptive": "yes"}, section="vad.gate")
    with pytest.raises(ConfigError, match=r"vad\.endpoint\.offset_threshold in f\.toml"):
        EndpointConfig.from_dict({"onset_threshold": 0.3}, "f.toml", "vad.endpoint")
    with pytest.raises(ConfigError, match=r"min_speech_ms.*whole number"):
        EndpointConfig.from_dict({"min_speech_ms": 12.5})


def test_vad_kind_values_and_builders():
    assert [k.value for k in VadKind] == ["none", "energy", "silero"]
    assert build_endpointer(VadKind("none")) is None
    ep = build_endpointer(VadKind.ENERGY)
    assert isinstance(ep, Endpointer) and isinstance(ep.detector, EnergyGate)
    assert isinstance(ep.detector, SpeechDetector)
    with pytest.raises(ConfigError, match="vad_model"):
        build_endpointer(VadKind.SILERO)
    with pytest.raises(ConfigError, match="vad_model"):
        create_detector(VadKind.SILERO)


# -- Silero model --------------------------------------------------------------------------


def reference_chunk_probs(path: Path, x: np.ndarray) -> np.ndarray:
    """The model run by hand: 512 new samples after the previous 64, state carried, sr = 16000."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(64, np.float32)
    out = []
    for i in range(0, len(x) - 511, 512):
        chunk = x[i : i + 512]
        prob, state = session.run(
            None, {"input": np.concatenate([context, chunk])[None], "state": state, "sr": np.array(16000, np.int64)}
        )
        out.append(float(prob[0, 0]))
        context = chunk[-64:]
    return np.array(out, np.float32)


@pytest.mark.parametrize("window_frames", [10, 7])
def test_silero_detector_equals_reference(silero: SileroVad, silero_path: Path, speech: Path, window_frames: int):
    x = read_wav(speech / "jfk" / "jfk.wav")
    chunk_probs = reference_chunk_probs(silero_path, x)
    det = silero.create_detector()
    got, expected, fed = [], [], 0
    for w in Windower(window_frames).windows([x]):
        probs = det.frame_probabilities(w)
        got.append(probs)
        end = round(w.end * SAMPLE_RATE)
        done = end // CHUNK_SAMPLES  # chunks complete once this window is in
        base = round(w.start * SAMPLE_RATE)
        for i in range(len(probs)):
            last_sample = min(base + (i + 1) * FRAME_SAMPLES, end) - 1
            j = min(last_sample // CHUNK_SAMPLES, done - 1)
            expected.append(chunk_probs[j] if j >= 0 else 0.0)
        fed = done
    assert det.chunks == fed == len(chunk_probs) == len(x) // CHUNK_SAMPLES
    np.testing.assert_allclose(np.concatenate(got), np.array(expected, np.float32), atol=1e-5)
    assert chunk_probs.max() > 0.99 and (chunk_probs > 0.5).mean() > 0.5  # it is speech, and the model says so


def test_open_gate_equals_plain_silero(silero: SileroVad, speech: Path):
    x = np.concatenate([silence(1.0), read_wav(speech / "jfk" / "jfk.wav")[: 4 * SAMPLE_RATE], silence(1.0)])
    plain = silero.create_detector()
    det = gated(silero, EnergyGateConfig(threshold_db=-120.0))
    for w in Windower(10).windows([x]):
        np.testing.assert_array_equal(det.frame_probabilities(w), plain.frame_probabilities(w))
    assert det.stats.skipped == 0 and det.stats.windows == 60


def test_gate_skips_silence_and_warms_silero_up(silero: SileroVad):
    det = gated(silero)
    for w in Windower(10).windows([silence(2.0)]):
        assert not det.frame_probabilities(w).any()
    assert det.stats.skipped == det.stats.windows == 20 and det.silero.chunks == 0
    # When the gate opens, two warm-up chunks of the quiet come first, on the stream's 512 grid.
    det.frame_probabilities(Window(white_noise(0.1, -20), 2.0, 20))
    assert det.silero.chunks == (2 * CHUNK_SAMPLES + 32000 % CHUNK_SAMPLES + 1600) // CHUNK_SAMPLES == 5
    assert det.stats.skipped == 20 and det.stats.windows == 21


def test_missing_model_file(tmp_path: Path):
    path = tmp_path / "nowhere" / "silero_vad.onnx"
    with pytest.raises(ModelError, match=str(path)):
        SileroVad.load(path)
    with pytest.raises(ModelError, match=str(path)):
        build_endpointer(VadKind.SILERO, path)


def _tiny_model(path: Path, inputs: list[tuple[str, str, list]], outputs: list[tuple[str, str, list]]) -> Path:
    """An ONNX graph whose outputs are Identity copies of its inputs (enough to have a signature)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Identity", [i[0]], [o[0]]) for i, o in zip(inputs, outputs, strict=True)]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info(n, getattr(TensorProto, t), s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, getattr(TensorProto, t), s) for n, t, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_non_silero_models_are_rejected(tmp_path: Path):
    F, I64 = "FLOAT", "INT64"  # noqa: N806 (TensorProto names)
    wrong_names = _tiny_model(tmp_path / "classifier.onnx", [("x", F, [1, 576])], [("y", F, [1, 576])])
    with pytest.raises(ModelError, match=r"classifier\.onnx: not a Silero VAD v5 model.*missing input 'input'"):
        SileroVad.load(wrong_names)
    wrong_type = _tiny_model(
        tmp_path / "float_sr.onnx",
        [("input", F, [1, 576]), ("state", F, [2, 1, 128]), ("sr", F, [])],
        [("output", F, [1, 576]), ("stateN", F, [2, 1, 128]), ("sr_out", F, [])],
    )
    with pytest.raises(ModelError, match=r"float_sr\.onnx: .*input 'sr' is tensor\(float\)"):
        SileroVad.load(wrong_type)
    # Right names and types, wrong behaviour: "output" is 576 values, not one probability.
    lookalike = _tiny_model(
        tmp_path / "lookalike.onnx",
        [("input", F, [1, 576]), ("state", F, [2, 1, 128]), ("sr", I64, [])],
        [("output", F, [1, 576]), ("stateN", F, [2, 1, 128]), ("sr_out", I64, [])],
    )
    with pytest.raises(ModelError, match=r"lookalike\.onnx"):
        SileroVad.load(lookalike)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model at all")
    with pytest.raises(ModelError, match=r"garbage\.onnx"):
        SileroVad.load(garbage)


def test_silero_v6_loads(models: Path):
    model = SileroVad.load(models / "silero_vad_v6" / "silero_vad.onnx")
    assert isinstance(model.create_detector(), SileroDetector)


# -- real speech through gate → Silero → endpointer ----------------------------------------


@pytest.mark.parametrize(
    ("noise_db", "min_skip"),
    [(None, 0.3), (-60.0, 0.3), (-45.0, 0.0)],
    ids=["clean", "noise-60dBFS", "noise-45dBFS-above-gate"],
)
def test_hifitts_stream_every_utterance_covered_once(silero, hifitts, noise_db, min_skip):
    x, refs = hifitts_stream(hifitts)
    if noise_db is not None:
        x = x + white_noise(len(x) / SAMPLE_RATE, noise_db, seed=7)
    det = gated(silero)
    utts = utterances(run(Endpointer(EndpointConfig(), det), x), x)
    spans = [(u.audio_start, u.audio_end) for u in utts]
    coverage, per_ref = [], []
    for a, b in refs:
        inside = sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)
        coverage.append(inside / (b - a))
        per_ref.append(sum(1 for s, e in spans if min(b, e) > max(a, s)))
    worst = int(np.argmin(coverage))
    over = sum(n > 1 for n in per_ref)
    merged = sum(1 for s, e in spans if sum(1 for a, b in refs if min(b, e) > max(a, s)) > 1)
    stray = sum(1 for s, e in spans if not any(min(b, e) > max(a, s) for a, b in refs))
    print(
        f"\n{len(utts)} segments for {len(refs)} utterances; worst coverage {coverage[worst]:.3f}"
        f" ({hifitts[worst][0]}); split {over}, merged {merged}, stray {stray}; skip ratio {det.stats.skip_ratio:.3f}"
    )
    assert min(coverage) >= 0.95
    assert over == merged == stray == 0 and len(utts) == len(refs)
    assert all(u.reason is EndReason.SILENCE for u in utts)
    assert det.stats.skip_ratio >= min_skip


def test_each_moonshine_word_is_one_utterance(silero, speech):
    clips = sorted((speech / "moonshine_alphanumeric").glob("*/*.wav"))
    assert len(clips) == 220
    bad = []
    for path in clips:
        word = read_wav(path)
        x = np.concatenate([silence(1.0), word, silence(1.0)])
        utts = utterances(run(Endpointer(EndpointConfig(), gated(silero)), x), x)
        a, b = level_extent(word)
        if len(utts) != 1 or not (utts[0].audio_start <= 1.0 + a + 0.02 and utts[0].audio_end >= 1.0 + b):
            bad.append((f"{path.parent.name}/{path.name}", [(u.start, u.end) for u in utts], (1 + a, 1 + b)))
    assert bad == []


@pytest.mark.parametrize(
    "clip",
    [
        "openwakeword_clips/alexa_test.wav",
        "openwakeword_clips/hey_mycroft_test.wav",
        "openwakeword_clips/hey_jane.wav",
        "hifitts",
    ],
)
def test_single_command_is_one_utterance(silero, speech, hifitts, clip):
    # The shortest hifitts utterance is 0.44 s.
    command = min((x for _, x in hifitts), key=len) if clip == "hifitts" else read_wav(speech / clip)
    pad = 1.0
    x = np.concatenate([white_noise(pad, -65), command, white_noise(1.5, -65, seed=1)])
    events = run(Endpointer(EndpointConfig(), gated(silero)), x)
    assert [e.kind for e in events if e.kind is not AUDIO] == [START, END]
    (u,) = utterances(events, x)
    a, b = level_extent(command)
    assert u.audio_start <= pad + a and u.start < pad + b  # START is before the speech, with its pre-roll
    assert u.end > pad + a and u.audio_end >= pad + b  # END after it
    assert u.reason is EndReason.SILENCE
    assert pad + a - 0.35 <= u.start and u.end <= pad + b + 0.3


@pytest.mark.parametrize("kind", ["zeros", "noise-60dBFS", "noise-40dBFS", "hum", "click"])
def test_no_speech_no_events(silero, kind):
    x = {
        "zeros": lambda: silence(4.0),
        "noise-60dBFS": lambda: white_noise(4.0, -60),
        "noise-40dBFS": lambda: white_noise(4.0, -40),  # above the gate: Silero itself says no
        "hum": lambda: (0.01 * np.sin(2 * np.pi * 50 * np.arange(64000) / SAMPLE_RATE)).astype(np.float32),
        "click": lambda: np.concatenate([silence(2.0), np.full(800, 0.5, np.float32), silence(2.0)]),  # 50 ms
    }[kind]()
    assert run(Endpointer(EndpointConfig(), gated(silero)), x) == []


def test_max_utterance_splits_real_speech(silero, hifitts):
    longest = max((x for _, x in hifitts), key=len)  # 10.08 s
    x = np.concatenate([silence(1.0), longest, silence(1.5)])
    utts = utterances(run(Endpointer(EndpointConfig(max_utterance_s=3.0), gated(silero)), x), x)
    assert len(utts) >= 3
    assert utts[0].reason is EndReason.MAX_LENGTH and utts[-1].reason is EndReason.SILENCE
    assert all(u.audio_end - u.start <= 3.0 + 1e-9 for u in utts if u.reason is EndReason.MAX_LENGTH)
    for prev, nxt in itertools.pairwise(utts):
        if prev.reason is EndReason.MAX_LENGTH and nxt.start - prev.end < 0.1:
            assert nxt.audio_start == pytest.approx(prev.audio_end)  # the split loses no audio


@pytest.mark.parametrize("window_frames", [1, 4, 32])
def test_window_size_does_not_change_real_segments(silero, speech, window_frames):
    x = np.concatenate([silence(0.5), read_wav(speech / "jfk" / "jfk.wav"), silence(1.0)])[:-123]
    reference = utterances(run(Endpointer(EndpointConfig(), gated(silero)), x, 10), x)
    utts = utterances(run(Endpointer(EndpointConfig(), gated(silero)), x, window_frames), x)
    assert len(reference) == len(utts) == 3  # "And so my fellow Americans," | "ask not" | "what your country …"
    for r, u in zip(reference, utts, strict=True):
        assert u.start == pytest.approx(r.start, abs=0.1) and u.end == pytest.approx(r.end, abs=0.1)
