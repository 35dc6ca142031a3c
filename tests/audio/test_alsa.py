"""AlsaSource through real libasound, with the ALSA ``file`` plugin standing in for a sound card.

How the rig works: each scenario writes an asoundrc in a temp dir defining capture PCMs
like ``pcm.mic { type file; slave.pcm "null"; file "/dev/null"; infile "mic.raw" }``:
the file plugin reads from the ``null`` slave and then overwrites the buffer with the
next bytes of ``infile`` (raw, in the format, channels and rate the PCM is opened with;
here S16_LE). libasound loads its configuration once per process, so every scenario runs
in a fresh interpreter (``python -m tests.audio.test_alsa PARAMS_JSON``) with
``ALSA_CONFIG_PATH=<alsa.conf>:<our asoundrc>``. Files named there (unlike ``~/.asoundrc``)
are re-read when they change, which lets a scenario define a PCM after capture started.

What the file plugin does, found by trying (alsa-lib 1.2.8):
- reads never wait: the null slave has no clock, so capture runs as fast as the CPU and
  never overruns;
- past the end of ``infile`` reads keep succeeding with full periods, never an error
  or a short read, but the plugin no longer writes into the caller's buffer: the
  "samples" are whatever that memory held. pyalsaaudio allocates a fresh buffer per
  read, so in practice that is zeros or, once Python recycles the block, the last
  period repeated forever (a 100 Hz buzz). A failing ``read()`` of the infile is only
  logged by libasound and behaves the same. Tests therefore never compare samples past
  the end of an infile, and pad infiles with explicit silence when they need some;
- the infile is opened when the PCM is opened: a missing infile makes the open fail;
- ``file`` (the output) is required even for capture; it is opened lazily at the first
  flush of its buffer (after one buffer of reads) and when that fails every such flush
  makes ``snd_pcm_readi`` return -EIO: a real, repeatable read error;
- nothing in alsa-lib can make a card-less PCM refuse 16 kHz: ``null`` and ``file``
  accept any rate, ``plug``/``rate`` convert instead of refusing, and ``share`` (the one
  plugin that pins a rate on a non-hw slave) reports 48 kHz as wanted but aborts on an
  assertion at the first read and corrupts the heap when closed and reopened.
  So the real-libasound 48 kHz test captures a 48 kHz device at 48 kHz
  (``rate=48000``) and checks the resampled result, while rate negotiation (the device
  offers another rate, or refuses to open at 16 kHz) and overruns are checked against a
  scripted PCM in-process.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr

from voiced.audio.alsa import IDLE_S, AlsaCaptureConfig, AlsaSource
from voiced.audio.frames import SAMPLE_RATE
from voiced.audio.source import NullSource, WavSource, open_source
from voiced.errors import AudioError, ConfigError
from voiced.runtime.backoff import BackoffPolicy

REPO = Path(__file__).resolve().parents[2]
FAST = BackoffPolicy(initial=0.02, maximum=0.1)


def _alsa_conf() -> Path | None:
    dirs = [os.environ.get("ALSA_CONFIG_DIR", ""), "/usr/share/alsa", "/usr/local/share/alsa", "/etc/alsa"]
    return next((Path(d) / "alsa.conf" for d in dirs if d and (Path(d) / "alsa.conf").is_file()), None)


def _alsa_missing() -> str | None:
    try:
        import alsaaudio  # noqa: F401
    except ImportError as e:
        return f"pyalsaaudio/libasound unavailable ({e}); apt-get install libasound2-dev && pip install pyalsaaudio"
    if _alsa_conf() is None:
        return "libasound's alsa.conf not found (apt-get install libasound2-data)"
    return None


needs_alsa = pytest.mark.skipif(_alsa_missing() is not None, reason=_alsa_missing() or "")


def file_pcm(name: str, infile: Path, output: str = "/dev/null") -> str:
    return (f'pcm.{name} {{\n  type file\n  slave.pcm "null"\n  file "{output}"\n'
            f'  infile "{infile}"\n  format "raw"\n}}\n')


def run_scenario(tmp_path: Path, asoundrc: str, **params: Any) -> tuple[dict[str, Any], np.ndarray]:
    """Run ``capture`` in a fresh interpreter; return its report and the captured samples."""
    conf = tmp_path / "asoundrc"
    conf.write_text(asoundrc)
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{conf}", HOME=str(tmp_path),
               XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(REPO))
    params.update(conf=str(conf), out=str(tmp_path / "captured.npy"))
    proc = subprocess.run([sys.executable, "-m", "tests.audio.test_alsa", json.dumps(params)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"scenario failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["stderr"] = proc.stderr
    return report, np.load(params["out"])


def capture_scenario(p: dict[str, Any]) -> None:
    """(In the child.) Capture ``samples`` 16 kHz samples, doing the scheduled changes meanwhile."""
    threading.Timer(60, lambda: os._exit(3)).start()  # a hung capture fails the test, never hangs it
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    config = dict(p["config"])
    backoff = BackoffPolicy(**config.pop("backoff")) if "backoff" in config else FAST
    source = AlsaSource(AlsaCaptureConfig(backoff=backoff, **config))
    for when, action, args in p.get("later", []):
        threading.Timer(when, _ACTIONS[action], args).start()
    if "stop_after" in p:
        threading.Timer(p["stop_after"], source.stop).start()
    got, total, describe, empty = [], 0, None, 0
    with source:
        for chunk in source.chunks():
            if not len(chunk):  # the device is missing: the source says it is still trying
                empty += 1
                continue
            got.append(chunk)
            total += len(chunk)
            describe = source.describe()
            if total >= p["samples"]:
                break
    np.save(p["out"], np.concatenate(got) if got else np.zeros(0, np.float32))
    print(json.dumps({"stats": asdict(source.stats), "describe": describe, "rate": source.capture_rate,
                      "empty_chunks": empty}))
    os._exit(0)  # skip waiting for leftover timers


def _replace_file(path: str, text: str) -> None:
    # A new inode, so libasound notices the change even within the same second.
    tmp = path + ".new"
    Path(tmp).write_text(text)
    os.replace(tmp, path)


_ACTIONS = {"copy": shutil.copyfile, "replace": _replace_file}


def int16s(x: np.ndarray) -> np.ndarray:
    """Back from float32 to the int16 codes the device delivered (exact: x = code / 32768)."""
    return np.round(x * 32768).astype(np.int16)


# -- real libasound ---------------------------------------------------------------------


@needs_alsa
def test_16k_capture_equals_the_infile(tmp_path: Path) -> None:
    infile = tmp_path / "mic.raw"
    codes = np.random.default_rng(0).integers(-32768, 32768, 16000, dtype=np.int16)  # 1 s
    codes[:2] = [-32768, 32767]
    codes.astype("<i2").tofile(infile)
    report, out = run_scenario(tmp_path, file_pcm("mic", infile), config={"device": "mic"}, samples=16000)
    assert report["rate"] == 16000 and report["describe"] == "alsa:mic @16000 Hz"
    assert len(out) == 16000 and out.dtype == np.float32
    np.testing.assert_array_equal(int16s(out), codes)
    stats = report["stats"]
    assert stats["samples_read"] == stats["samples_out"] == 16000 and stats["chunks"] == 100
    assert stats["overruns"] == stats["read_errors"] == stats["open_failures"] == stats["reopens"] == 0


@needs_alsa
def test_reading_past_the_end_of_the_infile_goes_on_without_errors(tmp_path: Path) -> None:
    infile = tmp_path / "short.raw"
    np.arange(1600, dtype="<i2").tofile(infile)  # 0.1 s, then 0.9 s of undefined "samples"
    report, out = run_scenario(tmp_path, file_pcm("short", infile), config={"device": "short"}, samples=16000)
    np.testing.assert_array_equal(int16s(out[:1600]), np.arange(1600))
    assert len(out) == 16000 and report["stats"]["read_errors"] == 0


@needs_alsa
def test_48k_device_is_resampled_to_16k(tmp_path: Path) -> None:
    infile = tmp_path / "mic48.raw"
    t = np.arange(48000 * 2) / 48000  # 2 s of 1 kHz at 48 kHz, then 0.5 s of silence
    tone = np.round(0.5 * 32767 * np.sin(2 * np.pi * 1000 * t))
    np.concatenate([tone, np.zeros(24000)]).astype("<i2").tofile(infile)
    report, out = run_scenario(tmp_path, file_pcm("mic48", infile),
                               config={"device": "mic48", "rate": 48000}, samples=38400)
    assert report["rate"] == 48000 and report["describe"] == "alsa:mic48 @48000 Hz→16 kHz"
    assert report["stats"]["samples_read"] >= 3 * 38400
    loud = np.nonzero(np.abs(out[:38400]) > 0.01)[0]
    assert abs(loud[-1] + 1 - 2 * SAMPLE_RATE) <= 8  # 2 s of tone at 16 kHz, then the silence
    tone16 = out[1000:31000]
    spectrum = np.abs(np.fft.rfft(tone16 * np.hanning(len(tone16))))
    assert abs(np.fft.rfftfreq(len(tone16), 1 / SAMPLE_RATE)[np.argmax(spectrum)] - 1000) < 1
    assert abs(np.max(np.abs(tone16)) - 0.5) < 0.01


@needs_alsa
@pytest.mark.parametrize("channel", [0, 1, None])
def test_stereo_device_pick_or_downmix(tmp_path: Path, channel: int | None) -> None:
    rng = np.random.default_rng(1)
    left, right = (rng.integers(-32768, 32768, 8000, dtype=np.int16) for _ in range(2))
    infile = tmp_path / "stereo.raw"
    np.stack([left, right], axis=1).astype("<i2").tofile(infile)
    report, out = run_scenario(tmp_path, file_pcm("st", infile),
                               config={"device": "st", "channels": 2, "channel": channel}, samples=8000)
    out = out[:8000]
    if channel is None:
        np.testing.assert_array_equal(out, (left / 32768 + right / 32768).astype(np.float32) / 2)
        assert report["describe"] == "alsa:st @16000 Hz 2ch→mix"
    else:
        np.testing.assert_array_equal(int16s(out), (left, right)[channel])
        assert report["describe"] == f"alsa:st @16000 Hz 2ch→ch{channel}"


@needs_alsa
def test_missing_infile_is_retried_until_it_appears(tmp_path: Path) -> None:
    ready, infile = tmp_path / "ready.raw", tmp_path / "late.raw"
    codes = np.arange(-8000, 8000, dtype=np.int16)
    codes.astype("<i2").tofile(ready)
    report, out = run_scenario(tmp_path, file_pcm("late", infile), config={"device": "late"}, samples=16000,
                               later=[(0.4, "copy", [str(ready), str(infile)])])
    stats = report["stats"]
    assert stats["open_failures"] >= 1 and stats["reopens"] == 1
    assert "late.raw" in stats["last_error"] or "No such file" in stats["last_error"]
    assert "cannot open capture device late" in report["stderr"]  # reported in the log
    np.testing.assert_array_equal(int16s(out[:16000]), codes)


@needs_alsa
def test_a_missing_card_is_warned_about_once_and_libasound_keeps_quiet(tmp_path: Path) -> None:
    """Each attempt to open a card that is not there makes libasound print its own lines to stderr
    (and the journal) unless they are routed into the log; voiced's warning comes once."""
    report, out = run_scenario(tmp_path, "# no cards\n", config={"device": "hw:7,0"}, samples=16000, stop_after=0.6)
    assert len(out) == 0 and report["stats"]["open_failures"] >= 3
    assert "ALSA lib" not in report["stderr"]
    assert report["stderr"].count("cannot open capture device hw:7,0") == 1, report["stderr"]
    assert "opened at" not in report["stderr"]  # the fallback rate failed too: not said at every attempt


@needs_alsa
def test_pcm_defined_later_in_the_asoundrc_is_picked_up(tmp_path: Path) -> None:
    infile = tmp_path / "mic.raw"
    codes = np.arange(16000, dtype=np.int16)
    codes.astype("<i2").tofile(infile)
    conf = tmp_path / "asoundrc"
    report, out = run_scenario(tmp_path, "# no capture device yet\n", config={"device": "hotplug"}, samples=16000,
                               later=[(0.4, "replace", [str(conf), file_pcm("hotplug", infile)])])
    assert report["stats"]["open_failures"] >= 1 and report["stats"]["reopens"] == 1
    np.testing.assert_array_equal(int16s(out[:16000]), codes)


@needs_alsa
def test_read_errors_reopen_and_never_raise(tmp_path: Path) -> None:
    infile = tmp_path / "mic.raw"
    np.full(32000, 1000, np.int16).tofile(infile)
    # The output file cannot be created: every flush of the plugin's buffer fails with -EIO.
    asoundrc = file_pcm("flaky", infile, output=str(tmp_path / "no" / "such" / "dir.raw"))
    report, out = run_scenario(tmp_path, asoundrc, config={"device": "flaky"}, samples=16000)
    stats = report["stats"]
    assert len(out) >= 16000 and np.all(int16s(out) == 1000)
    assert stats["read_errors"] >= 3 and stats["reopens"] == stats["read_errors"]
    assert "Input/output error" in stats["last_error"]


@needs_alsa
def test_a_device_whose_reads_keep_failing_soon_after_opening_is_reopened_with_backoff(tmp_path: Path) -> None:
    """A flaky microphone that opens and then fails every read after its first buffer was reopened
    in a tight loop: a warning per failure (34,847 lines in 15 s) and a whole core busy. Failures soon
    after opening back off as failed opens do, and the warnings are paced."""
    infile = tmp_path / "mic.raw"
    np.full(32000, 1000, np.int16).tofile(infile)
    asoundrc = file_pcm("flaky", infile, output=str(tmp_path / "no" / "such" / "dir.raw"))
    report, _ = run_scenario(tmp_path, asoundrc, samples=10**9, stop_after=3.0,
                             config={"device": "flaky", "backoff": {"initial": 0.2, "maximum": 0.8, "jitter": 0.0}})
    stats = report["stats"]
    # 0.2 + 0.4 + 0.8 + 0.8 ... s between attempts: a handful in 3 s, not thousands
    assert 3 <= stats["read_errors"] <= 8, stats
    warned = [line for line in report["stderr"].splitlines() if line.startswith("WARNING") and "failed" in line]
    assert len(warned) == 1 and "within 5 s of opening" in warned[0], warned


@needs_alsa
def test_a_missing_device_leaves_the_reader_going_while_it_is_retried(tmp_path: Path) -> None:
    """The backoff waits up to 30 s between attempts; the daemon's capture stage beats its heartbeat
    with each chunk, so a wait without one stalled it (10 s) and the watchdog had systemd restart a
    daemon whose microphone was merely unplugged. Now an empty chunk comes at least every IDLE_S."""
    report, out = run_scenario(tmp_path, "", samples=1, stop_after=3 * IDLE_S + 0.3,
                               config={"device": "nosuchpcm", "backoff": {"initial": 10.0, "maximum": 10.0}})
    assert len(out) == 0 and report["stats"]["open_failures"] == 1, "one attempt: the next is 10 s away"
    assert report["empty_chunks"] >= 3, report


@needs_alsa
def test_stop_ends_capture_while_waiting_for_a_device(tmp_path: Path) -> None:
    report, out = run_scenario(tmp_path, "", config={"device": "nosuchpcm", "backoff": {}}, samples=1,
                               stop_after=0.3)
    assert len(out) == 0 and report["stats"]["open_failures"] >= 1
    assert report["describe"] is None


# -- negotiation, overruns and errors against a scripted PCM (no libasound needed) ------


class ScriptedPcm:
    """Plays back a script of reads: bytes, an int (a negative return), or an exception."""

    def __init__(self, rate: int, channels: int, script: list[Any], done: threading.Event) -> None:
        self.rate, self.channels, self.script, self.done, self.closed = rate, channels, script, done, False

    def info(self) -> dict[str, Any]:
        return {"rate": self.rate, "channels": self.channels}

    def read(self) -> tuple[int, bytes]:
        if not self.script:
            self.done.set()
            return 0, b""
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, int):
            return step, b""
        return len(step) // (2 * self.channels), step

    def close(self) -> None:
        self.closed = True


class Device:
    """A PCM opener: ``rates`` maps a requested rate to the rate the device reports (None: refuse)."""

    def __init__(self, rates: dict[int, int | None], scripts: list[list[Any]], channels: int = 1,
                 fail_first: int = 0) -> None:
        self.rates, self.scripts, self.channels, self.fail_first = rates, scripts, channels, fail_first
        self.calls: list[tuple[str, int, int, int]] = []
        self.pcms: list[ScriptedPcm] = []
        self.done = threading.Event()

    def __call__(self, device: str, rate: int, channels: int, period: int) -> ScriptedPcm:
        self.calls.append((device, rate, channels, period))
        if self.fail_first > 0:
            self.fail_first -= 1
            raise OSError(errno.ENODEV, "No such device")
        actual = self.rates.get(rate)
        if actual is None:
            raise OSError(errno.EINVAL, f"Invalid argument [{device}]")
        script = self.scripts.pop(0) if actual == rate and self.scripts else []
        pcm = ScriptedPcm(actual, self.channels, script, self.done)
        self.pcms.append(pcm)
        return pcm


def capture_all(device: Device, **config: Any) -> tuple[AlsaSource, np.ndarray]:
    source = AlsaSource(AlsaCaptureConfig(device="fake", backoff=FAST, **config), stop=device.done, open_pcm=device)
    with source:
        chunks = list(source.chunks())
    return source, np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


def tone(rate: int, seconds: float, freq: float = 1000.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.round(0.5 * 32767 * np.sin(2 * np.pi * freq * t)).astype("<i2")


def periods(codes: np.ndarray, rate: int) -> list[bytes]:
    """S16_LE cut into 10 ms periods."""
    return [codes[i : i + rate // 100].tobytes() for i in range(0, len(codes), rate // 100)]


def assert_resampled(out: np.ndarray, codes: np.ndarray, rate: int) -> None:
    """``out`` is the one-shot 16 kHz conversion, but for the filter delay still held back."""
    expected = soxr.resample(codes.astype(np.float32) / 32768, rate, SAMPLE_RATE, quality="HQ")
    assert len(expected) - SAMPLE_RATE // 20 <= len(out) <= len(expected)  # < 50 ms in the filter
    np.testing.assert_allclose(out, expected[: len(out)], atol=1e-6)


def test_device_offering_another_rate_is_reopened_there_and_resampled() -> None:
    codes = tone(48000, 1.0)
    device = Device({16000: 48000, 48000: 48000}, [periods(codes, 48000)])
    source, out = capture_all(device)
    assert [c[1:] for c in device.calls] == [(16000, 1, 160), (48000, 1, 480)]
    assert device.pcms[0].closed and source.capture_rate == 48000
    assert source.describe() == "alsa:fake @48000 Hz→16 kHz"
    assert_resampled(out, codes, 48000)


def test_device_refusing_16k_falls_back_to_the_configured_rate() -> None:
    codes = tone(44100, 0.5, freq=440.0)
    device = Device({16000: None, 44100: 44100}, [periods(codes, 44100)])
    source, out = capture_all(device, fallback_rate=44100)
    assert [c[1] for c in device.calls] == [16000, 44100] and device.calls[1][3] == 441
    assert source.capture_rate == 44100 and source.stats.open_failures == 0
    assert_resampled(out, codes, 44100)


def test_overruns_are_counted_and_capture_goes_on() -> None:
    period = np.arange(160, dtype="<i2").tobytes()
    device = Device({16000: 16000}, [[period, -errno.EPIPE, period, -errno.EPIPE, -errno.EPIPE, period]])
    source, out = capture_all(device)
    assert source.stats.overruns == 3 and source.stats.chunks == 3 and len(out) == 480
    assert source.stats.reopens == 0 and len(device.calls) == 1


def test_a_lost_device_is_reopened_and_capture_continues() -> None:
    period = np.full(160, 7, dtype="<i2").tobytes()
    lost = OSError(errno.ENODEV, "No such device [fake]")
    device = Device({16000: 16000}, [[period, period, lost], [period]], fail_first=0)
    source, out = capture_all(device)
    assert source.stats.read_errors == 1 and source.stats.reopens == 1
    assert device.pcms[0].closed and len(out) == 480 and np.all(int16s(out) == 7)
    assert "No such device" in (source.stats.last_error or "")


def test_open_failures_back_off_then_count_one_reopen() -> None:
    device = Device({16000: 16000}, [[np.zeros(160, "<i2").tobytes()]], fail_first=3)
    source, out = capture_all(device, fallback_rate=16000)  # one open per attempt
    assert source.stats.open_failures == 3 and source.stats.reopens == 1 and len(out) == 160


def test_a_device_that_stays_missing_is_warned_about_at_first_then_every_twentieth_attempt(caplog) -> None:
    device = Device({16000: 16000}, [[np.zeros(160, "<i2").tobytes()]], fail_first=45)
    quick = BackoffPolicy(initial=0.001, maximum=0.002)
    source = AlsaSource(AlsaCaptureConfig(device="fake", fallback_rate=16000, backoff=quick), device.done, device)
    with caplog.at_level(logging.DEBUG, logger="voiced.audio.alsa"), source:
        chunks = [c for c in source.chunks() if len(c)]
    assert len(chunks) == 1 and source.stats.open_failures == 45
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "cannot open capture device" in r.getMessage()]
    assert len(said) == 45
    assert [m for level, m in said if level == logging.WARNING] == [
        f"cannot open capture device fake: [Errno 19] No such device (attempt {n})" for n in (1, 20, 40)]


def test_device_with_fewer_channels_than_the_pick_is_an_open_failure() -> None:
    device = Device({16000: 16000}, [], channels=1)
    stop = threading.Event()
    source = AlsaSource(AlsaCaptureConfig(device="fake", channels=2, channel=1, backoff=FAST), stop, device)
    threading.Timer(0.3, stop.set).start()
    with source:
        assert not any(len(c) for c in source.chunks())  # only the empty ones of a device being retried
    assert source.stats.open_failures >= 2 and "channel 1" in (source.stats.last_error or "")


# -- config and open_source -------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    {"device": ""}, {"rate": 0}, {"rate": 16000.0}, {"fallback_rate": True}, {"channels": 0},
    {"channels": 2, "channel": 2}, {"channel": -1}, {"period_ms": 0}, {"backoff": 3},
])
def test_config_validation(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        AlsaCaptureConfig(**bad)
    assert err.value.key in bad


def test_config_from_dict_names_key_and_file() -> None:
    cfg = AlsaCaptureConfig.from_dict({"device": "hw:1,0", "channels": 2, "backoff": {"initial": 1.0}})
    assert cfg.device == "hw:1,0" and cfg.backoff.initial == 1.0 and cfg.period_frames(48000) == 480
    with pytest.raises(ConfigError, match=r"audio.capture.rat in /etc/voiced/voiced.toml: unknown key"):
        AlsaCaptureConfig.from_dict({"rat": 16000}, source="/etc/voiced/voiced.toml")
    with pytest.raises(ConfigError, match=r"audio.capture.period_ms in v.toml"):
        AlsaCaptureConfig.from_dict({"period_ms": 5000}, source="v.toml")
    with pytest.raises(ConfigError, match=r"audio.capture.backoff"):
        AlsaCaptureConfig.from_dict({"backoff": {"bogus": 1}})


def test_open_source_specs(tmp_path: Path) -> None:
    alsa = open_source("alsa:hw:1,0", alsa=AlsaCaptureConfig(channels=2, channel=1))
    assert isinstance(alsa, AlsaSource) and alsa.config.device == "hw:1,0" and alsa.config.channel == 1
    assert alsa.describe() == "alsa:hw:1,0 (not open)"
    wav = open_source(f"file:{tmp_path}/x.wav", channel=1, realtime=True)
    assert isinstance(wav, WavSource) and wav.path == tmp_path / "x.wav" and wav.realtime and wav.channel == 1
    with pytest.raises(AudioError, match="x.wav"):
        wav.open()
    stop = threading.Event()
    none = open_source("none", stop=stop)
    assert isinstance(none, NullSource) and none.describe() == "none"


@pytest.mark.parametrize("spec", ["", "alsa", "alsa:", "file:", "file:  ", "pulse:default", "none:x", "hw:1,0"])
def test_open_source_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(ConfigError) as err:
        open_source(spec, config_file="voiced.toml")
    assert err.value.key == "audio.source" and str(err.value).startswith("audio.source in voiced.toml:")


def test_null_source_blocks_until_stopped() -> None:
    source = NullSource()
    result: list[list[np.ndarray]] = []
    worker = threading.Thread(target=lambda: result.append(list(source.chunks())))
    with source:
        worker.start()
        worker.join(0.2)
        assert worker.is_alive()  # still waiting: it has no audio and is not stopped
        source.stop()
        worker.join(10)
    assert not worker.is_alive() and result == [[]]


if __name__ == "__main__":  # the child side of run_scenario
    capture_scenario(json.loads(sys.argv[1]))
