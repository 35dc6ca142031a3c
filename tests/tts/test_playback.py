"""AlsaPlayer and Speaker through real libasound (the ``file`` plugin as the sound card), and scripted PCMs.

The rig is tests/audio/test_alsa.py's: an asoundrc defines ``pcm.spk { type file;
slave.pcm "null"; file OUT; format "raw"; truncate false }`` and every scenario runs in
a fresh interpreter (``python -m tests.tts.test_playback PARAMS``) with
``ALSA_CONFIG_PATH`` pointing at it. For playback the plugin writes to ``file`` exactly
what is written to the PCM. Found by trying (alsa-lib 1.2.8): with ``truncate false``
every open of the PCM writes a new file (OUT, OUT.0001, OUT.0002 …: it opens with
O_EXCL and counts up), so each stream's audio lands in a file of its own; the ``null`` slave has no clock, so writes never
wait, except when OUT is a FIFO: then the plugin blocks while the pipe is full, and the
reader sets the pace like a sound card would. The interrupt test uses that to stop
playback at a known point and count, in samples, what got through afterwards.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from tests.audio.test_alsa import _alsa_conf, needs_alsa
from tests.tts.voicegen import decode_id_audio
from voiced.audio.wav import read_wav
from voiced.tts.audio import AudioChunk
from voiced.tts.playback import AlsaPlayer
from voiced.tts.playconfig import PlaybackConfig, PlaybackOutcome

REPO = Path(__file__).resolve().parents[2]
TEXT = "Hello there. This is voiced speaking! Is the file plugin listening?"
PIPE_FRAMES = 65536 // 2  # Linux pipe capacity, in 16-bit mono frames


def playback_pcm(name: str, output: Path, truncate: bool = False) -> str:
    return (f'pcm.{name} {{\n  type file\n  slave.pcm "null"\n  file "{output}"\n  format "raw"\n'
            f"  truncate {'true' if truncate else 'false'}\n}}\n")


def run_scenario(tmp_path: Path, asoundrc: str, **params: Any) -> dict[str, Any]:
    """Run a playback scenario in a fresh interpreter; return its report."""
    conf = tmp_path / "asoundrc"
    conf.write_text(asoundrc)
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{conf}", HOME=str(tmp_path),
               XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(REPO))
    params.update(synth=str(tmp_path / "synth.npz"))
    proc = subprocess.run([sys.executable, "-m", "tests.tts.test_playback", json.dumps(params)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"scenario failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["stderr"] = proc.stderr
    synth = np.load(params["synth"])
    report["synthesized"] = [synth[k] for k in sorted(synth.files, key=int)]
    return report


def raw(path: Path, channels: int = 1) -> np.ndarray:
    return np.fromfile(path, dtype="<i2").reshape(-1, channels) if channels > 1 else np.fromfile(path, dtype="<i2")


# -- the child side ---------------------------------------------------------------------


def scenario(p: dict[str, Any]) -> None:
    """(In the child.) Play ``texts`` with a player or a speaker, as ``p["mode"]`` says."""
    threading.Timer(90, lambda: os._exit(3)).start()  # a hung device fails the test, never hangs it
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from voiced.tts.requests import SpeakerConfig
    from voiced.tts.speaker import Speaker
    from voiced.tts.voice import PiperVoice

    voice = PiperVoice.load(p["voice"])
    player = AlsaPlayer(PlaybackConfig(**p["config"]))
    synthesized = {str(i): np.concatenate([c.samples for c in voice.synthesize(t)]) for i, t in enumerate(p["texts"])}
    np.savez(p["synth"], **synthesized)  # type: ignore[arg-type]
    report: dict[str, Any] = {}
    if p["mode"] == "player":
        results = []
        with player:
            for volume, text in zip(p.get("volumes", [1.0] * len(p["texts"])), p["texts"]):
                stream = player.stream(volume=volume)
                for chunk in voice.synthesize(text):
                    stream.write(chunk)
                stream.close()
                result = stream.wait(60)
                assert result is not None
                results.append({"outcome": result.outcome.value, "frames": result.frames,
                                 "rate": result.device_rate, "error": result.error})
                if "define_after_first" in p:  # the device appears (a new inode: libasound notices)
                    conf = Path(p["define_after_first"]["conf"])
                    Path(f"{conf}.new").write_text(p["define_after_first"]["text"])
                    os.replace(f"{conf}.new", conf)
        report["results"] = results
    else:
        events: list[Any] = []
        speaker = Speaker(voice, player, SpeakerConfig(tail_ms=50), on_speaking=lambda on: events.append(on),
                          on_finished=lambda r: events.append(r.id))
        reader = _read_fifo_and_interrupt(p["fifo"], p["interrupt_at"], speaker) if p["mode"] == "interrupt" else None
        speaker.start()
        requests = [speaker.say(t, request_id=str(i)) for i, t in enumerate(p["texts"])]
        for r in requests:
            r.wait(60)
        speaker.close()
        if reader is not None:
            reader["thread"].join(30)
            report["received"] = reader["frames"]
        report["results"] = [{"outcome": r.result.outcome.value, "frames": r.result.played_frames,
                              "sentences": r.result.sentences, "error": r.result.error}
                             for r in requests if r.result]
        report["events"] = events
    report["stats"] = player.stats.__dict__
    print(json.dumps(report))
    os._exit(0)


def _read_fifo_and_interrupt(fifo: str, at_frames: int, speaker: Any) -> dict[str, Any]:
    """Read the FIFO like a sound card; interrupt the speaker once ``at_frames`` have come through."""
    state: dict[str, Any] = {"frames": 0}

    def read() -> None:
        with open(fifo, "rb") as f:  # blocks until the plugin opens the FIFO for writing
            interrupted = False
            while block := f.read(4096):
                state["frames"] += len(block) // 2
                if not interrupted and state["frames"] >= at_frames:
                    speaker.interrupt()
                    interrupted = True

    state["thread"] = threading.Thread(target=read, daemon=True)
    state["thread"].start()
    return state


# -- real libasound ---------------------------------------------------------------------


@needs_alsa
def test_the_device_receives_exactly_the_synthesized_samples(tmp_path: Path, id_voice: Path) -> None:
    out = tmp_path / "spk.raw"
    report = run_scenario(tmp_path, playback_pcm("spk", out), voice=str(id_voice), mode="player",
                          config={"device": "spk"}, texts=[TEXT])
    (result,) = report["results"]
    synthesized = report["synthesized"][0]
    assert result == {"outcome": "completed", "frames": len(synthesized), "rate": 16000, "error": None}
    np.testing.assert_array_equal(raw(out), synthesized)
    assert len(decode_id_audio(raw(out))) == 3  # and it is the three sentences the voice made
    assert report["stats"]["underruns"] == 0 and report["stats"]["frames_written"] == len(synthesized)


@needs_alsa
def test_the_speaker_plays_each_request_in_its_own_device_session(tmp_path: Path, lessac_id_voice: Path) -> None:
    out = tmp_path / "spk.raw"
    texts = ["First request. Two sentences.", "Second request!"]
    report = run_scenario(tmp_path, playback_pcm("spk", out), voice=str(lessac_id_voice), mode="speaker",
                          config={"device": "spk"}, texts=texts)
    assert [r["outcome"] for r in report["results"]] == ["completed", "completed"]
    assert [r["sentences"] for r in report["results"]] == [2, 1]
    np.testing.assert_array_equal(raw(out), report["synthesized"][0])
    np.testing.assert_array_equal(raw(Path(f"{out}.0001")), report["synthesized"][1])
    # half-duplex: on before the first audio, finished callbacks, one off after the tail
    assert report["events"] == [True, "0", "1", False]


@needs_alsa
def test_a_48k_device_gets_the_audio_resampled_with_soxr(tmp_path: Path, id_voice: Path) -> None:
    out = tmp_path / "spk48.raw"
    report = run_scenario(tmp_path, playback_pcm("spk48", out), voice=str(id_voice), mode="player",
                          config={"device": "spk48", "rate": 48000}, texts=[TEXT])
    (result,) = report["results"]
    src = report["synthesized"][0]
    got = raw(out)
    assert result["outcome"] == "completed" and result["rate"] == 48000 and result["frames"] == len(got)
    expected = soxr.resample(src.astype(np.float32) / 32768, 16000, 48000, quality="HQ")
    assert len(got) == len(expected) == 3 * len(src)
    np.testing.assert_allclose(got / 32768, expected, atol=1.5 / 32768)


@needs_alsa
def test_stereo_device_and_volume(tmp_path: Path, id_voice: Path) -> None:
    out = tmp_path / "st.raw"
    report = run_scenario(tmp_path, playback_pcm("st", out), voice=str(id_voice), mode="player",
                          config={"device": "st", "channels": 2, "volume": 0.5}, texts=[TEXT], volumes=[0.5])
    src = report["synthesized"][0]
    got = raw(out, channels=2)
    expected = np.round(src.astype(np.float32) / 32768 * (32768 * 0.25)).astype(np.int16)
    np.testing.assert_array_equal(got[:, 0], expected)
    np.testing.assert_array_equal(got[:, 1], expected)


@needs_alsa
def test_a_missing_device_fails_the_stream_and_the_next_stream_plays(tmp_path: Path, id_voice: Path) -> None:
    out = tmp_path / "later.raw"
    report = run_scenario(tmp_path, "# no playback device yet\n", voice=str(id_voice), mode="player",
                          config={"device": "later"}, texts=["One.", "Two."],
                          define_after_first={"conf": str(tmp_path / "asoundrc"), "text": playback_pcm("later", out)})
    first, second = report["results"]
    assert first["outcome"] == "failed" and "later" in first["error"] and first["rate"] is None
    assert report["stats"]["open_failures"] == 1 and "cannot open playback device later" in report["stderr"]
    assert second["outcome"] == "completed"
    np.testing.assert_array_equal(raw(out), report["synthesized"][1])


@needs_alsa
def test_voiced_say_plays_through_alsa(tmp_path: Path, id_voice: Path) -> None:
    out, wav = tmp_path / "say.raw", tmp_path / "say.wav"
    conf = tmp_path / "asoundrc"
    conf.write_text(playback_pcm("spk", out))
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{conf}", HOME=str(tmp_path), PYTHONPATH=str(REPO))
    say = [sys.executable, "-m", "voiced.tts.cli", "say", "--voice", str(id_voice)]
    played = subprocess.run([*say, "--device", "spk", "--json", TEXT], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert played.returncode == 0, played.stderr
    figures = json.loads(played.stdout)
    assert figures["outcome"] == "completed" and figures["device_rate"] == 16000 and figures["sentences"] == 3
    written = subprocess.run([*say, "--output", str(wav), TEXT], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=120, check=False)
    assert written.returncode == 0, written.stderr
    samples, _ = read_wav(wav)
    np.testing.assert_array_equal(raw(out), np.round(samples[:, 0] * 32768).astype(np.int16))
    assert figures["played_frames"] == len(raw(out))


@needs_alsa
def test_interrupt_stops_playback_within_the_buffers(tmp_path: Path, voices: Path, self_config: dict[str, Any]) -> None:
    from tests.tts.voicegen import make_voice

    voice = make_voice(voices / "ids-256", self_config, "ids", samples_per_id=256)  # ~64 ms of audio per phoneme
    fifo = tmp_path / "spk.fifo"
    os.mkfifo(fifo)
    texts = [" ".join(f"This is sentence number {i} of a long answer." for i in range(30))]
    at = 8000
    # truncate: with "truncate false" the plugin would leave the existing FIFO alone and write spk.fifo.0001
    report = run_scenario(tmp_path, playback_pcm("spk", fifo, truncate=True), voice=str(voice), mode="interrupt",
                          config={"device": "spk"}, texts=texts, fifo=str(fifo), interrupt_at=at)
    total = len(report["synthesized"][0])
    (result,) = report["results"]
    assert result["outcome"] == "interrupted"
    # after the interrupt at most what the pipe, the plugin's buffer and one period held got through
    bound = at + 4096 // 2 + PIPE_FRAMES + 2 * 4 * 320
    assert total > 10 * bound
    assert at <= report["received"] <= bound
    assert result["frames"] <= bound and report["stats"]["interrupted"] == 1


# -- scripted PCMs (no libasound) ---------------------------------------------------------


class ScriptedPcm:
    """Accepts writes into ``written``; ``script`` maps a write index to an action."""

    def __init__(self, rate: int, channels: int, period: int, script: dict[int, Any], gate: threading.Semaphore | None):
        self.rate, self.channels, self.period, self.script, self.gate = rate, channels, period, script, gate
        self.written: list[bytes] = []
        self.writes = 0
        self.xrun = False
        self.dropped = self.closed = False

    def info(self) -> dict[str, Any]:
        return {"rate": self.rate, "channels": self.channels, "period_size": self.period,
                "buffer_size": 4 * self.period}

    def state(self) -> int:
        return 4 if self.xrun else 3

    def avail(self) -> int:
        return 4 * self.period

    def write(self, data: bytes) -> int:
        if self.gate is not None:
            self.gate.acquire()
        i, self.writes = self.writes, self.writes + 1
        action = self.script.get(i)
        if isinstance(action, BaseException):
            self.xrun = getattr(action, "errno", None) == errno.EPIPE  # an underrun during the write
            raise action
        self.xrun = False  # pyalsaaudio prepares an XRUN PCM before writing
        self.written.append(data)
        if self.script.get(i + 1) == "xrun-before":  # the device runs dry before the next write
            self.xrun = True
        return len(data) // (2 * self.channels)

    def drop(self) -> None:
        self.dropped = True

    def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Device:
    def __init__(self, rates: dict[int, int | None], scripts: list[dict[int, Any]] | None = None,
                 gate: threading.Semaphore | None = None, fail_opens: frozenset[int] = frozenset()) -> None:
        self.rates, self.scripts, self.gate, self.fail_opens = rates, scripts or [], gate, fail_opens
        self.calls: list[tuple[int, int, int, int]] = []
        self.pcms: list[ScriptedPcm] = []

    def __call__(self, device: str, rate: int, channels: int, period: int, periods: int) -> ScriptedPcm:
        self.calls.append((rate, channels, period, periods))
        if len(self.calls) - 1 in self.fail_opens:
            raise OSError(errno.ENODEV, f"No such device [{device}]")
        actual = self.rates.get(rate)
        if actual is None:
            raise OSError(errno.EINVAL, f"Invalid argument [{device}]")
        script = self.scripts.pop(0) if actual == rate and self.scripts else {}
        pcm = ScriptedPcm(actual, channels, actual // 50, script, self.gate)
        self.pcms.append(pcm)
        return pcm


def tone(rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.round(12000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def play(device: Device, chunks: list[AudioChunk], **config: Any) -> tuple[AlsaPlayer, Any]:
    player = AlsaPlayer(PlaybackConfig(device="fake", **config), open_pcm=device)
    with player:
        stream = player.stream()
        for c in chunks:
            stream.write(c)
        stream.close()
        result = stream.wait(30)
    return player, result


def test_underruns_are_counted_and_playback_goes_on() -> None:
    audio = tone(16000, 1.0)
    broken = OSError(errno.EPIPE, "Broken pipe [fake]")
    device = Device({16000: 16000}, [{3: "xrun-before", 7: broken, 8: broken, 20: "xrun-before"}])
    player, result = play(device, [AudioChunk(audio[:8000], 16000), AudioChunk(audio[8000:], 16000)])
    assert result.outcome is PlaybackOutcome.COMPLETED and result.frames == 16000
    assert result.underruns == 4 and player.stats.underruns == 4 and player.stats.write_errors == 0
    np.testing.assert_array_equal(np.frombuffer(b"".join(device.pcms[0].written), "<i2"), audio)
    assert all(len(w) == 320 * 2 for w in device.pcms[0].written)  # whole 20 ms periods
    assert len(device.calls) == 1


def test_device_picking_another_rate_is_reopened_there_and_fed_resampled_audio() -> None:
    audio = tone(22050, 0.5)
    device = Device({22050: 48000, 48000: 48000})
    _, result = play(device, [AudioChunk(audio, 22050)])
    assert [c[0] for c in device.calls] == [22050, 48000] and device.pcms[0].closed
    assert result.outcome is PlaybackOutcome.COMPLETED and result.device_rate == 48000
    got = np.frombuffer(b"".join(device.pcms[1].written), "<i2")
    expected = soxr.resample(audio.astype(np.float32) / 32768, 22050, 48000, quality="HQ")
    assert len(got) == len(expected)
    np.testing.assert_allclose(got / 32768, expected, atol=1.5 / 32768)


def test_device_refusing_the_rate_falls_back() -> None:
    device = Device({22050: None, 44100: 44100})
    _, result = play(device, [AudioChunk(tone(22050, 0.2), 22050)], fallback_rate=44100)
    assert [c[0] for c in device.calls] == [22050, 44100] and result.device_rate == 44100
    assert result.frames == 2 * int(22050 * 0.2)


def test_a_device_lost_mid_stream_is_reopened_once() -> None:
    lost = OSError(errno.ENODEV, "No such device [fake]")
    device = Device({16000: 16000}, [{5: lost}, {}])
    player, result = play(device, [AudioChunk(tone(16000, 0.5), 16000)])
    assert result.outcome is PlaybackOutcome.COMPLETED and len(device.pcms) == 2
    assert player.stats.write_errors == 1 and "No such device" in (player.stats.last_error or "")
    assert [len(p.written) for p in device.pcms] == [5, 20]  # the failed period went to the reopened device
    assert result.frames == 8000


def test_a_device_that_stays_lost_fails_the_stream_and_the_next_stream_retries() -> None:
    lost = OSError(errno.ENODEV, "No such device [fake]")
    device = Device({16000: 16000}, [{2: lost}], fail_opens=frozenset({1}))  # the reopen fails
    player = AlsaPlayer(PlaybackConfig(device="fake", fallback_rate=16000), open_pcm=device)
    with player:
        stream = player.stream()
        stream.write(AudioChunk(tone(16000, 0.5), 16000))
        stream.close()
        first = stream.wait(30)
        second_stream = player.stream()
        second_stream.write(AudioChunk(tone(16000, 0.1), 16000))
        second_stream.close()
        second = second_stream.wait(30)
    assert first is not None and second is not None
    assert first.outcome is PlaybackOutcome.FAILED and "lost" in (first.error or "")
    assert second.outcome is PlaybackOutcome.COMPLETED and second.frames == 1600


def test_stop_takes_effect_within_a_period() -> None:
    gate = threading.Semaphore(0)
    device = Device({16000: 16000}, gate=gate)
    player = AlsaPlayer(PlaybackConfig(device="fake"), open_pcm=device)
    with player:
        stream = player.stream()
        stream.write(AudioChunk(tone(16000, 2.0), 16000))  # 100 periods
        for _ in range(10):
            gate.release()  # the "sound card" takes 10 periods
        while device.pcms == [] or device.pcms[0].writes < 10:
            threading.Event().wait(0.01)
        player.stop()
        for _ in range(100):
            gate.release()  # and would take everything else
        result = stream.wait(30)
        assert not stream.write(AudioChunk(tone(16000, 0.1), 16000))  # a stopped stream takes no more
    pcm = device.pcms[0]
    assert result is not None
    assert result.outcome is PlaybackOutcome.INTERRUPTED and pcm.dropped and pcm.closed
    assert 10 * 320 <= result.frames <= 11 * 320  # the write in progress at most, nothing after
    assert player.stats.interrupted == 1


def test_stop_between_chunks_drops_what_the_device_holds() -> None:
    device = Device({16000: 16000})
    player = AlsaPlayer(PlaybackConfig(device="fake"), open_pcm=device)
    with player:
        stream = player.stream()
        stream.write(AudioChunk(tone(16000, 0.2), 16000))  # 10 whole periods, then the next chunk is slow to come
        for _ in range(3000):
            if device.pcms and device.pcms[0].writes == 10 and player._active is None:
                break
            threading.Event().wait(0.01)
        pcm = device.pcms[0]
        assert pcm.writes == 10 and not pcm.closed  # open between chunks, holding the last periods
        player.stop()
        result = stream.wait(30)
        assert result is not None and result.outcome is PlaybackOutcome.INTERRUPTED
        assert pcm.dropped and pcm.closed  # silent now, not when the player closes


if __name__ == "__main__":  # the child side of run_scenario
    scenario(json.loads(sys.argv[1]))
